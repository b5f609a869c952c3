"""Recover nodes: the recoveries due now, through the safety gate (breaker, holds, budgets, caps), then the
reboots and replacements it lets through, each recorded before it is asked for."""

from __future__ import annotations

from deephealth.adapters.hyperpod import ClusterInfo
from deephealth.domain.actions import action_refused, action_started, action_unconfirmed
from deephealth.domain.errors import ClusterNotFound
from deephealth.domain.nodes import Action, NodeRecord
from deephealth.domain.rounds import RoundState
from deephealth.domain.safety import gate_recovery
from deephealth.observability import logger, node_metric
from deephealth.usecases.context import Context
from deephealth.usecases.decisions import alert, save_and_announce


def recover_nodes(ctx: Context, state: RoundState) -> RoundState:
    now = ctx.renew(state)
    try:
        view = ctx.view(state.cluster)
    except ClusterNotFound:
        return state.model_copy(update={"recovery_due": 0})
    due = ctx.due(view)
    if not due:
        return state.model_copy(update={"recovery_due": 0})
    safety = ctx.safety(view.info)
    plan = gate_recovery(
        due,
        view.records,
        view.groups,
        ctx.config().cluster_policy(state.cluster),
        safety,
        now,
        state.round_id,
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
