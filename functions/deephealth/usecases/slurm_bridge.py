"""The Slurm bridge's two routes: each node's desired Slurm state, and which nodes run jobs.

The bridge (an agent on the cluster's Slurm controller node, `functions/hpdhc/bridge.py`) pulls the state, applies
it with `scontrol`, and reports each node's occupancy, so that a round waits for a busy node instead of letting
HyperPod skip it. Both read the stored records (rounds and Reconcile keep them fresh), never a HyperPod listing.
"""

from __future__ import annotations

from typing import Any

from deephealth.domain.nodes import short_hostname
from deephealth.domain.slurm import SYNC_INTERVAL_S, NodeOccupancy, desired_state, slurm_names, with_occupancy
from deephealth.observability import logger
from deephealth.usecases.context import Context
from deephealth.usecases.decisions import save_and_announce


def slurm_state(ctx: Context, cluster: str, limit: int, after: str | None) -> dict[str, Any]:
    """One page of nodes that have a Slurm name and a desired state, ordered by node key; `after` is the last
    key of the previous page."""
    ctx.known_cluster(cluster)
    view = ctx.shown(cluster)
    isolating = {name for name, group in view.groups.items() if group.isolating}
    nodes: list[tuple[str, dict[str, Any]]] = []
    for r in sorted(view.records.values(), key=lambda r: r.key):
        if after is not None and r.key <= after:
            continue
        desired = desired_state(r, r.group in isolating)
        if desired is None or not r.hostname:
            continue
        if len(nodes) == limit:  # one more than the page holds: there is a next page
            return _page(cluster, isolating, nodes, next_token=nodes[-1][0])
        entry = {
            "node": short_hostname(r.hostname),
            "logical_id": r.logical_id,
            "instance_id": r.instance_id,
            "group": r.group,
            "state": r.state.value,
            "reason": desired.reason,
            "feature": desired.feature.value,
        }
        nodes.append((r.key, entry))
    return _page(cluster, isolating, nodes, next_token=None)


def _page(
    cluster: str, isolating: set[str], nodes: list[tuple[str, dict[str, Any]]], next_token: str | None
) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "sync_interval_s": SYNC_INTERVAL_S,
        "isolating_groups": sorted(isolating),
        "nodes": [entry for _, entry in nodes],
        "next_token": next_token,
    }


def report_occupancy(ctx: Context, cluster: str, nodes: list[NodeOccupancy], now: float) -> dict[str, Any]:
    """Record which nodes run jobs. Only nodes waiting for a round are written, and only when their occupancy
    changed or is due a refresh (`domain.slurm.with_occupancy`); a write that loses a race is skipped (the next
    report writes it). A waiting node the bridge now reports idle starts a round, which claims it."""
    ctx.known_cluster(cluster)
    # No DescribeCluster: records of an earlier cluster of the same name are gone, and only waiting ones are written.
    by_name = slurm_names(ctx.table.load_cluster(cluster).values())
    unknown = [n.node for n in nodes if n.node not in by_name]
    changes = [u for n in nodes if n.node in by_name and (u := with_occupancy(by_name[n.node], n.busy, now))]
    saved = save_and_announce(ctx, changes)
    busy_before = {r.key for r in by_name.values() if r.slurm_busy}
    freed = [r.key for r in saved if r.key in busy_before and not r.slurm_busy]
    if freed:
        ctx.start_round(cluster)
    logger.info(
        "slurm occupancy",
        extra={"cluster": cluster, "reported": len(nodes), "updated": len(saved), "freed": freed[:20]},
    )
    return {"updated": len(saved), "unknown": unknown}
