"""ClaimRound: the round workflow's "Claim round" step."""

from deephealth.controller import Controller
from deephealth.handlers.round_step import round_step
from deephealth.settings import ClaimRoundSettings

lambda_handler = round_step(ClaimRoundSettings, Controller.claim_round)
