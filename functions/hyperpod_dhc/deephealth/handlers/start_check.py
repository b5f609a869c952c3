"""StartCheck: the round workflow's "Start check" step."""

from hyperpod_dhc.deephealth.handlers.round_step import round_step
from hyperpod_dhc.deephealth.settings import StartCheckSettings
from hyperpod_dhc.deephealth.usecases.start_check import start_check

lambda_handler = round_step(StartCheckSettings, start_check)
