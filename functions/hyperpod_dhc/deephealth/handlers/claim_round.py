"""ClaimRound: the round workflow's "Claim round" step."""

from hyperpod_dhc.deephealth.handlers.round_step import round_step
from hyperpod_dhc.deephealth.settings import ClaimRoundSettings
from hyperpod_dhc.deephealth.usecases.claim_round import claim_round

lambda_handler = round_step(ClaimRoundSettings, claim_round)
