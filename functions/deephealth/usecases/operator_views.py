"""What operators read (GET routes of the operator API): clusters, instance groups, nodes, breakers, readings.

Each function is named like its route in `handlers/api.py`. They read the stored records (rounds and Reconcile
keep them fresh), never a HyperPod listing."""

from __future__ import annotations

from typing import Any

from deephealth.domain.errors import ClusterNotFound
from deephealth.domain.limits import budget_use, failure_counts
from deephealth.domain.nodes import NodeRecord, NodeState
from deephealth.domain.on_demand import find
from deephealth.domain.readings import ClusterReadings
from deephealth.domain.views import group_views, node_detail, node_summary, state_counts
from deephealth.usecases.context import Context


def list_clusters(ctx: Context) -> list[dict[str, Any]]:
    return [
        {
            "cluster": name,
            "states": state_counts(list(ctx.shown(name).records.values())),
            "live_round": ctx.live_round(name),
        }
        for name in ctx.cluster_names()
    ]


def list_groups(ctx: Context, cluster: str) -> list[dict[str, Any]]:
    ctx.known_cluster(cluster)
    return group_views(list(ctx.shown(cluster).records.values()), ctx.live_round(cluster))


def list_nodes(
    ctx: Context, cluster: str, group: str | None, state: str | None, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of nodes, ordered by node key; `after` is the last key of the previous page."""
    ctx.known_cluster(cluster)
    records = sorted(ctx.shown(cluster).records.values(), key=lambda r: r.key)
    chosen = [
        r
        for r in records
        if (group is None or r.group == group)
        and (state is None or r.state == state)
        and (after is None or r.key > after)
    ]
    page = chosen[:limit]
    return [node_summary(r) for r in page], (page[-1].key if len(chosen) > limit else None)


def get_node(ctx: Context, cluster: str, ref: str) -> dict[str, Any] | None:
    ctx.known_cluster(cluster)
    record = find(ctx.shown(cluster).records, ref)
    return None if record is None else node_detail(record)


def get_breakers(ctx: Context, cluster: str) -> dict[str, Any]:
    """The cluster's breaker, bad-capacity holds, replacement budgets in use and the nodes they hold."""
    ctx.known_cluster(cluster)
    now = ctx.clock()
    view = ctx.shown(cluster)
    state = ctx.safety(view.info)
    records = list(view.records.values())
    config = ctx.config()
    policy = config.cluster_policy(cluster)
    since = max(now - policy.breaker.window_h * 3600, state.breaker_reset_at)
    failed, verdicted = failure_counts(records, since)
    groups: dict[str, list[NodeRecord]] = {}
    for r in records:
        groups.setdefault(r.group, []).append(r)
    return {
        "cluster": cluster,
        "breaker": {
            "open": state.breaker is not None,
            "tripped": state.breaker.model_dump() if state.breaker else None,
            "failed_nodes": failed,
            "verdicted_nodes": verdicted,
            "policy": policy.breaker.model_dump(),
        },
        "capacity_holds": {g: t.model_dump() for g, t in sorted(state.capacity_holds.items())},
        "replace_budget": {
            "cluster": budget_use(records, policy.replace_budget, now),
            "groups": {
                g: budget_use(members, config.policy_for(cluster, g).replace_budget, now)
                for g, members in sorted(groups.items())
            },
        },
        "held_nodes": [
            {
                "node": r.key,
                "group": r.group,
                "held_by": r.held_by,
                "reason": r.history[-1].reason if r.history else "",
            }
            for r in sorted(records, key=lambda r: r.key)
            if r.state == NodeState.RECOVERY_DUE and r.held_by
        ],
        "resets": [x.model_dump() for x in state.resets],
    }


def get_readings(ctx: Context, cluster: str) -> dict[str, Any]:
    """What the cluster was seen to do where AWS does not document it, the settle and revisit times its lag gives
    each group, and the same as the twin's `fidelity` block (a scenario anyone can replay)."""
    ctx.known_cluster(cluster)
    try:
        view = ctx.view(cluster, load_records=False)
    except ClusterNotFound:
        return {"cluster": cluster, "lines": 0, "note": "HyperPod no longer knows this cluster"}
    readings = view.readings or ClusterReadings(cluster=cluster)
    watched = {name: g for name, g in sorted(view.groups.items()) if g.watched}
    return {
        "cluster": cluster,
        "lines": readings.lines,
        "streams": readings.streams,
        "formats": readings.formats,
        "instance_in_line": readings.instance_in_line,
        "shapes": {k: v.model_dump() for k, v in sorted(readings.shapes.items())},
        "pass_lines": readings.pass_lines,
        "peer_lines": readings.peer_lines,
        "anonymous_nccl": readings.anonymous_nccl,
        "lag": {
            "min_s": readings.lag_min_s,
            "max_s": readings.lag_max_s,
            "histogram": readings.lag_histogram,
            "late_lines": readings.late_lines,
            "settle_s": {name: g.settle_s for name, g in watched.items()},
            "revisit_s": {name: g.revisit_s for name, g in watched.items()},
        },
        "statuses_after_failure": readings.statuses_after_failure,
        "busy_errors": {k: v.model_dump() for k, v in readings.busy_errors.items()},
        "silent_nodes": readings.silent_nodes,
        "as_fidelity": readings.as_fidelity(),
    }
