"""What operators change (POST routes of the operator API): on-demand checks, and breaker or hold resets.

Each function is named like its route in `handlers/api.py`."""

from __future__ import annotations

from typing import Any

from hyperpod_dhc.deephealth.domain.breakers import reset
from hyperpod_dhc.deephealth.domain.on_demand import JOBS_NOTE, CheckRequest, queue_checks
from hyperpod_dhc.deephealth.domain.safety import release_holds
from hyperpod_dhc.deephealth.observability import logger
from hyperpod_dhc.deephealth.usecases.context import Context
from hyperpod_dhc.deephealth.usecases.decisions import notify, save_and_announce


def request_checks(ctx: Context, cluster: str, request: CheckRequest, trigger: str) -> dict[str, Any]:
    """Queue the requested nodes into the next round; say what was queued and why anything was not."""
    ctx.known_cluster(cluster)
    # The stored records, not a listing: rounds and Reconcile keep them fresh, and a listing per request
    # would be 100 ListClusterNodes pages per POST on a 10,000-node cluster.
    view = ctx.view(cluster)
    queued, refused = queue_checks(
        view.records,
        view.groups,
        group_names=request.groups,
        nodes=request.instances,
        checks=request.checks,
        now=ctx.clock(),
        trigger=trigger,
    )
    saved = save_and_announce(ctx, queued)
    if saved:
        ctx.start_round(cluster)
    return {
        "cluster": cluster,
        "queued": [r.key for r in saved],
        "not_queued": [{"node": f.node, "reason": f.reason} for f in refused]
        + [
            {"node": r.key, "reason": "changed concurrently; retry"}
            for r, _ in queued
            if r.key not in {s.key for s in saved}
        ],
        "note": JOBS_NOTE,
    }


def reset_breaker(ctx: Context, cluster: str, group: str | None, by: str, reason: str, trigger: str) -> dict[str, Any]:
    """An operator closes the breaker (`group` None) or lifts an instance group's bad-capacity hold."""
    ctx.known_cluster(cluster)
    now = ctx.clock()
    view = ctx.shown(cluster)
    state = ctx.safety(view.info)
    tripped = state.breaker if group is None else state.capacity_holds.get(group)
    answer = {"cluster": cluster, "group": group, "scope": "breaker" if group is None else "capacity-hold"}
    if tripped is None:
        what = "the breaker is not open" if group is None else f"group {group} has no bad-capacity hold"
        return {**answer, "reset": False, "message": what, "released": []}
    ctx.table.save_safety(reset(state, group, now, by, reason))  # StaleRecord: changed concurrently
    released = save_and_announce(ctx, release_holds(view.records.values(), group, now, trigger))
    logger.warning(
        "safety reset",
        extra={"cluster": cluster, "group": group, "by": by, "reason": reason, "tripped": tripped.model_dump()},
    )
    notify(
        ctx,
        "breaker-reset",
        cluster,
        group or "",
        f"hyperpod-dhc: {'breaker' if group is None else group + ' hold'} reset on {cluster}",
        {"scope": answer["scope"], "by": by, "reason": reason, "released": [r.key for r in released]},
    )
    if released:
        ctx.start_round(cluster)
    return {**answer, "reset": True, "message": "reset", "released": [r.key for r in released]}
