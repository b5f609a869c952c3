"""Reconcile: the level-triggered pass over every watched cluster, so a lost event never loses a node.

Intake calls `reconcile_cluster` for a cluster event too: the cluster's own state decides what happens."""

from __future__ import annotations

from collections import Counter

from hyperpod_dhc.deephealth.adapters.node_table import Registration
from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound, ClusterNotSlurm
from hyperpod_dhc.deephealth.domain.on_demand import due_for_revalidation, queue_revalidations
from hyperpod_dhc.deephealth.domain.quiet_sweep import arrivals_look_gap, news, probe_after, resting
from hyperpod_dhc.deephealth.domain.waiting import overdue_waits
from hyperpod_dhc.deephealth.observability import MetricUnit, logger, metrics
from hyperpod_dhc.deephealth.usecases.context import ClusterView, Context
from hyperpod_dhc.deephealth.usecases.decisions import notify, save_and_announce
from hyperpod_dhc.deephealth.usecases.observe_cluster import close_cluster, observe_cluster
from hyperpod_dhc.deephealth.usecases.record_arrivals import record_arrivals
from hyperpod_dhc.deephealth.usecases.slurm_bridge import bridge_silence

CLOSING_STATUSES = frozenset({"Deleting", "Failed"})


def reconcile(ctx: Context) -> dict[str, str]:
    """Level-triggered pass over every configured cluster (and every cluster we hold records for)."""
    config = ctx.config()
    registry = ctx.table.registrations()  # read once for the pass: each cluster's bridge lease comes with it
    names = set(registry)
    names |= set(ctx.hyperpod.list_cluster_names() if config.clusters == "all" else config.clusters)
    results = {}
    for name in sorted(n for n in names if config.watches(n)):
        try:
            results[name] = reconcile_cluster(ctx, name, trigger="reconcile", registration=registry.get(name))
        except Exception as err:  # one broken cluster must not starve the others
            logger.exception("reconcile failed", extra={"cluster": name})
            metrics.add_metric(name="ReconcileErrors", unit=MetricUnit.Count, value=1)
            results[name] = f"error: {type(err).__name__}"
        try:  # neither the pulls (there are none) nor the round can see a bridge go silent: this look can
            bridge_silence(ctx, name, registry.get(name))
        except Exception:
            logger.exception("bridge liveness look failed", extra={"cluster": name})
            metrics.add_metric(name="ReconcileErrors", unit=MetricUnit.Count, value=1)
    return results


def quiet(ctx: Context, view: ClusterView) -> bool:
    """Whether Reconcile's pass may leave a resting cluster with a probe for new nodes instead of a whole listing
    (domain/quiet_sweep.py): its records rest, its last whole listing is recent, and the probe lists nothing new."""
    now = ctx.clock()
    after = probe_after(ctx.table.recorded_at(view.info.name), now)
    if after is None or view.previous or not resting(view.records.values(), view.groups, now):
        return False
    found = news(ctx.hyperpod.list_nodes_created_after(view.info.name, after), view.records)
    metrics.add_metric(name="QuietSweeps", unit=MetricUnit.Count, value=0 if found else 1)
    return not found


def reconcile_cluster(ctx: Context, cluster: str, trigger: str, registration: Registration | None = None) -> str:
    """Observe one cluster afresh (unless a live round does), queue what is due for revalidation, and start
    a round if one could change something; returns the cluster's node counts by state, for the log.
    `registration`: the cluster's registry item as the caller read it (else it is read here, when needed)."""
    meta = ctx.table.round_meta(cluster)
    # A live round observes this cluster on every poll, and its Claim round observes it fresh. The starter
    # checks that round really runs, and moves past it if it died holding the lease.
    live = trigger == "reconcile" and meta.holder and meta.lease_expires_at > ctx.clock()
    if live and (ctx.starter is None or ctx.starter.ensure_round(cluster, meta)[0] == meta.holder):
        # Its polls observe its members; nodes that arrived since its last whole look are recorded here.
        look = record_arrivals(ctx, cluster, trigger, arrivals_look_gap(meta.arrival_noted_at, meta.arrivals_looked_at))
        return f"round {meta.holder} is live; {look.said}"
    if live:
        meta = ctx.table.round_meta(cluster)  # the starter moved past a round that died holding the lease
    try:
        view = ctx.view(cluster, fresh=True)
        if trigger != "reconcile" or not quiet(ctx, view):
            view = observe_cluster(
                ctx, cluster, trigger, fresh=True, orphaned_before=ctx.orphaned_before(meta), view=view
            )
    except ClusterNotSlurm as err:  # not there for the controller (Context.describe said so once)
        return close_cluster(ctx, cluster, str(err), trigger)
    except ClusterNotFound:
        return close_cluster(ctx, cluster, "cluster not found", trigger)
    if view.info.status in CLOSING_STATUSES:
        return close_cluster(ctx, cluster, f"cluster {view.info.status}", trigger)
    # Revalidation: passed nodes gone stale, queued in service while the cluster's bridge reports occupancy.
    seen_at = (registration or ctx.table.registration(cluster)).lease.seen_at
    stale = due_for_revalidation(view.records, view.groups, ctx.clock(), seen_at)
    for saved in save_and_announce(ctx, queue_revalidations(view.records, stale, ctx.clock())):
        view.records[saved.key] = saved
    for saved in save_and_announce(ctx, overdue_waits(view.records.values(), view.groups, ctx.clock(), trigger)):
        view.records[saved.key] = saved
        waited = int(ctx.clock() - (saved.ready_at or ctx.clock()))
        notify(
            ctx,
            "check-waiting",
            cluster,
            saved.group,
            f"hyperpod-dhc: {saved.key} has waited {waited // 60} min for a deep health check",
            {
                "node": saved.key,
                "instance_id": saved.instance_id,
                "waited_s": waited,
                "evidence": [saved.history[-1].reason],
            },
        )
    if ctx.progress(view) is not None:
        ctx.start_round(cluster)
    states = Counter(r.state.value for r in view.records.values())
    return ", ".join(f"{k}={v}" for k, v in sorted(states.items())) or "no nodes"
