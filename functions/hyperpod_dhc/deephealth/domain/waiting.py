"""Nodes that wait too long for a check: when no check could start for longer than a group's `wait_alert_s` (a
check operation someone else holds open, refusals, a breaker that holds the round), each waiting node is
announced once, so silence never hides a node nobody checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import Decision, NodeRecord, NodeState, revalidating, transition
from hyperpod_dhc.deephealth.domain.slurm import waits_for_job


def overdue_waits(
    records: Iterable[NodeRecord], groups: Mapping[str, GroupContext], now: float, trigger: str
) -> list[tuple[NodeRecord, Decision]]:
    """Each ready, pending node that has waited longer than its group's `wait_alert_s` and was not said to (since
    it became ready), marked as said; a node held back by a job waits by design (`job_defer_max_s` says so)."""
    out = []
    for r in records:
        group = groups.get(r.group)
        # A node out for revalidation stays in service while it waits: nothing is waiting on its check.
        if r.state != NodeState.PENDING or r.ready_at is None or group is None or not group.watched or revalidating(r):
            continue
        waited = now - r.ready_at
        said = r.wait_alerted_at is not None and r.wait_alerted_at >= r.ready_at
        if waited < group.policy.wait_alert_s or said or waits_for_job(r, now, group.policy.job_defer_max_s):
            continue
        reason = f"ready for {int(waited)} s and not checked yet: no check could start"
        out.append(transition(r, now, r.state, reason, trigger, wait_alerted_at=now))
    return out
