"""The end of HyperPod's grace period on a failed node (NodeRecovery=Automatic): did HyperPod act on it?

A quick HyperPod reboot keeps the instance id and can fall between two listings, so before the controller
takes its own ladder step it reads the node's Instance events since the verdict, once: an action there means
HyperPod owned the recovery, and the node is checked again instead of acted on a second time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hyperpod_dhc.deephealth.domain.nodes import (
    Action,
    Decision,
    NodeRecord,
    NodeState,
    last_seen,
    recheck,
    transition,
    with_action,
)
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy
from hyperpod_dhc.deephealth.domain.recovery import attempts_counted, ladder_step

# Instance events that are the node's own setup (its lifecycle script), not an action on it.
NOT_AN_ACTION = ("lifecycle script",)


def grace_expired(due: Sequence[NodeRecord]) -> list[NodeRecord]:
    """The due nodes whose HyperPod grace has expired with no action seen so far."""
    return [r for r in due if r.action == Action.AWAIT_HYPERPOD and r.instance_id]


def grace_start(record: NodeRecord, policy: GroupPolicy) -> float:
    """Since when HyperPod may have acted: when the wait began, or for a failed check from the check's start, as
    HyperPod may act the moment the check ends while the verdict waits `log_settle_s` for the result log. An
    event in that span that is not an action (a setup step) never leads to an action: at worst a re-check."""
    began = (record.not_before or 0) - policy.recovery_grace_s
    failed_check = record.verdict_at is not None and abs(record.verdict_at - began) < 1  # the wait followed it
    if failed_check and record.check_started_at is not None:
        return min(began, record.check_started_at)
    return began


def hyperpod_action(descriptions: Iterable[str]) -> str | None:
    """The first Instance event that says HyperPod acted on the node, or None. Any wording but a lifecycle
    script's counts: a missed action costs a second action on one piece of evidence, a false one a re-check."""
    for description in descriptions:
        if not any(phrase in description.lower() for phrase in NOT_AN_ACTION):
            return description
    return None


def after_grace(
    record: NodeRecord, acted: str | None, policy: GroupPolicy, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision] | None:
    """The node once its events are read. HyperPod acted: its action is counted and the node is checked again.
    It did not: the ladder's next step is recorded in place of the wait, so the events are read only once
    (None when the ladder has no step left: `recovery.due_action` settles the node)."""
    if acted is not None:
        reason = f"HyperPod acted on the node during its grace: {acted[:300]}"
        return recheck(
            record,
            last_seen(record),
            now,
            reason,
            trigger,
            evidence=[*record.evidence, reason],
            attempts=record.attempts + 1,
            actions=with_action(record.actions, now, Action.HYPERPOD, "hyperpod", record.instance_id),
            action=Action.HYPERPOD,
            action_at=now,
            not_before=None,
        )
    step = ladder_step(policy, attempts_counted(record, policy, now), record.recovery_hint)
    if step is None:
        return None
    return transition(
        record,
        now,
        NodeState.RECOVERY_DUE,
        f"HyperPod did not act within its grace; next step {step.value}",
        trigger,
        action=step,
    )
