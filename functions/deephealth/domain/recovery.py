"""From a verdict to the node's next state, and the recovery ladder.

Never fight HyperPod: with `NodeRecovery=Automatic` HyperPod reboots or replaces a node that fails a
check itself, so the controller first waits `recovery_grace_s` and only acts if nothing happened.
"""

from __future__ import annotations

import itertools

from deephealth.domain.nodes import (
    Action,
    Decision,
    NodeRecord,
    NodeState,
    Outcome,
    Verdict,
    transition,
    with_action,
    with_instance,
    with_outcome,
)
from deephealth.domain.policy import GroupPolicy, Lemon, Recovery

# Back-off before retrying an action HyperPod refused for the node's current state (InstanceIdInUse, ...).
ACTION_RETRY_BASE_S = 300
MAX_ACTION_RETRIES = 5


# Verdicts that say the hardware failed: our check's failure, or HyperPod replacing it during the check.
FAILING = frozenset({Verdict.FAILED, Verdict.REPLACED_BY_HYPERPOD})


def ladder_step(policy: GroupPolicy, attempts: int) -> Action | None:
    """The action for a node that has already had `attempts` recovery actions, or None to quarantine."""
    steps = policy.steps()
    return Action(steps[attempts]) if attempts < len(steps) else None


def attempts_counted(record: NodeRecord, policy: GroupPolicy, now: float) -> int:
    """Recovery actions that count against `max_attempts`: all of them, or those within `attempt_window_h`."""
    if policy.attempt_window_h is None:
        return record.attempts
    since = now - policy.attempt_window_h * 3600
    return sum(1 for a in record.actions if a.at >= since)


def lemon_reason(outcomes: list[Outcome], lemon: Lemon, now: float) -> str | None:
    """Why a node is a lemon (fails again and again, or flips between pass and fail), or None."""
    recent = [o for o in outcomes if o.at >= now - lemon.window_days * 86400]
    failures = [o for o in recent if o.verdict in FAILING]
    if len(failures) >= lemon.max_failures:
        instances = sorted({o.instance_id for o in failures if o.instance_id})
        return (
            f"lemon: failed {len(failures)} times in {lemon.window_days} days "
            f"across {len(instances)} instance(s) ({', '.join(instances)})"
        )
    signs = [o.verdict in FAILING for o in recent if o.verdict in FAILING or o.verdict == Verdict.PASSED]
    flaps = sum(1 for a, b in itertools.pairwise(signs) if a != b)
    if flaps >= lemon.max_flaps:
        return f"flapping: {flaps} pass/fail changes in {lemon.window_days} days"
    return None


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
    outcomes = with_outcome(record.outcomes, now, verdict, record.instance_id)
    base = {
        "verdict": verdict,
        "verdict_at": now,
        "verdict_instance_id": record.instance_id,
        "evidence": list(evidence),
        "round_id": None,
        "observe_only": False,
        "requested_checks": None,
        "outcomes": outcomes,
    }
    if verdict in (Verdict.PASSED, *FAILING) and (lemon := lemon_reason(outcomes, policy.lemon, now)):
        return transition(
            record,
            now,
            NodeState.QUARANTINED,
            f"{lemon}: quarantined (no more automated actions)",
            trigger,
            **base,
            held_by=None,
        )
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
            actions=with_action(record.actions, now, Action.REPLACE, "hyperpod", record.instance_id),
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
    attempts = attempts_counted(record, policy, now)
    step = ladder_step(policy, attempts)
    if step is None:
        return transition(
            record,
            now,
            NodeState.QUARANTINED,
            f"failed again after {attempts} recovery action(s): quarantined",
            trigger,
            held_by=None,
            **verdict,
        )
    if policy.dry_run:
        plan = f"give HyperPod {policy.recovery_grace_s} s, then {step.value}" if node_recovery == "Automatic" else step
        return transition(record, now, NodeState.SHADOWED, f"dry-run: check failed; would {plan}", trigger, **verdict)
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
        return ladder_step(policy, attempts_counted(record, policy, now))
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
        actions=with_action(record.actions, now, action, "controller", record.instance_id),
        seen_down=False,
        not_before=None,
        held_by=None,
    )


def action_refused(
    record: NodeRecord, action: Action, code: str, message: str, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision]:
    """HyperPod refused the action for this node (per-node `Failed` entry), or the call itself failed.

    The refused action did not happen, so it is taken back from the attempts and the budget trail.
    """
    undone = {"attempts": max(0, record.attempts - 1), "actions": _without_last(record.actions, action)}
    if code == "InstanceIdNotFound":
        return transition(record, now, NodeState.GONE, f"{action.value} refused: {code}", trigger, **undone)
    retries = record.action_retries + 1
    if retries > MAX_ACTION_RETRIES:
        return transition(
            record,
            now,
            NodeState.INCONCLUSIVE,
            f"{action.value} refused {retries} times ({code}: {message[:200]}): needs an operator",
            trigger,
            action_retries=retries,
            **undone,
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
        **undone,
    )


def action_unconfirmed(
    record: NodeRecord, action: Action, message: str, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision]:
    """The request's answer was lost (5xx, timeout): HyperPod may have carried it out. It stays counted (attempts,
    budget) and is not sent again; the node stays `recovering`, so what it does next decides: down and back,
    a new instance, or no effect for ACTION_TIMEOUT_S and then a bounded retry."""
    return transition(
        record,
        now,
        NodeState.RECOVERING,
        f"{action.value} answer lost ({message[:200]}): counted as requested; the node's next status decides",
        trigger,
    )


def _without_last(actions: list, action: Action) -> list:
    """The trail without its last controller entry for `action` (the one a refusal takes back)."""
    for i in range(len(actions) - 1, -1, -1):
        if actions[i].actor == "controller" and actions[i].action == action:
            return actions[:i] + actions[i + 1 :]
    return actions
