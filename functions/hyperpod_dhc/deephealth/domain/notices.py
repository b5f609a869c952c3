"""What a saved decision announces: the metrics and notifications of one node's transition, as pure values.

`notices(record, decision)` is the whole table; `usecases/decisions.py` emits what it returns, in order, right
after the decision's write (a metric-only notice has no `kind`; a notice's metrics go out before its message).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from hyperpod_dhc.deephealth.domain.message_words import node_subject
from hyperpod_dhc.deephealth.domain.nodes import (
    JOB_WON,
    Decision,
    NodeRecord,
    NodeState,
    Verdict,
    revalidated,
    short_hostname,
)
from hyperpod_dhc.deephealth.domain.slurm import failed_test


@dataclass(frozen=True)
class Metric:
    """One node metric (stack-wide and per cluster)."""

    name: str
    value: float = 1
    unit: Literal["Count", "Seconds"] = "Count"


@dataclass(frozen=True)
class Notice:
    """Metrics, then (unless `kind` is None) one notification to the cluster's instance group."""

    cluster: str
    group: str
    metrics: tuple[Metric, ...] = ()
    kind: str | None = None
    subject: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


def notices(record: NodeRecord, decision: Decision) -> list[Notice]:
    """The metrics and notifications of one audited decision, in the order they go out."""
    detail = {
        "node": record.key,
        "instance_id": record.instance_id,
        "reason": decision.reason,
        "verdict": decision.verdict,
        "evidence": decision.evidence,
        "attempts": record.attempts,
        # What a message needs to say which node and which check (`domain.messages`): the Slurm name of the node,
        # the check types it ran, the test a failure's evidence names first, and the state it left (a reversed pass).
        "hostname": short_hostname(record.hostname),
        "checks": list(record.check_types or ()),
        "failed_test": failed_test(record) if record.verdict == Verdict.FAILED else None,
        "from_state": decision.from_state,
    }
    cluster, group = record.cluster, record.group
    found: list[Notice] = []
    if decision.verdict is not None:
        metrics = [Metric(f"Verdict_{decision.verdict.value}")]
        if record.ready_at is not None and record.verdict_at is not None:
            metrics.append(Metric("ReadyToVerdictSeconds", record.verdict_at - record.ready_at, "Seconds"))
        found.append(Notice(cluster, group, tuple(metrics)))
        if decision.to_state == NodeState.PASSED and record.attempts:
            subject = node_subject("recovered", cluster, detail)
            found.append(Notice(cluster, group, (Metric("NodesRecovered"),), "node-recovered", subject, detail))
        elif decision.verdict in (Verdict.FAILED, Verdict.REPLACED_BY_HYPERPOD):
            subject = node_subject("failed its deep health check", cluster, detail)
            reversal: tuple[Metric, ...] = ()
            if decision.from_state == NodeState.PASSED:
                # A failure line that arrived after the pass: the node was back in service on a wrong verdict.
                subject = node_subject("failed (its pass is reversed)", cluster, detail)
                reversal = (Metric("VerdictsReversed"),)
            found.append(Notice(cluster, group, reversal, "node-failed", subject, detail))
    if decision.verdict is not None and revalidated(record):
        found.append(Notice(cluster, group, (Metric("NodesRevalidated"),)))
    elif decision.reason == JOB_WON:
        found.append(Notice(cluster, group, (Metric("RevalidationDeferredByJob"),)))
    entered = decision.to_state if decision.from_state != decision.to_state else None
    if entered == NodeState.QUARANTINED:
        subject = node_subject("quarantined", cluster, detail)
        found.append(Notice(cluster, group, (Metric("NodesQuarantined"),), "node-quarantined", subject, detail))
    elif entered == NodeState.INCONCLUSIVE:
        # Missing evidence never leads to an action; it leads to a person.
        subject = node_subject("inconclusive, needs an operator", cluster, detail)
        inconclusive: tuple[Metric, ...] = (Metric("NodesInconclusive"),)
        if decision.from_state == NodeState.PASSED:
            subject = node_subject("inconclusive (its pass is reversed)", cluster, detail)
            inconclusive += (Metric("VerdictsReversed"),)
        found.append(Notice(cluster, group, inconclusive, "node-inconclusive", subject, detail))
    return found
