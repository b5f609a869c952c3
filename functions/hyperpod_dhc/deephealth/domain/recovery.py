"""From a verdict to the node's next state, and the recovery ladder: planned, due, requested and observed.

Never fight HyperPod: with `NodeRecovery=Automatic` HyperPod reboots or replaces a node that fails a
check itself, so the controller first waits `recovery_grace_s` and only acts if nothing happened.

A failed node's path, all of it here:
- `apply_verdict` -> `plan_recovery`: record only, wait for HyperPod, our next ladder step, or quarantine;
- `observe_recovery_due`: HyperPod acting on the node first owns the recovery;
- `due_action`: the action to request once due (or, with none left on the ladder, the node's settled state);
  `safety.gate_recovery` only decides whether it may be requested now;
- `domain.actions`: what the request did (started, refused, answer lost);
- `observe_recovering`: down and back, a new instance, or no effect (then `give_up_or_retry`).
"""

from __future__ import annotations

import itertools

from hyperpod_dhc.deephealth.domain.nodes import (
    BEING_RECOVERED_STATUSES,
    RUNNING,
    Action,
    Decision,
    NodeRecord,
    NodeSnapshot,
    NodeState,
    Outcome,
    Verdict,
    instance_replaced,
    recheck,
    transition,
    with_action,
    with_instance,
    with_outcome,
)
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy, Lemon, NodeRecovery, Recovery

# Back-off before retrying an action HyperPod refused for the node's current state (InstanceIdInUse, ...).
ACTION_RETRY_BASE_S = 300
# Retries of an action that was refused or showed no effect; one more and the node needs an operator.
MAX_ACTION_RETRIES = 5
# A reboot counts as done once the node was seen down and is Running again, or after this long Running.
REBOOT_SETTLE_S = 15 * 60
# An action we requested that shows no effect for this long is retried.
ACTION_TIMEOUT_S = 90 * 60


# Verdicts that say the hardware failed: our check's failure, or HyperPod replacing it during the check.
FAILING = frozenset({Verdict.FAILED, Verdict.REPLACED_BY_HYPERPOD})


