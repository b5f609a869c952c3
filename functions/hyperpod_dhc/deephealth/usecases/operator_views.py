"""What operators read (GET routes of the operator API): clusters, instance groups, nodes, breakers, readings.

Each function is named like its route in `handlers/api.py`. They read the stored records (rounds and Reconcile
keep them fresh), never a HyperPod listing."""

from __future__ import annotations

from typing import Any

from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound
from hyperpod_dhc.deephealth.domain.limits import budget_use, failure_counts
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState, short_hostname
from hyperpod_dhc.deephealth.domain.observe import checked_for
from hyperpod_dhc.deephealth.domain.on_demand import find
from hyperpod_dhc.deephealth.domain.readings import ClusterReadings
from hyperpod_dhc.deephealth.domain.result_log import ResultLog, previous_verdict_at
from hyperpod_dhc.deephealth.domain.views import group_views, node_detail, node_summary, state_counts
from hyperpod_dhc.deephealth.evidence.attribute import SKEW_MAX_S, Ownership
from hyperpod_dhc.deephealth.evidence.capture import Capture
from hyperpod_dhc.deephealth.evidence.rules import merge_patterns
from hyperpod_dhc.deephealth.usecases.context import ClusterView, Context

CAPTURE_MAX_EVENTS = 5000  # a captured check's events (its own stream first): well under the API's 6 MB answer


def list_clusters(ctx: Context) -> list[dict[str, Any]]:
    clusters = []
    for name in ctx.cluster_names():
        view = ctx.shown(name)
        clusters.append(
            {
                "cluster": name,
                "states": state_counts(list(view.records.values())),
                "live_round": ctx.live_round(name),
                **stopped(ctx, view),
            }
        )
    return clusters


def list_groups(ctx: Context, cluster: str) -> dict[str, Any]:
    """The cluster's groups, and what stops its recovery (`stopped`): status shows both."""
    ctx.known_cluster(cluster)
    view = ctx.shown(cluster)
    return {"groups": group_views(list(view.records.values()), ctx.live_round(cluster)), **stopped(ctx, view)}


def stopped(ctx: Context, view: ClusterView) -> dict[str, Any]:
    """What stops the cluster's recovery until an operator resets it: its breaker when open (`get_breakers`'
    `breaker.open` and `breaker.tripped`) and its bad-capacity holds per group (as `get_breakers` has them)."""
    state = ctx.safety(view.info)
    tripped = state.breaker.model_dump() if state.breaker else None
    return {
        "breaker": {"open": tripped is not None, "tripped": tripped},
        "capacity_holds": {g: t.model_dump() for g, t in sorted(state.capacity_holds.items())},
    }


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
        "foreign_streams": {k: v.model_dump() for k, v in sorted(readings.foreign_streams.items())},
        "inconclusive_by_shape": readings.inconclusive_by_shape,
        "verdicts": readings.verdicts,
        "lag": {
            "min_s": readings.lag_min_s,
            "max_s": readings.lag_max_s,
            "lateness": {k: round(b.weight, 2) for k, b in readings.lateness.items()},
            "late_lines": readings.late_lines,
            "settle_s": {name: g.settle_s for name, g in watched.items()},
            "revisit_s": {name: g.revisit_s for name, g in watched.items()},
        },
        "statuses_after_failure": readings.statuses_after_failure,
        "busy_errors": {k: v.model_dump() for k, v in readings.busy_errors.items()},
        "silent_nodes": readings.silent_nodes,
        "as_fidelity": readings.as_fidelity(),
    }


def capture_check(ctx: Context, cluster: str, ref: str) -> dict[str, Any] | None:
    """The node's last check as the controller reads it, as a captured check
    (`hyperpod_dhc.deephealth.evidence.capture`): its own stream's events from its window (widened as far as a clock's
    skew may) to now, and those of streams that are no node's; other nodes' streams are left out. None: no such node;
    {}: it has had no check yet."""
    ctx.known_cluster(cluster)
    view = ctx.shown(cluster)
    record = find(view.records, ref)
    if record is None:
        return None
    started = record.check_started_at
    group = view.groups.get(record.group)
    if started is None or group is None:
        return {}
    since = started - SKEW_MAX_S
    events = ctx.logs.events_since(view.info.log_group, since)
    read = ResultLog.of(events, view.records.values(), since=since, read_at=ctx.clock())
    kept = {id(e) for f, how, owner in read.placed if how == Ownership.FOREIGN or owner == record.key
            for e in f.record.events}  # fmt: skip
    mine = sorted((e for e in events if id(e) in kept), key=lambda e: (e.stream != _own_stream(read, record.key), 0))
    revisit_until = None
    if record.state == NodeState.PASSED and record.verdict_at is not None:
        revisit_until = record.verdict_at + group.revisit_s
    patterns = merge_patterns(ctx.config().cluster_policy(cluster).result_patterns, group.policy.result_patterns)
    capture = Capture(
        events=tuple(sorted(mine[:CAPTURE_MAX_EVENTS], key=lambda e: (e.stream, e.timestamp_ms))),
        instance_id=record.instance_id or record.key,
        checks=tuple(checked_for(record, group)),
        check_started_at=started,
        check_left_at=record.check_left_at,
        hostname=short_hostname(record.hostname),
        instance_type=record.instance_type,
        logical_id=record.logical_id,
        nccl_set_size=record.check_set_size,
        result_patterns=patterns,
        efa_devices=group.policy.efa_devices,
        previous_verdict_at=previous_verdict_at(record),
        revisit_until=revisit_until,
        anonymous_rechecks=record.anonymous_rechecks,
    )
    return {**capture.as_json(), "captured": {"cluster": cluster, "node": record.key, "state": record.state.value,
                                              "verdict": record.verdict, "evidence": record.evidence}}  # fmt: skip


def _own_stream(read: ResultLog, key: str) -> str | None:
    return next((f.record.stream for f, owner in read.owned() if owner == key), None)
