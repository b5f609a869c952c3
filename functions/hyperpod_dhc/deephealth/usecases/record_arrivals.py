"""Record arrivals: put the nodes HyperPod lists that have no record yet on record, while a round is live.

A live round's polls look at its members, and at the whole cluster only when its check looks finished: a node
that became ready meanwhile would go unrecorded (out of `hpdhc nodes`, the Slurm bridge's document and the
ready-to-verdict clock) for as long as the check runs. This look writes new records only, never one that exists:
the round owns those, and a look that judged them could race it. Intake runs it on a readiness event, Reconcile
on a pass over a live cluster; at most once per 5 minutes, and not within 5 minutes of the round's own whole
look (`NodeTable.claim_arrivals_look`, `note_whole_look`). Reconcile looks 5 minutes after the last look only when
a readiness event found it too recent to take its own (`note_arrival`); else 15 minutes after: it is the net for
a lost event. It lists only the nodes created since the look before it (`CreationTimeAfter`, less a margin): a
node without a record is a node created since (one HyperPod did not list while it waited for a retry is found by
the round's next whole look). The round's polls keep their own spacing: a look for arrivals does not judge, so it
never stands in for theirs."""

from __future__ import annotations

from typing import NamedTuple

from hyperpod_dhc.deephealth.domain.observe import Observation, observe
from hyperpod_dhc.deephealth.domain.quiet_sweep import ARRIVALS_LOOK_GAP_S, PROBE_MARGIN_S
from hyperpod_dhc.deephealth.observability import MetricUnit, metrics
from hyperpod_dhc.deephealth.usecases.context import Context
from hyperpod_dhc.deephealth.usecases.decisions import save_and_announce
from hyperpod_dhc.deephealth.usecases.observe_cluster import adopted_on_first_look


class ArrivalsLook(NamedTuple):
    looked: bool  # False: a look was taken within the gap
    said: str  # what it did, for the log


def record_arrivals(ctx: Context, cluster: str, trigger: str, gap_s: float = ARRIVALS_LOOK_GAP_S) -> ArrivalsLook:
    """One listing of what was created since the last look, if no other look was taken within `gap_s`."""
    now = ctx.clock()
    before = ctx.table.claim_arrivals_look(cluster, now, gap_s)
    if before is None:
        return ArrivalsLook(False, f"arrivals were looked for within the last {gap_s / 60:g} minutes")
    view = ctx.view(cluster)
    # A node with no record was created after the last look (PROBE_MARGIN_S for a listing not yet consistent):
    # list only those, usually one page. The first look lists the whole cluster.
    listed = (
        ctx.hyperpod.list_nodes_created_after(cluster, before - PROBE_MARGIN_S)
        if before and view.records
        else ctx.hyperpod.list_nodes(cluster)
    )
    snapshots = {s.key: s for s in listed if s.key}
    new = {k: s for k, s in snapshots.items() if k not in view.records and k not in view.previous}
    obs = Observation(
        now=now,
        node_recovery=view.info.node_recovery,
        trigger=trigger,
        may_judge=False,
        groups=view.groups,
        cluster_id=view.info.cluster_id,
    )
    changes = [c for key, snapshot in sorted(new.items()) if (c := observe(cluster, None, snapshot, obs))]
    if changes and not view.records:
        ctx.table.register_cluster(cluster)
    saved = save_and_announce(ctx, adopted_on_first_look(ctx, cluster, snapshots, changes))
    metrics.add_metric(name="ArrivalsRecorded", unit=MetricUnit.Count, value=len(saved))
    return ArrivalsLook(True, f"{len(saved)} arrival(s) recorded")
