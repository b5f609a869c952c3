"""FinishRound: the round workflow's "Finish round (and Abandon round)" step."""

from deephealth.controller import Controller
from deephealth.handlers.round_step import round_step
from deephealth.settings import FinishRoundSettings

lambda_handler = round_step(FinishRoundSettings, Controller.finish_round)
