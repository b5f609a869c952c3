"""FinishRound: the round workflow's "Finish round (and Abandon round)" step."""

from deephealth.handlers.round_step import round_step
from deephealth.settings import FinishRoundSettings
from deephealth.usecases.finish_round import finish_round

lambda_handler = round_step(FinishRoundSettings, finish_round)
