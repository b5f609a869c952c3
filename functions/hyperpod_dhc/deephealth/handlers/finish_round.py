"""FinishRound: the round workflow's "Finish round (and Abandon round)" step."""

from hyperpod_dhc.deephealth.handlers.round_step import round_step
from hyperpod_dhc.deephealth.settings import FinishRoundSettings
from hyperpod_dhc.deephealth.usecases.finish_round import finish_round

lambda_handler = round_step(FinishRoundSettings, finish_round)
