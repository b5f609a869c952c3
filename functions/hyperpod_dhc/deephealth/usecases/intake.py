"""Intake: act on one classified HyperPod event (a cluster's, or a node's)."""

from __future__ import annotations

from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound, ClusterNotSlurm
from hyperpod_dhc.deephealth.domain.events import ClusterSignal, Ignored, NodeSignal
from hyperpod_dhc.deephealth.domain.nodes import NodeState
from hyperpod_dhc.deephealth.domain.observe import Observation, mark_unhealthy, observe, seen_while_settling
from hyperpod_dhc.deephealth.observability import MetricUnit, metrics
from hyperpod_dhc.deephealth.usecases.context import Context
from hyperpod_dhc.deephealth.usecases.decisions import save_and_announce
from hyperpod_dhc.deephealth.usecases.observe_cluster import close_cluster
from hyperpod_dhc.deephealth.usecases.reconcile import reconcile_cluster
from hyperpod_dhc.deephealth.usecases.record_arrivals import record_arrivals


def handle_signal(ctx: Context, signal: NodeSignal | ClusterSignal | Ignored) -> str:
    """Act on one classified event; returns what happened, for the log."""
    if isinstance(signal, Ignored):
        metrics.add_metric(name="IgnoredEvents", unit=MetricUnit.Count, value=1)
        return f"ignored: {signal.reason}"
    if not ctx.config().watches(signal.cluster):
        metrics.add_metric(name="IgnoredEvents", unit=MetricUnit.Count, value=1)
        return f"ignored: cluster {signal.cluster} is not configured"
    try:  # cached in the table: no DescribeCluster per event
        ctx.describe(signal.cluster)
    except ClusterNotSlurm as err:  # not even a round is started for it (with clusters = "all")
        metrics.add_metric(name="IgnoredEvents", unit=MetricUnit.Count, value=1)
        return f"ignored: {err}"
    except ClusterNotFound:
        pass  # what follows closes the cluster out
    if isinstance(signal, ClusterSignal):
        # Closing or not, the cluster's own state decides: reconcile closes out a Deleting/Failed cluster.
        return reconcile_cluster(ctx, signal.cluster, trigger=signal.event_id)
    return _node_signal(ctx, signal)


def _node_signal(ctx: Context, signal: NodeSignal) -> str:
    if not signal.wakes_round:
        # A step before readiness (provisioned, script started, a reboot or replacement under way): nothing to
        # record yet; the readiness event, a round or Reconcile's listing follows.
        return f"hint only: {signal.reason[:100]}"
    if not signal.unhealthy:
        # A node may have become ready, or changed. HyperPod's listing is the truth, not the event: the round's
        # Claim lists the cluster once and records every node that is ready, and a live round's polls list it
        # when an event says something changed. So the event only wakes the cluster's round, or tells a live
        # one (note_change). A DescribeClusterNode per event would be one call per node, and a burst of 500
        # arrivals would meet SageMaker's throttling.
        if ctx.start_round(signal.cluster) is None:
            ctx.table.note_change(signal.cluster, ctx.clock())
            return f"round woken: {signal.reason[:100]}"  # its Claim records the node
        # A live round lists the whole cluster only when its check looks finished: record the node now. A look
        # taken within the last 5 minutes leaves it to Reconcile's, told to look 5 minutes after that one.
        look = record_arrivals(ctx, signal.cluster, signal.event_id)
        if not look.looked:
            ctx.table.note_arrival(signal.cluster, ctx.clock())
        return f"round live: {look.said} ({signal.reason[:100]})"
    try:
        view = ctx.view(signal.cluster, load_records=False)
    except ClusterNotFound:
        return close_cluster(ctx, signal.cluster, "cluster not found", signal.event_id)
    snapshot = ctx.hyperpod.describe_node(signal.cluster, signal.logical_id, signal.instance_id)
    key = (snapshot.key if snapshot else None) or signal.logical_id
    if not key:
        return f"ignored: node {signal.instance_id} not found"
    record = ctx.table.get(signal.cluster, key)
    obs = Observation(
        now=ctx.clock(),
        node_recovery=view.info.node_recovery,
        trigger=signal.event_id,
        may_judge=False,
        groups=view.groups,
    )
    change = observe(signal.cluster, record, snapshot, obs)
    if change is None and record is not None and snapshot is not None:  # only unhealthy reports get here
        change = mark_unhealthy(record, snapshot, signal.reason, obs)
    if change is None and record is not None and record.state == NodeState.CHECKING:
        # Its round judges it, some on their last look: what HyperPod says now goes on its record, and the round's
        # next poll looks again rather than judge on what it saw before (note_change).
        if (seen := seen_while_settling(record, snapshot, obs.now)) is not None:
            save_and_announce(ctx, [seen])
        ctx.table.note_change(signal.cluster, ctx.clock())
        return "checking: its round looks again"
    if change is None:
        return "no change"
    saved = save_and_announce(ctx, [change])
    if saved and (saved[0].state == NodeState.RECOVERY_DUE or saved[0].ready_at is not None):
        ctx.table.note_change(signal.cluster, ctx.clock())  # a live round's next poll sees it
        ctx.start_round(signal.cluster)  # a re-check is waiting, or a recovery is due
    return f"{change[1].from_state} -> {change[1].to_state}"
