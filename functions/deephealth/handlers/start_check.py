"""StartCheck: the round workflow's "Start check" step."""

from deephealth.handlers.round_step import round_step
from deephealth.settings import StartCheckSettings
from deephealth.usecases.start_check import start_check

lambda_handler = round_step(StartCheckSettings, start_check)
