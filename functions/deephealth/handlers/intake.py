"""Intake: EventBridge target for HyperPod cluster, node-health and state-change events."""

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ValidationError

from deephealth import settings
from deephealth.domain.events import MalformedEvent, classify
from deephealth.observability import MetricUnit, logger, metrics
from deephealth.wiring import build_controller

SETTINGS = settings.load(settings.IntakeSettings)
CONTROLLER = build_controller(SETTINGS)


@metrics.log_metrics
@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
def lambda_handler(event: dict, context: object) -> dict:
    try:
        envelope = parse(event=event, model=EventBridgeModel)
        signal = classify(envelope.detail_type, envelope.detail, envelope.id)
    except (ValidationError, MalformedEvent, TypeError) as err:
        # Dropped, not raised: a malformed event would fail the same way on every retry.
        reason = str(err)[:1000]
        event_id = event.get("id") if isinstance(event, dict) else None
        logger.warning("malformed event dropped", extra={"reason": reason, "event_id": event_id})
        metrics.add_metric(name="MalformedEvents", unit=MetricUnit.Count, value=1)
        return {"outcome": "malformed", "reason": reason}
    outcome = CONTROLLER.handle_signal(signal)
    logger.info("event handled", extra={"outcome": outcome, "detail_type": envelope.detail_type})
    return {"outcome": outcome}
