"""Poll check: look at the round's check until none of its members is left in it, and say when to look again."""

from __future__ import annotations

from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound
from hyperpod_dhc.deephealth.domain.rounds import (
    RoundState,
    acting_on,
    build_check_request,
    check_over,
    expected_check_s,
    listing_window,
    next_look,
    operations_look_due,
    settling_elsewhere,
    whole_look_due,
)
from hyperpod_dhc.deephealth.usecases.context import Context
from hyperpod_dhc.deephealth.usecases.observe_cluster import (
    close_cluster,
    observe_cluster,
    observe_members,
    watch_on_start_checks,
)

MAX_POLLS = 2000  # a hard stop far beyond any check timeout, in case the clock misbehaves


def poll_check(ctx: Context, state: RoundState) -> RoundState:
    """Look at the round's members (and, when something else may have changed, at the whole cluster); decide when
    to look again. The round ends only after a look at the whole cluster has found no member left in the check."""
    now, meta = ctx.renewed(state)
    observed_at = state.observed_at
    full = state.window is None or whole_look_due(observed_at, meta.changed_at, state.acting > 0, now)
    # Nodes an earlier round left settling (below): their lines are due now, and only a whole look judges them.
    full = full or (state.judge_at is not None and now >= state.judge_at)
    ask = operations_look_due(state.operations_at, now)
    try:
        if not full:
            view = observe_members(ctx, state.cluster, state.round_id, state.window, ask)  # type: ignore[arg-type]
            # It looks finished, or its check just ended (once): confirm on the whole cluster.
            members = view.members(state.round_id)
            left = [r.check_left_at for r in members if r.check_left_at is not None]
            full = len(left) == len(members) and (not left or observed_at is None or observed_at < max(left))
        if full:
            view = observe_cluster(
                ctx, state.cluster, state.round_id, orphaned_before=state.round_seq, ask_operations=ask, by_round=True
            )
            observed_at = now
    except ClusterNotFound:
        close_cluster(ctx, state.cluster, "cluster deleted during the round", state.round_id)
        return state.model_copy(update={"done": True, "wait_s": 0, "recovery_due": 0})
    window = state.window
    if full and watch_on_start_checks(ctx, view, state.round_id, state.round_seq):
        # Nodes that began HyperPod's on-start check since: this round's polls judge them too.
        window = listing_window(view.snapshots.get(r.key) for r in view.members(state.round_id))
    members = view.members(state.round_id)
    polls = state.polls + 1
    handed_on = full and check_over(members, view.records.values()) and ctx.progress(view) is not None
    done = not members or handed_on or polls >= MAX_POLLS
    configs = build_check_request(members, view.groups) if members else []
    judge_at = settling_elsewhere(view.records.values(), view.groups, state.round_id, now) if full else state.judge_at
    wait = (
        0
        if done
        else next_look(members, view.groups, state.started_at or now, now, expected_check_s(configs), judge_at)
    )
    return state.model_copy(
        update={
            "done": done,
            "wait_s": wait,
            "polls": polls,
            "observed_at": observed_at,
            "judge_at": judge_at,
            "operations_at": now if view.operations_asked else state.operations_at,
            "window": window,
            "acting": acting_on(view.records.values()) if full else state.acting,
            # Due now, among what this look saw: the workflow recovers them at once (Recover decided nodes) rather
            # than at the round's end, so they are back for the next round. Only a look at the whole cluster sees
            # every due node; the round ends on one.
            "recovery_due": len(ctx.due(view)),
        }
    )