def ladder_step(policy: GroupPolicy, attempts: int, hint: Action | None = None) -> Action | None:
    """The action for a node that has already had `attempts` recovery actions, or None to quarantine. A node whose
    failure line says a replacement is required skips the reboots before the ladder's next replacement."""
    steps = policy.steps()[attempts:]
    if hint == Action.REPLACE and Action.REPLACE.value in steps:
        return Action.REPLACE
    return Action(steps[0]) if steps else None


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
    node_recovery: NodeRecovery | str,
    now: float,
    trigger: str | None,
    new_instance_id: str | None = None,
    recheck: bool = True,
    hint: Action | None = None,
    anonymous: bool = False,
) -> tuple[NodeRecord, Decision]:
    """The node's next state after `verdict`. `recheck=False`: an inconclusive verdict a re-check cannot settle
    goes to `inconclusive` at once (an operator decides). `hint`: the recovery its failure lines ask for.
    `anonymous`: the one re-check a failure on a stream that is no node's costs (apart from `max_inconclusive`)."""
    outcomes = with_outcome(record.outcomes, now, verdict, record.instance_id)
    base: dict[str, object] = {
        "verdict": verdict,
        "verdict_at": now,
        "verdict_instance_id": record.instance_id,
        "evidence": list(evidence),
        "round_id": None,
        "observe_only": False,
        "requested_checks": None,
        "outcomes": outcomes,
        "recovery_hint": hint,
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
    if anonymous:
        return transition(
            record,
            now,
            NodeState.PENDING,
            f"{verdict.value}: a failure on a stream that is no node's fell in its window: re-check (once)",
            trigger,
            **base,
            anonymous_rechecks=record.anonymous_rechecks + 1,
            seen_in_progress=False,
            check_started_at=None,
        )
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
        if count > policy.max_inconclusive or not recheck:
            return transition(
                record,
                now,
                NodeState.INCONCLUSIVE,
                f"{verdict.value} {count} time(s): needs an operator (never passed or replaced on missing evidence)",
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
    record: NodeRecord,
    policy: GroupPolicy,
    node_recovery: NodeRecovery | str,
    now: float,
    trigger: str | None,
    **verdict: object,
) -> tuple[NodeRecord, Decision]:
    """A failed node: record only, wait for HyperPod, schedule our next ladder step, or quarantine.

    `verdict` carries the verdict fields when this follows a check, so the audit decision names them.
    `node_recovery` is the cluster's: under `Automatic` HyperPod gets `recovery_grace_s` to act first.
    """
    if policy.recovery == Recovery.NONE:
        return transition(record, now, NodeState.FAILED, "check failed; recovery policy is none", trigger, **verdict)
    attempts = attempts_counted(record, policy, now)
    hint = verdict.get("recovery_hint", record.recovery_hint)
    step = ladder_step(policy, attempts, hint if isinstance(hint, Action) else None)
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
        automatic = node_recovery == NodeRecovery.AUTOMATIC
        plan = f"give HyperPod {policy.recovery_grace_s} s, then {step.value}" if automatic else step
        return transition(record, now, NodeState.SHADOWED, f"dry-run: check failed; would {plan}", trigger, **verdict)
    if node_recovery == NodeRecovery.AUTOMATIC:
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


def due_action(
    record: NodeRecord, policy: GroupPolicy, now: float, trigger: str | None = None
) -> Action | tuple[NodeRecord, Decision] | None:
    """What a `recovery_due` node's recovery is at `now`: the action to request (reboot or replace), the node's
    next state when there is no action to request, or None if it is not due yet.

    With no action left (HyperPod's grace expired on a node that is out of ladder steps, or none recorded) the
    failure is planned again as under `NodeRecovery=None`, since HyperPod had its chance: quarantine, or
    record only under recovery "none".
    """
    if record.state != NodeState.RECOVERY_DUE or (record.not_before or 0) > now:
        return None
    action = record.action
    if action == Action.AWAIT_HYPERPOD:
        # Grace expired and HyperPod did nothing we could see: fall back to our own ladder.
        action = ladder_step(policy, attempts_counted(record, policy, now), record.recovery_hint)
    if action is None:
        return plan_recovery(record, policy, NodeRecovery.NONE, now, trigger)
    return action


def observe_recovery_due(
    record: NodeRecord, snapshot: NodeSnapshot, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision] | None:
    """A `recovery_due` node as listed now: whoever acts on it first (HyperPod's recovery, an operator) owns
    the recovery, so a new instance is checked and a node going down is followed, never acted on again."""
    if instance_replaced(record, snapshot):
        return recheck(
            record,
            snapshot,
            now,
            "HyperPod replaced the instance",
            trigger,
            attempts=record.attempts + 1,
            actions=with_action(record.actions, now, Action.REPLACE, "hyperpod", record.instance_id),
            action=Action.HYPERPOD,
            action_at=now,
        )
    if snapshot.status in BEING_RECOVERED_STATUSES:
        # Never fight HyperPod: whoever took the node down (HyperPod's recovery, an operator) owns this action.
        return transition(
            record,
            now,
            NodeState.RECOVERING,
            f"HyperPod is recovering the node (status {snapshot.status})",
            trigger,
            action=Action.HYPERPOD,
            action_at=now,
            attempts=record.attempts + 1,
            actions=with_action(record.actions, now, Action.HYPERPOD, "hyperpod", record.instance_id),
            seen_down=True,
            not_before=None,
            held_by=None,
        )
    return None


def observe_recovering(
    record: NodeRecord, snapshot: NodeSnapshot, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision] | None:
    """A `recovering` node as listed now: a new instance or a reboot that settled is checked again; an action
    that showed no effect for ACTION_TIMEOUT_S is retried, a bounded number of times."""
    if instance_replaced(record, snapshot):
        return recheck(record, snapshot, now, f"replacement done (new instance {snapshot.instance_id})", trigger)
    since = now - (record.action_at or now)
    if snapshot.status != RUNNING:
        if not record.seen_down:
            return transition(
                record, now, record.state, f"seen {snapshot.status} during {record.action}", trigger, seen_down=True
            )
        if since < ACTION_TIMEOUT_S:
            return None
        # Down and never back (a reboot whose answer was lost and that never ran, one stuck in Failure): the action
        # showed no effect either; without this, the node would wait in `recovering` for good.
        return give_up_or_retry(
            record,
            now,
            trigger,
            f"{record.action} showed no effect",
            cause=f": still {snapshot.status} after {int(since)} s",
        )
    if record.action in (Action.REBOOT, Action.HYPERPOD) and (record.seen_down or since >= REBOOT_SETTLE_S):
        return recheck(record, snapshot, now, f"{record.action} done: Running again", trigger)
    if since >= ACTION_TIMEOUT_S:
        return give_up_or_retry(
            record, now, trigger, f"{record.action} showed no effect", cause=f" after {int(since)} s"
        )
    return None


def give_up_or_retry(
    record: NodeRecord,
    now: float,
    trigger: str | None,
    failure: str,
    *,
    cause: str = "",
    detail: str = "",
    backoff: bool = False,
    retry: Action | None = None,
    **changes: object,
) -> tuple[NodeRecord, Decision]:
    """An action failed (`failure`, e.g. "reboot refused"): due again, or, once it was retried
    MAX_ACTION_RETRIES times, `inconclusive` (an operator decides; no automated action goes on forever).

    `cause` ends the retry's reason and `detail` the give-up's; with `backoff` the retry waits
    ACTION_RETRY_BASE_S doubled per retry, else it is due at once; `retry` is the action the retry requests
    (None: the recorded one); `changes` apply either way.
    """
    retries = record.action_retries + 1
    if retries > MAX_ACTION_RETRIES:
        reason = f"{failure} {retries} times{detail}: needs an operator"
        return transition(record, now, NodeState.INCONCLUSIVE, reason, trigger, action_retries=retries, **changes)
    delay = ACTION_RETRY_BASE_S * 2 ** (retries - 1) if backoff else 0
    again = {} if retry is None else {"action": retry}
    return transition(
        record,
        now,
        NodeState.RECOVERY_DUE,
        f"{failure}{cause}; retry" + (f" in {delay} s" if backoff else ""),
        trigger,
        **again,
        not_before=now + delay,
        action_retries=retries,
        **changes,
    )
