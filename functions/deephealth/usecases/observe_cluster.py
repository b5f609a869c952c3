"""Looking at a cluster: one HyperPod listing (and at most one result-log query and one look at HyperPod's check
operations) folded into the node records, every change saved; and closing out a cluster that is gone."""

from __future__ import annotations

from deephealth.domain.nodes import IN_PROGRESS, RUNNING, Decision, NodeRecord, NodeSnapshot, NodeState, round_seq_of
from deephealth.domain.observe import Observation, close_out, observe
from deephealth.domain.results import ResultLog
from deephealth.domain.rounds import ListingWindow, expected_for
from deephealth.domain.verdicts import SKIP_GRACE_S
from deephealth.usecases.context import ClusterView, Context
from deephealth.usecases.decisions import save_and_announce


def observe_cluster(
    ctx: Context, cluster: str, trigger: str, fresh: bool = False, orphaned_before: int | None = None
) -> ClusterView:
    """One paginated ListClusterNodes pass (+ one result-log query if a check ended) folded into records.

    `orphaned_before`: rounds before this sequence number have ended, so what they claimed and never started
    goes back in the queue (None: the caller cannot tell)."""
    view = ctx.view(cluster, fresh=fresh)
    snapshots = {s.key: s for s in ctx.hyperpod.list_nodes(cluster) if s.key}
    changes = fold(ctx, cluster, view, snapshots, trigger, orphaned_before)
    reason = f"the cluster was recreated (now {view.info.cluster_id}): this node belonged to the one before"
    changes += [c for r in view.previous.values() if (c := close_out(r, reason, ctx.clock(), trigger))]
    if changes and not view.records:
        ctx.table.register_cluster(cluster)
    for saved in save_and_announce(ctx, changes):
        view.records[saved.key] = saved
    return view


def observe_members(ctx: Context, cluster: str, round_id: str, window: ListingWindow) -> ClusterView:
    """A poll's cheap look: list only the round's launch-time window, read only the nodes listed, and fold
    what the round's members show. A member missing from the window (replaced mid-check: a new launch
    time) waits for the next look at the whole cluster."""
    view = ctx.view(cluster, load_records=False)
    listed = {s.key: s for s in ctx.hyperpod.list_nodes(cluster, window) if s.key}
    view.records = {
        k: r
        for k, r in ctx.table.load_nodes(cluster, listed).items()
        if r.state == NodeState.CHECKING and r.round_id == round_id
    }
    changes = fold(ctx, cluster, view, {k: listed[k] for k in view.records}, round_id, round_seq_of(round_id))
    for saved in save_and_announce(ctx, changes):
        view.records[saved.key] = saved
    return view


def fold(
    ctx: Context,
    cluster: str,
    view: ClusterView,
    snapshots: dict[str, NodeSnapshot],
    trigger: str,
    orphaned_before: int | None = None,
) -> list[tuple[NodeRecord, Decision]]:
    """Observe every node in `snapshots` or `view.records`. The result logs are read once, when a node's check
    ended long enough ago for its line to have arrived; HyperPod's check operations are asked about once, when
    a node has stayed in (or out of) the check for longer than a check takes."""
    view.snapshots = snapshots
    now = ctx.clock()
    checking = [r for r in view.records.values() if r.state == NodeState.CHECKING and r.check_started_at]
    results = None
    if settled := [r for r in checking if _settled(r, view, now)]:
        since = min(r.check_started_at or now for r in settled)
        results = ResultLog(ctx.logs.lines_since(view.info.log_group, since), since=since, read_at=now)
    check_active = None
    if any(_ask_operation(r, snapshots.get(r.key), view, now) for r in checking):
        check_active = ctx.hyperpod.check_in_progress(cluster)
    obs = Observation(
        now=now,
        node_recovery=view.info.node_recovery,
        trigger=trigger,
        results=results,
        check_active=check_active,
        groups=view.groups,
        orphaned_before=orphaned_before,
        cluster_id=view.info.cluster_id,
    )
    return [
        c
        for key in sorted(set(snapshots) | set(view.records))
        if (c := observe(cluster, view.records.get(key), snapshots.get(key), obs))
    ]


def _settled(record: NodeRecord, view: ClusterView, now: float) -> bool:
    """The node left its check long enough ago for its result line to be readable."""
    group = view.groups.get(record.group)
    settle = group.policy.log_settle_s if group else 0
    return record.check_left_at is not None and now - record.check_left_at >= settle


def _ask_operation(record: NodeRecord, snapshot: NodeSnapshot | None, view: ClusterView, now: float) -> bool:
    """Whether the node's verdict hangs on HyperPod's check operation having ended: it has shown
    `DeepHealthCheckInProgress` for longer than its checks take (isolated after a failure?), or has not shown it
    for longer than HyperPod waits for a busy node (skipped, or a slow start?)."""
    group = view.groups.get(record.group)
    if snapshot is None or group is None or record.observe_only or record.check_left_at is not None:
        return False
    elapsed = now - (record.check_started_at or now)
    if snapshot.status == IN_PROGRESS:
        return elapsed >= expected_for(record.requested_checks or group.policy.checks)
    return snapshot.status == RUNNING and not record.seen_in_progress and elapsed >= SKIP_GRACE_S


def close_cluster(ctx: Context, cluster: str, reason: str, trigger: str) -> str:
    """The cluster is gone (or going): every node it left ends GONE, and it leaves the registry."""
    records = ctx.table.load_cluster(cluster).values()
    changes = [c for r in records if (c := close_out(r, reason, ctx.clock(), trigger))]
    save_and_announce(ctx, changes)
    ctx.table.unregister_cluster(cluster)
    return f"closed out {len(changes)} node(s): {reason}"


def settling_elsewhere(view: ClusterView, round_id: str, now: float) -> float | None:
    """When the next node out of another check (an earlier round's, or HyperPod's on-start check) has its result
    line due: the earliest `check_left_at + log_settle_s` still ahead of `now` among the checking nodes that are
    not this round's. (One already due was judged by the look that built `view`, or waits for evidence a look
    cannot hurry.)"""
    due = [
        left + view.groups[r.group].policy.log_settle_s
        for r in view.records.values()
        if r.state == NodeState.CHECKING
        and r.round_id != round_id
        and (left := r.check_left_at) is not None
        and r.group in view.groups
    ]
    return min((t for t in due if t > now), default=None)
