"""PollCheck: the round workflow's "Poll check" step."""

from hyperpod_dhc.deephealth.handlers.round_step import round_step
from hyperpod_dhc.deephealth.settings import PollCheckSettings
from hyperpod_dhc.deephealth.usecases.poll_check import poll_check

lambda_handler = round_step(PollCheckSettings, poll_check)
