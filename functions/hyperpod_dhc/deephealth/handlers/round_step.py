"""The shape shared by the round workflow's step Lambdas: parse the round state, one use-case call, return
the new state. Each step keeps its own handler module (one module per Lambda); this builds its handler."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hyperpod_dhc.deephealth import settings
from hyperpod_dhc.deephealth.domain.rounds import RoundState
from hyperpod_dhc.deephealth.observability import logger, metrics
from hyperpod_dhc.deephealth.usecases.context import Context
from hyperpod_dhc.deephealth.wiring import build_context

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


def round_step(
    settings_model: type[settings._Settings], step: Callable[[Context, RoundState], RoundState]
) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    ctx = build_context(settings.load(settings_model))  # at cold start: a bad env fails here

    @metrics.log_metrics
    @logger.inject_lambda_context(clear_state=True)
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        state = RoundState.model_validate(event)
        logger.set_correlation_id(state.round_id or f"{state.cluster}-r{state.round_seq:06d}")
        return step(ctx, state).model_dump(mode="json")

    return lambda_handler
