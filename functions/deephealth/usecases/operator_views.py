"""What operators read (GET routes of the operator API): clusters, instance groups, nodes, breakers.

Each function is named like its route in `handlers/api.py`. They read the stored records (rounds and Reconcile
keep them fresh), never a HyperPod listing."""

from __future__ import annotations

from typing import Any

from deephealth.domain.limits import budget_use, failure_counts
from deephealth.domain.nodes import NodeRecord, NodeState
from deephealth.domain.on_demand import find
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
