"""The shape shared by the round workflow's step Lambdas: parse the round state, one Controller call, return
the new state. Each step keeps its own handler module (one module per Lambda); this builds its handler."""

from collections.abc import Callable

from deephealth import settings
from deephealth.controller import Controller
from deephealth.domain.rounds import RoundState
from deephealth.observability import logger, metrics
from deephealth.wiring import build_controller


def round_step(settings_model: type, step: Callable[[Controller, RoundState], RoundState]) -> Callable:
    controller = build_controller(settings.load(settings_model))  # at cold start: a bad env fails here

    @metrics.log_metrics
    @logger.inject_lambda_context(clear_state=True)
    def lambda_handler(event: dict, context: object) -> dict:
        state = RoundState.model_validate(event)
        logger.set_correlation_id(state.round_id or f"{state.cluster}-r{state.round_seq:06d}")
        return step(controller, state).model_dump(mode="json")

    return lambda_handler
