"""Looking at a cluster: one HyperPod listing (and at most one result-log query) folded into the node records,
every change saved; and closing out a cluster that is gone."""

from __future__ import annotations

from deephealth.domain.nodes import IN_PROGRESS, Decision, NodeRecord, NodeSnapshot, NodeState, round_seq_of
from deephealth.domain.observe import Observation, close_out, observe
from deephealth.domain.rounds import ListingWindow
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
    """Observe every node in `snapshots` or `view.records`; the result logs are read once, if a check ended."""
    view.snapshots = snapshots
    # Claimed nodes whose check has not started yet have not left anything: no result-log query for them.
    checking = [r for r in view.records.values() if r.state == NodeState.CHECKING and r.check_started_at]
    left = [r for r in checking if (s := snapshots.get(r.key)) is None or s.status != IN_PROGRESS]
    log_errors = None
    if left:
        since = min(r.check_started_at or ctx.clock() for r in checking)
        log_errors = ctx.logs.errors_since(
            view.info.log_group, since, {r.instance_id for r in checking if r.instance_id}
        )
    obs = Observation(
        now=ctx.clock(),
        node_recovery=view.info.node_recovery,
        trigger=trigger,
        log_errors=log_errors,
        groups=view.groups,
        orphaned_before=orphaned_before,
        cluster_id=view.info.cluster_id,
    )
    return [
        c
        for key in sorted(set(snapshots) | set(view.records))
        if (c := observe(cluster, view.records.get(key), snapshots.get(key), obs))
    ]


def close_cluster(ctx: Context, cluster: str, reason: str, trigger: str) -> str:
    """The cluster is gone (or going): every node it left ends GONE, and it leaves the registry."""
    records = ctx.table.load_cluster(cluster).values()
    changes = [c for r in records if (c := close_out(r, reason, ctx.clock(), trigger))]
    save_and_announce(ctx, changes)
    ctx.table.unregister_cluster(cluster)
    return f"closed out {len(changes)} node(s): {reason}"
