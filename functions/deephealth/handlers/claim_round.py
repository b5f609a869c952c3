"""ClaimRound: the round workflow's "Claim round" step."""

from deephealth.handlers.round_step import round_step
from deephealth.settings import ClaimRoundSettings
from deephealth.usecases.claim_round import claim_round

lambda_handler = round_step(ClaimRoundSettings, claim_round)
