"""StartCheck: the round workflow's "Start check" step."""

from deephealth.controller import Controller
from deephealth.handlers.round_step import round_step
from deephealth.settings import StartCheckSettings

lambda_handler = round_step(StartCheckSettings, Controller.start_check)
