"""PollCheck: the round workflow's "Poll check" step."""

from deephealth.handlers.round_step import round_step
from deephealth.settings import PollCheckSettings
from deephealth.usecases.poll_check import poll_check

lambda_handler = round_step(PollCheckSettings, poll_check)
