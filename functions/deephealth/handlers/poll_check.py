"""PollCheck: the round workflow's "Poll check" step."""

from deephealth import settings
from deephealth.domain.rounds import RoundState
from deephealth.observability import logger, metrics
from deephealth.wiring import build_controller

SETTINGS = settings.load(settings.PollCheckSettings)
CONTROLLER = build_controller(SETTINGS)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: object) -> dict:
    state = RoundState.model_validate(event)
    logger.set_correlation_id(state.round_id or f"{state.cluster}-r{state.round_seq:06d}")
    return CONTROLLER.poll_check(state).model_dump(mode="json")
