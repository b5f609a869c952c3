"""Writing decisions, and telling people: every node change is written conditionally, logged as an audit
decision, and then announced (metrics and notifications, per `domain.notices`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from hyperpod_dhc.deephealth.domain.errors import StaleRecord
from hyperpod_dhc.deephealth.domain.nodes import Decision, NodeRecord
from hyperpod_dhc.deephealth.domain.notices import Notice, notices
from hyperpod_dhc.deephealth.domain.rounds import RoundState
from hyperpod_dhc.deephealth.domain.safety import Alert
from hyperpod_dhc.deephealth.observability import MetricUnit, logger, metrics, node_metric
from hyperpod_dhc.deephealth.usecases.context import Context


def save_and_announce(
    ctx: Context, changes: Iterable[tuple[NodeRecord, Decision] | NodeRecord], audit: bool = True
) -> list[NodeRecord]:
    """Write each change conditionally; a change that lost a race is dropped (the next look re-decides).

    Only after its write succeeded does an audited decision get its audit line and go out as its notices
    (`domain.notices` decides which), before the next write: a failure further on leaves what was written
    announced, and nothing is announced that was not written."""
    saved = []
    for change in changes:
        record, decision = change if isinstance(change, tuple) else (change, None)
        try:
            saved.append(ctx.table.save(record))
        except StaleRecord as err:
            # Another writer got there first; the next observation re-decides from fresh state.
            logger.warning("decision dropped: record changed concurrently", extra={"reason": str(err)})
            metrics.add_metric(name="DecisionConflicts", unit=MetricUnit.Count, value=1)
            continue
        if decision is not None and audit:
            logger.info("decision", extra={"decision": decision.model_dump(mode="json")})
            for notice in notices(record, decision):
                publish(ctx, notice)
    return saved


def publish(ctx: Context, notice: Notice) -> None:
    """A notice's metrics, then its notification (if it has one)."""
    for metric in notice.metrics:
        node_metric(metric.name, notice.cluster, metric.value, MetricUnit(metric.unit))
    if notice.kind is not None:
        notify(ctx, notice.kind, notice.cluster, notice.group, notice.subject, notice.detail)


def notify(ctx: Context, kind: str, cluster: str, group: str, subject: str, detail: dict[str, Any]) -> None:
    """Publish unless the group's policy mutes `kind`; the group's route rides along for SNS filters."""
    policy = ctx.config().policy_for(cluster, group) if group else None
    if policy is not None and kind not in policy.notify:
        return
    ctx.notifier.publish(kind, cluster, group, subject, detail, route=policy.notify_route if policy else None)


def alert(ctx: Context, cluster: str, raised: Alert) -> None:
    """A safety alert: counted, and sent to its instance group."""
    node_metric("SafetyAlerts", cluster)
    notify(ctx, raised.kind, cluster, raised.group, raised.subject, raised.detail)


def announce_round(ctx: Context, round_id: str, state: RoundState, records: Iterable[NodeRecord]) -> None:
    """One round-finished message per instance group the round touched, with where its nodes ended."""
    by_group: dict[str, Counter[str]] = {}
    for r in records:
        if any(h.trigger == round_id for h in r.history):
            by_group.setdefault(r.group, Counter())[r.state.value] += 1
    for group, states in sorted(by_group.items()):
        notify(
            ctx,
            "round-finished",
            state.cluster,
            group,
            f"hyperpod-dhc: round {round_id} finished",
            {"round_id": round_id, "failed_step": bool(state.error), "states": dict(states)},
        )
