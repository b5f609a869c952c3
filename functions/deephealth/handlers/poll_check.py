"""PollCheck: the round workflow's "Poll check" step."""

from deephealth.controller import Controller
from deephealth.handlers.round_step import round_step
from deephealth.settings import PollCheckSettings

lambda_handler = round_step(PollCheckSettings, Controller.poll_check)
