"""From a verdict to the node's next state, and the recovery ladder.

Never fight HyperPod: with `NodeRecovery=Automatic` HyperPod reboots or replaces a node that fails a
check itself, so the controller first waits `recovery_grace_s` and only acts if nothing happened.
"""

from __future__ import annotations

from deephealth.domain.nodes import (
    Action,
    Decision,
    NodeRecord,
    NodeState,
    Verdict,
    transition,
    with_instance,
)
from deephealth.domain.policy import GroupPolicy, Recovery

# Back-off before retrying an action HyperPod refused for the node's current state (InstanceIdInUse, ...).
ACTION_RETRY_BASE_S = 300
MAX_ACTION_RETRIES = 5


def ladder_step(policy: GroupPolicy, attempts: int) -> Action | None:
    """The action for a node that has already had `attempts` recovery actions, or None to quarantine."""
    if attempts >= policy.max_attempts:
        return None
    if policy.recovery == Recovery.REPLACE:
        return Action.REPLACE
    return Action.REBOOT if attempts == 0 else Action.REPLACE


def apply_verdict(
    record: NodeRecord,
    verdict: Verdict,
    evidence: tuple[str, ...],
    policy: GroupPolicy,
    node_recovery: str,
    now: float,
    trigger: str | None,
    new_instance_id: str | None = None,
) -> tuple[NodeRecord, Decision]:
    base = {
        "verdict": verdict,
        "verdict_at": now,
        "verdict_instance_id": record.instance_id,
        "evidence": list(evidence),
        "round_id": None,
        "observe_only": False,
        "requested_checks": None,
    }
    if verdict == Verdict.PASSED:
        reason = "check passed" + (f" after {record.attempts} recovery action(s)" if record.attempts else "")
        return transition(record, now, NodeState.PASSED, reason, trigger, **base, inconclusive_count=0)
    if verdict == Verdict.GONE:
        return transition(record, now, NodeState.GONE, "node disappeared during the check", trigger, **base)
    if verdict == Verdict.REPLACED_BY_HYPERPOD:
        # HyperPod already acted: the new hardware needs its own check.
        return transition(
            record,
            now,
            NodeState.PENDING,
            "HyperPod replaced the instance; re-check the replacement",
            trigger,
            **base,
            attempts=record.attempts + 1,
            instance_id=new_instance_id,
            instance_ids=with_instance(record.instance_ids, new_instance_id),
            ready_at=None,
            seen_in_progress=False,
            check_started_at=None,
            action=Action.HYPERPOD,
            action_at=now,
        )
    if verdict in (Verdict.SKIPPED, Verdict.INCONCLUSIVE):
        count = record.inconclusive_count + 1
        if count > policy.max_inconclusive:
            return transition(
                record,
                now,
                NodeState.INCONCLUSIVE,
                f"{verdict.value} {count} times: needs an operator (never replaced on missing evidence)",
                trigger,
                **base,
                inconclusive_count=count,
            )
        return transition(
            record,
            now,
            NodeState.PENDING,
            f"{verdict.value}: re-check ({count}/{policy.max_inconclusive})",
            trigger,
            **base,
            inconclusive_count=count,
            seen_in_progress=False,
            check_started_at=None,
        )
    return plan_recovery(record, policy, node_recovery, now, trigger, **base)


def plan_recovery(
    record: NodeRecord, policy: GroupPolicy, node_recovery: str, now: float, trigger: str | None, **verdict: object
) -> tuple[NodeRecord, Decision]:
    """A failed node: record only, wait for HyperPod, schedule our next ladder step, or quarantine.

    `verdict` carries the verdict fields when this follows a check, so the audit decision names them.
    """
    if policy.recovery == Recovery.NONE:
        return transition(record, now, NodeState.FAILED, "check failed; recovery policy is none", trigger, **verdict)
    if record.attempts >= policy.max_attempts:
        return transition(
            record,
            now,
            NodeState.QUARANTINED,
            f"failed again after {record.attempts} recovery action(s): quarantined",
            trigger,
            **verdict,
        )
    if node_recovery == "Automatic":
        return transition(
            record,
            now,
            NodeState.RECOVERY_DUE,
            f"check failed; NodeRecovery=Automatic, giving HyperPod {policy.recovery_grace_s} s to act",
            trigger,
            action=Action.AWAIT_HYPERPOD,
            not_before=now + policy.recovery_grace_s,
            action_retries=0,
            **verdict,
        )
    step = ladder_step(policy, record.attempts)
    assert step is not None  # attempts < max_attempts was checked above
    return transition(
        record,
        now,
        NodeState.RECOVERY_DUE,
        f"check failed; next step {step.value}",
        trigger,
        action=step,
        not_before=now,
        action_retries=0,
        **verdict,
    )


def due_action(record: NodeRecord, policy: GroupPolicy, now: float) -> Action | None:
    """The action to call now for a `recovery_due` node, or None if it is not due yet."""
    if record.state != NodeState.RECOVERY_DUE or (record.not_before or 0) > now:
        return None
    if record.action == Action.AWAIT_HYPERPOD:
        # Grace expired and HyperPod did nothing we could see: fall back to our own ladder.
        return ladder_step(policy, record.attempts)
    return record.action


def action_started(record: NodeRecord, action: Action, now: float, trigger: str | None) -> tuple[NodeRecord, Decision]:
    return transition(
        record,
        now,
        NodeState.RECOVERING,
        f"{action.value} requested",
        trigger,
        action=action,
        action_at=now,
        attempts=record.attempts + 1,
        seen_down=False,
        not_before=None,
    )


def action_refused(
    record: NodeRecord, action: Action, code: str, message: str, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision]:
    """HyperPod refused the action for this node (per-node `Failed` entry)."""
    if code == "InstanceIdNotFound":
        return transition(record, now, NodeState.GONE, f"{action.value} refused: {code}", trigger)
    retries = record.action_retries + 1
    if retries > MAX_ACTION_RETRIES:
        return transition(
            record,
            now,
            NodeState.INCONCLUSIVE,
            f"{action.value} refused {retries} times ({code}: {message[:200]}): needs an operator",
            trigger,
            action_retries=retries,
        )
    delay = ACTION_RETRY_BASE_S * 2 ** (retries - 1)
    return transition(
        record,
        now,
        NodeState.RECOVERY_DUE,
        f"{action.value} refused ({code}); retry in {delay} s",
        trigger,
        action=action,
        not_before=now + delay,
        action_retries=retries,
    )
