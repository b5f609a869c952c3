"""Level-triggered observation: fold what HyperPod reports about a node into the node's record.

The same pure function serves the reconciler, the round's steps (a ListClusterNodes pass: the whole cluster,
or a poll's launch-time window of its members) and the intake's check of an unhealthy report (one
DescribeClusterNode), so a lost or reordered event can only delay a node, never lose it: the next listing
tells the same story.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.late_evidence import late_reversal
from hyperpod_dhc.deephealth.domain.nodes import (
    IN_PROGRESS,
    RUNNING,
    Action,
    Decision,
    NodeRecord,
    NodeSnapshot,
    NodeState,
    Verdict,
    failure_like,
    instance_replaced,
    recheck,
    refreshed,
    round_seq_of,
    transition,
    with_hostname,
    with_instance,
)
from hyperpod_dhc.deephealth.domain.policy import NodeRecovery
from hyperpod_dhc.deephealth.domain.recovery import (
    apply_verdict,
    observe_recovering,
    observe_recovery_due,
    plan_recovery,
)
from hyperpod_dhc.deephealth.domain.result_log import ResultLog
from hyperpod_dhc.deephealth.domain.rounds import expected_for, lines_due
from hyperpod_dhc.deephealth.domain.verdicts import Look, judge_check, left_check
from hyperpod_dhc.deephealth.evidence.efa import efa_devices
from hyperpod_dhc.deephealth.evidence.judge import Requirements
from hyperpod_dhc.deephealth.evidence.rules import required_tests

# A node missing from listings for this long is gone; shorter gaps happen while HyperPod retries a launch.
GONE_AFTER_S = 15 * 60


@dataclass(frozen=True)
class Observation:
    now: float
    # The cluster's, as DescribeCluster says it: a value this code does not know passes through (acts as "None").
    node_recovery: NodeRecovery | str
    trigger: str  # event id, round id or "reconcile", for the audit trail
    # The result log read in this look; None when the caller did not read it, in which case nodes that left
    # their check keep waiting for a look that did.
    results: ResultLog | None = None
    # Whether an on-demand check operation is in progress on the cluster (None: not asked in this look).
    check_active: bool | None = None
    may_judge: bool = True
    groups: dict[str, GroupContext] = field(default_factory=dict)
    # Rounds before this sequence number have ended (released, skipped or dead): a node they claimed whose check
    # never started belongs to nobody and goes back in the queue. None: the caller cannot tell (never hands back).
    orphaned_before: int | None = None
    cluster_id: str | None = None  # stamped on new records (the cluster's incarnation)

    def orphaned(self, record: NodeRecord) -> bool:
        seq = round_seq_of(record.round_id)
        return self.orphaned_before is not None and (seq is None or seq < self.orphaned_before)


def new_record(cluster: str, snapshot: NodeSnapshot, now: float, cluster_id: str | None = None) -> NodeRecord:
    return NodeRecord(
        cluster=cluster,
        cluster_id=cluster_id,
        key=snapshot.key,
        group=snapshot.group,
        logical_id=snapshot.logical_id,
        instance_id=snapshot.instance_id or None,
        instance_type=snapshot.instance_type,
        hostname=snapshot.hostname,
        hostnames=with_hostname([], snapshot.hostname),
        instance_ids=[snapshot.instance_id] if snapshot.instance_id else [],
        created_at=now,
        updated_at=now,
    )


def observe(
    cluster: str, record: NodeRecord | None, snapshot: NodeSnapshot | None, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    """The record's next value given the node's current snapshot (None: not listed), or None if unchanged.

    One function per state: first sight, not listed, pending, checking, the recovery states (recovery.py, which
    owns the ladder) and the final states.
    """
    group = snapshot.group if snapshot else record.group if record else ""
    ctx = obs.groups.get(group)
    if ctx is None or not ctx.watched:
        if record is not None and snapshot is not None and snapshot.group != record.group:
            return _moved(record, snapshot, obs)  # moved out of the watched groups
        return None
    if record is None:
        if snapshot is None:
            return None
        return _first_sight(new_record(cluster, snapshot, obs.now, obs.cluster_id), snapshot, ctx, obs)
    if snapshot is None:
        return _unlisted(record, ctx, obs)
    if record.missing_since is not None:
        return transition(record, obs.now, record.state, "listed again", obs.trigger, missing_since=None)
    if snapshot.group != record.group:
        return _moved(record, snapshot, obs)
    seen = refreshed(record, snapshot, obs.now)
    change = _listed(seen, snapshot, ctx, obs)
    if change is None and record.hostname is None and seen.hostname is not None:
        # A record older than the field: its Slurm name is saved once, so the Slurm bridge can find it.
        return transition(seen, obs.now, seen.state, f"hostname {seen.hostname}", obs.trigger)
    return change


def _listed(
    record: NodeRecord, snapshot: NodeSnapshot, ctx: GroupContext, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    """A known node the listing shows, by its state."""
    state = record.state
    if state == NodeState.PENDING:
        return _pending(record, snapshot, ctx, obs)
    if state == NodeState.CHECKING:
        return _checking(record, snapshot, ctx, obs)
    if state == NodeState.RECOVERY_DUE:
        return observe_recovery_due(record, snapshot, obs.now, obs.trigger)
    if state == NodeState.RECOVERING:
        return observe_recovering(record, snapshot, obs.now, obs.trigger)
    return _final(record, snapshot, ctx, obs)


def _unlisted(record: NodeRecord, ctx: GroupContext, obs: Observation) -> tuple[NodeRecord, Decision] | None:
    """A known node the listing no longer shows: gone once missing for GONE_AFTER_S (HyperPod drops a node from
    listings while it retries a launch); a node in its check then gets the check's verdict."""
    if record.state == NodeState.GONE:
        return None
    if record.missing_since is None:
        return transition(record, obs.now, record.state, "not listed by HyperPod", obs.trigger, missing_since=obs.now)
    if obs.now - record.missing_since < GONE_AFTER_S:
        return None
    if record.state == NodeState.CHECKING and obs.may_judge:
        return _verdict(record, None, ctx, obs)
    return transition(record, obs.now, NodeState.GONE, "no longer listed by HyperPod", obs.trigger, round_id=None)


