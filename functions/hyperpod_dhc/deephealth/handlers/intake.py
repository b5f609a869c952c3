"""Intake: EventBridge target for HyperPod cluster, node-health and state-change events.

Bad input never raises (a raise makes EventBridge and Lambda retry an event that fails the same way every
time): it is dropped with a logged reason and counted, in this order of precedence:
- `malformed` (`MalformedEvents`): not an EventBridge event, or a detail that is not the documented shape;
- `foreign` (`ForeignEvents`): the envelope's account/region or an ARN in `resources`/`ClusterArn` is not
  this function's own account/region: never acted on, whatever it says;
- `ignored` (`IgnoredEvents`): another source, an unknown detail-type or resource type, an unconfigured
  cluster, or a node HyperPod does not know.
Only transient errors of the AWS calls (throttling, 5xx) raise, so that the event is retried.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.exceptions import InvalidModelTypeError
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ValidationError

from hyperpod_dhc.deephealth import settings
from hyperpod_dhc.deephealth.domain.events import (
    SOURCE,
    ClusterSignal,
    Ignored,
    MalformedEvent,
    NodeSignal,
    classify,
    describe,
    foreign_origin,
)
from hyperpod_dhc.deephealth.observability import MetricUnit, logger, metrics
from hyperpod_dhc.deephealth.usecases.intake import handle_signal
from hyperpod_dhc.deephealth.wiring import build_context

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

SETTINGS = settings.load(settings.IntakeSettings)
CONTEXT = build_context(SETTINGS)
IGNORED_METRIC = "IgnoredEvents"


@metrics.log_metrics
@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, str]:
    signal: NodeSignal | ClusterSignal | Ignored
    try:
        envelope = parse(event=event, model=EventBridgeModel)
        if envelope.source != SOURCE:
            signal = Ignored(f"source {envelope.source[:100]!r} is not {SOURCE}")
        else:
            signal = classify(envelope.detail_type, envelope.detail, envelope.id)
    except ValidationError as err:  # not an EventBridge event
        # Dropped, not raised: a malformed event would fail the same way on every retry.
        return _drop(event, "malformed", "MalformedEvents", f"not an EventBridge event: {describe(err)}")
    except (MalformedEvent, InvalidModelTypeError, TypeError, ValueError) as err:
        return _drop(event, "malformed", "MalformedEvents", str(err))
    own_account, own_region = _own_origin(context)
    arns = [*envelope.resources, getattr(signal, "cluster_arn", None)]
    foreign = foreign_origin(envelope.account, envelope.region, arns, own_account, own_region)
    if foreign:
        return _drop(event, "foreign", "ForeignEvents", foreign)
    outcome = handle_signal(CONTEXT, signal)
    if outcome.startswith("ignored"):
        if IGNORED_METRIC not in metrics.metric_set:  # the use case counts most ignored signals itself
            metrics.add_metric(name=IGNORED_METRIC, unit=MetricUnit.Count, value=1)
        logger.info("event ignored", extra={"reason": outcome[:1000], "event_id": envelope.id[:128]})
    else:
        logger.info("event handled", extra={"outcome": outcome, "detail_type": envelope.detail_type[:100]})
    return {"outcome": outcome}


def _drop(event: Any, outcome: str, metric: str, reason: str) -> dict[str, str]:
    reason = reason[:1000]
    event_id = event.get("id") if isinstance(event, dict) else None
    event_id = event_id[:128] if isinstance(event_id, str) else None
    logger.warning(f"{outcome} event dropped", extra={"reason": reason, "event_id": event_id, "outcome": outcome})
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    return {"outcome": outcome, "reason": reason}


def _own_origin(context: object) -> tuple[str | None, str | None]:
    """(account, region) of this function, from its invoked ARN (arn:aws:lambda:<region>:<account>:function:…)."""
    arn = getattr(context, "invoked_function_arn", None)
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) >= 7 and parts[2] == "lambda":
        return parts[4] or None, parts[3] or None
    return None, None
