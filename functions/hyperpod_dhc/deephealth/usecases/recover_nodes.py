"""Recover nodes: the recoveries due now, through the safety gate (breaker, holds, budgets, caps), then the
reboots and replacements it lets through, each recorded before it is asked for."""

from __future__ import annotations

from hyperpod_dhc.deephealth.adapters.hyperpod import ClusterInfo
from hyperpod_dhc.deephealth.domain.actions import action_refused, action_started, action_unconfirmed
from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound
from hyperpod_dhc.deephealth.domain.grace import after_grace, grace_expired, grace_start, hyperpod_action
from hyperpod_dhc.deephealth.domain.nodes import IN_PROGRESS, Action, NodeRecord, NodeState
from hyperpod_dhc.deephealth.domain.rounds import RoundState
from hyperpod_dhc.deephealth.domain.safety import gate_recovery
from hyperpod_dhc.deephealth.observability import logger, node_metric
from hyperpod_dhc.deephealth.usecases.context import ClusterView, Context
from hyperpod_dhc.deephealth.usecases.decisions import alert, save_and_announce


def recover_nodes(ctx: Context, state: RoundState) -> RoundState:
    now = ctx.renew(state)
    try:
        view = ctx.view(state.cluster)
    except ClusterNotFound:
        return state.model_copy(update={"recovery_due": 0})
    due = ctx.due(view)
    if due:
        try:
            due = end_grace(ctx, state, view, due, now)
        except ClusterNotFound:
            return state.model_copy(update={"recovery_due": 0})
    if not due:
        return state.model_copy(update={"recovery_due": 0})
    safety = ctx.safety(view.info)
    # A node left in DeepHealthCheckInProgress is isolated, not busy, once no check operation runs: ask once.
    stuck = any(r.status == IN_PROGRESS for r in due)
    check_active = ctx.hyperpod.check_in_progress(state.cluster) if stuck else None
    plan = gate_recovery(
        due,
        view.records,
        view.groups,
        ctx.config().cluster_policy(state.cluster),
        safety,
        now,
        state.round_id,
        check_active,
    )
    if plan.safety is not None:
        # Conditional: a concurrent operator reset wins, and this round's actions wait for the next look.
        ctx.table.save_safety(plan.safety)
        logger.warning(
            "safety tripped",
            extra={"cluster": state.cluster, "round_id": state.round_id, "safety": plan.safety.model_dump()},
        )
    for raised in plan.alerts:
        alert(ctx, state.cluster, raised)
    save_and_announce(ctx, plan.changes)
    for action, records in plan.acts.items():
        if records:
            act(ctx, state, view.info, action, records)
    return state.model_copy(update={"recovery_due": 0})


def end_grace(
    ctx: Context, state: RoundState, view: ClusterView, due: list[NodeRecord], now: float
) -> list[NodeRecord]:
    """Nodes whose HyperPod grace expired: one ListClusterEvents each, since the grace began (`grace_start`).
    HyperPod acted (a reboot between our listings): the node is checked again, not acted on; it did not: its
    ladder step is recorded. Returns `due` without the re-checked nodes, the others as saved (`view.records` too)."""
    expired = grace_expired(due)
    if not expired:
        return due
    changes = []
    for r in expired:
        policy = view.groups[r.group].policy
        events = ctx.hyperpod.instance_events_since(state.cluster, r.instance_id or "", grace_start(r, policy))
        change = after_grace(r, hyperpod_action(events), policy, now, state.round_id)
        if change is not None:
            changes.append(change)
    saved = {r.key: r for r in save_and_announce(ctx, changes)}
    view.records.update(saved)
    rechecked = {r.key for r, _ in changes if r.state != NodeState.RECOVERY_DUE}
    # A change lost to a concurrent writer drops its node: the next look re-decides from fresh state.
    lost = {r.key for r, _ in changes} - set(saved)
    return [saved.get(r.key, r) for r in due if r.key not in rechecked and r.key not in lost]


def act(ctx: Context, state: RoundState, info: ClusterInfo, action: Action, records: list[NodeRecord]) -> None:
    """One reboot or replacement request for `records`: intent saved first, then HyperPod's answer per node."""
    now = ctx.clock()
    # Intent first: a node is RECOVERING before the call, so a crash cannot lead to a second action.
    owned = save_and_announce(ctx, [action_started(r, action, now, state.round_id) for r in records])
    if not owned:
        return
    by_logical = [r.logical_id for r in owned if r.logical_id]
    by_instance = [r.instance_id for r in owned if not r.logical_id and r.instance_id]
    try:
        outcomes = ctx.hyperpod.act(info.name, action, by_logical, by_instance)
    except Exception as err:
        # The call failed as a whole: back off and retry a bounded number of times, then an operator decides.
        save_and_announce(
            ctx,
            [action_refused(r, action, type(err).__name__, str(err), ctx.clock(), state.round_id) for r in owned],
        )
        raise
    by_key = {(r.logical_id or r.instance_id): r for r in owned}
    refused = [
        action_refused(by_key[o.key], action, o.code, o.message, now, state.round_id)
        for o in outcomes
        if not o.ok and not o.unconfirmed and o.key in by_key
    ]
    unconfirmed = [
        action_unconfirmed(by_key[o.key], action, f"{o.code}: {o.message}", now, state.round_id)
        for o in outcomes
        if o.unconfirmed and o.key in by_key
    ]
    save_and_announce(ctx, refused + unconfirmed)
    node_metric(f"{action.value.capitalize()}Requests", info.name, len(owned) - len(refused))