def _pending(
    record: NodeRecord, snapshot: NodeSnapshot, ctx: GroupContext, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    if instance_replaced(record, snapshot):
        return recheck(record, snapshot, obs.now, "instance replaced while waiting for a round", obs.trigger)
    if failure_like(snapshot.status):
        # Never checked on this instance: a launch HyperPod failed and retries with a new instance (no verdict
        # on hardware nobody tested); HyperPod gets its grace, then our ladder acts.
        return plan_recovery(record, ctx.policy, NodeRecovery.AUTOMATIC, obs.now, obs.trigger,
                             evidence=[f"status {snapshot.status} while waiting for a check"])  # fmt: skip
    if snapshot.status == IN_PROGRESS and ctx.observe_only:
        return _start_observing(record, obs)
    if snapshot.status == RUNNING and record.ready_at is None:
        return transition(record, obs.now, record.state, "ready (Running)", obs.trigger, ready_at=obs.now)
    return None


def _checking(
    record: NodeRecord, snapshot: NodeSnapshot, ctx: GroupContext, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    replaced = instance_replaced(record, snapshot)
    if not record.observe_only and record.check_started_at is None and not replaced:
        # Claimed, but its check was never recorded as started: nothing it shows is evidence about a check.
        return _handed_back(record, snapshot, obs) if obs.orphaned(record) else None
    if snapshot.status == IN_PROGRESS and not record.seen_in_progress:
        return transition(record, obs.now, record.state, f"seen in {IN_PROGRESS}", obs.trigger, seen_in_progress=True)
    if record.check_left_at is None and not replaced and left_check(record, snapshot, obs.check_active):
        settle = int(ctx.settle_s)
        reason = f"done with its check (status {snapshot.status}); its result lines are read in {settle} s"
        return transition(record, obs.now, record.state, reason, obs.trigger, check_left_at=obs.now)
    if not obs.may_judge:
        return None
    return _verdict(record, snapshot, ctx, obs)


def _moved(record: NodeRecord, snapshot: NodeSnapshot, obs: Observation) -> tuple[NodeRecord, Decision]:
    """MoveClusterNodes: same ids, another group, re-imaged: checked again under its new group's policy (or left
    alone in a group that is not watched)."""
    reason = f"moved from group {record.group} to {snapshot.group}"
    ctx = obs.groups.get(snapshot.group)
    if ctx is None or not ctx.watched:
        return transition(record, obs.now, NodeState.GONE, f"{reason}, which is not watched", obs.trigger,
                          group=snapshot.group, round_id=None)  # fmt: skip
    return recheck(record, snapshot, obs.now, f"{reason}: check it under the new group's policy", obs.trigger,
                   group=snapshot.group, status=snapshot.status, status_at=obs.now)  # fmt: skip


def _handed_back(record: NodeRecord, snapshot: NodeSnapshot, obs: Observation) -> tuple[NodeRecord, Decision]:
    """A node claimed by a round that ended before its check started: back in the queue."""
    return transition(
        record,
        obs.now,
        NodeState.PENDING,
        f"round {record.round_id} ended before the check started; back in the queue",
        obs.trigger,
        round_id=None,
        seen_in_progress=False,
        ready_at=record.ready_at or (obs.now if snapshot.status == RUNNING else None),
    )


def _final(
    record: NodeRecord, snapshot: NodeSnapshot, ctx: GroupContext, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    """A node in a final state that is listed: failed since it passed, back after being gone, out of dry-run, or
    a new instance under its logical id."""
    state = record.state
    replaced = instance_replaced(record, snapshot)
    if state == NodeState.PASSED and not replaced and failure_like(snapshot.status):
        return _failed_outside_a_check(record, ctx, obs, f"status {snapshot.status} after passing its check")
    if state == NodeState.PASSED and not replaced and obs.results is not None:
        reversal = late_reversal(record, obs.results, ctx, obs.node_recovery, obs.now, obs.trigger)
        if reversal is not None:
            return reversal
    if state == NodeState.GONE:
        return recheck(record, snapshot, obs.now, "listed again after being gone", obs.trigger)
    if state == NodeState.SHADOWED and not ctx.policy.dry_run and not ctx.observe_only:
        return recheck(record, snapshot, obs.now, "dry-run ended for the group: check it for real", obs.trigger)
    if not replaced:
        return None
    if state == NodeState.QUARANTINED:
        return transition(
            record,
            obs.now,
            state,
            "quarantined node got a new instance; still quarantined",
            obs.trigger,
            instance_id=snapshot.instance_id,
            instance_ids=with_instance(record.instance_ids, snapshot.instance_id),
        )
    return recheck(record, snapshot, obs.now, "new instance under the same logical id: check it", obs.trigger)


def mark_unhealthy(
    record: NodeRecord, snapshot: NodeSnapshot, reason: str, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    """A health-monitoring event flagged a node that had passed: a node HyperPod left in `Failure` has failed
    (its recovery follows); one still `Running` is checked again; one being rebooted or replaced is checked
    once it is back."""
    ctx = obs.groups.get(record.group)
    if record.state != NodeState.PASSED or ctx is None or not ctx.watched:
        return None
    record = refreshed(record, snapshot, obs.now)
    if failure_like(snapshot.status):
        return _failed_outside_a_check(record, ctx, obs, f"health event: {reason[:300]}; status {snapshot.status}")
    return transition(
        record,
        obs.now,
        NodeState.PENDING,
        f"health event: {reason[:300]}",
        obs.trigger,
        seen_in_progress=False,
        check_started_at=None,
        round_id=None,
        ready_at=obs.now if snapshot.status == RUNNING else None,
    )


def _failed_outside_a_check(
    record: NodeRecord, ctx: GroupContext, obs: Observation, evidence: str
) -> tuple[NodeRecord, Decision]:
    """HyperPod reports a node that had passed in `Failure`: a failed verdict without a check (no log needed: the
    status is HyperPod's own). `Failure` means HyperPod retries with a new instance, so it gets its grace first
    whatever NodeRecovery says; then the ladder and the notifications follow as after a failed check."""
    return apply_verdict(record, Verdict.FAILED, (evidence,), ctx.policy, NodeRecovery.AUTOMATIC, obs.now, obs.trigger)


def close_out(record: NodeRecord, reason: str, now: float, trigger: str) -> tuple[NodeRecord, Decision] | None:
    if record.state == NodeState.GONE:
        return None
    return transition(record, now, NodeState.GONE, reason, trigger, round_id=None)


def _first_sight(
    record: NodeRecord, snapshot: NodeSnapshot, ctx: GroupContext, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    if snapshot.status == IN_PROGRESS:
        if ctx.observe_only:
            return _start_observing(record, obs)
        return transition(record, obs.now, NodeState.PENDING, f"first seen in {IN_PROGRESS}", obs.trigger)
    if ctx.observe_only and failure_like(snapshot.status):
        # It failed HyperPod's on-start check before any look saw it in it: watched like the others, so that the
        # next look judges it (failed, on its status) instead of it never being recorded.
        return _start_observing(record, obs, seen=False)
    if failure_like(snapshot.status):
        # Its launch failed before it was ever Running: recorded now, so that a launch HyperPod never retries is
        # acted on after HyperPod's grace (or recorded failed, as policy says) instead of never being seen.
        waiting, decision = transition(
            record, obs.now, NodeState.PENDING, f"first seen in {snapshot.status}: its launch failed", obs.trigger,
            status=snapshot.status, status_at=obs.now,
        )  # fmt: skip
        return _pending(waiting, snapshot, ctx, obs) or (waiting, decision)
    if snapshot.status != RUNNING:
        return None  # still provisioning: the next event or listing brings it back
    if ctx.observe_only:
        return _start_observing(record, obs, seen=False)
    return transition(
        record, obs.now, NodeState.PENDING, "new worker node ready (Running)", obs.trigger, ready_at=obs.now
    )


def _start_observing(record: NodeRecord, obs: Observation, seen: bool = True) -> tuple[NodeRecord, Decision]:
    return transition(
        record,
        obs.now,
        NodeState.CHECKING,
        "watching HyperPod's on-start deep health check",
        obs.trigger,
        observe_only=True,
        round_id=None,
        check_started_at=obs.now,
        check_left_at=None,
        seen_in_progress=seen,
        ready_at=record.ready_at or obs.now,
    )


def _verdict(
    record: NodeRecord, snapshot: NodeSnapshot | None, ctx: GroupContext, obs: Observation
) -> tuple[NodeRecord, Decision] | None:
    """The check's verdict on a node in it (None: no verdict yet), and the node's next state after it."""
    types = checked_for(record, ctx)
    evidence = None
    started = record.check_started_at
    if obs.results is not None and started is not None and lines_due(record, snapshot, obs.now, ctx.settle_s,
                                                                      expected_for(types)):  # fmt: skip
        evidence = obs.results.evidence(record)
    look = Look(
        obs.now,
        evidence,
        obs.check_active,
        ctx.policy.check_timeout_s,
        ctx.settle_s,
        requirements=requirements(record, ctx),
        silent_pass_after_s=ctx.revisit_s if ctx.policy.pass_on_silence else None,
        revisit_s=ctx.revisit_s,
    )
    judgement = judge_check(record, snapshot, look)
    if judgement is None:
        return None
    return apply_verdict(
        record,
        judgement.verdict,
        judgement.evidence,
        ctx.policy,
        _recovering_itself(snapshot, obs),
        obs.now,
        obs.trigger,
        new_instance_id=snapshot.instance_id if snapshot else None,
        recheck=judgement.recheck,
        hint=Action(judgement.hint) if judgement.hint else None,
        anonymous=judgement.anonymous,
    )


def requirements(record: NodeRecord, ctx: GroupContext) -> Requirements:
    """What the node's current check must prove: its check types' tests, on as many EFA devices as its type has."""
    return Requirements(
        required_tests(checked_for(record, ctx)), efa_devices(record.instance_type, ctx.policy.efa_devices)
    )


def checked_for(record: NodeRecord, ctx: GroupContext) -> tuple[str, ...]:
    """The check types the node's current check runs: HyperPod's on-start checks, or what our request asked."""
    return (ctx.on_start_checks if record.observe_only else None) or record.check_types or ctx.policy.checks


def _recovering_itself(snapshot: NodeSnapshot | None, obs: Observation) -> NodeRecovery | str:
    """The cluster's NodeRecovery, as far as this node goes: a node in `Failure` is HyperPod's to retry with a
    new instance whatever the setting, so it gets HyperPod's grace before any action of ours."""
    if snapshot is not None and failure_like(snapshot.status):
        return NodeRecovery.AUTOMATIC
    return obs.node_recovery


def seen_while_settling(record: NodeRecord | None, snapshot: NodeSnapshot | None, now: float) -> NodeRecord | None:
    """A node out of its check, waiting for its lines to settle, that a look shows otherwise than its record says
    and that no decision moved: the record as seen, saved without a decision, so a judgement without a listing
    (`nodes.last_seen`) judges what the last look showed, never what an earlier one did. Another instance (HyperPod
    replaced it since): back in its check as far as looks go (`check_left_at` cleared), so it is listed again and
    judged as a member replaced mid-check, never on its old instance's lines. None: nothing to save."""
    if record is None or snapshot is None or record.state != NodeState.CHECKING or record.check_left_at is None:
        return None
    if instance_replaced(record, snapshot):
        return record.model_copy(update={"check_left_at": None, "status": snapshot.status, "status_at": now})
    seen = refreshed(record, snapshot, now)
    return seen if seen.status != record.status else None
