"""Poll check: look at the round's check until none of its members is left in it, and say when to look again."""

from __future__ import annotations

import math

from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound
from hyperpod_dhc.deephealth.domain.listing_windows import listing_windows, narrowed_windows
from hyperpod_dhc.deephealth.domain.rounds import (
    MEMBERS_LIST_S,
    RoundState,
    acting_on,
    build_check_request,
    check_over,
    expected_check_s,
    members_due_at,
    members_look,
    next_look,
    operations_look_due,
    settling_elsewhere,
    unchanged_since,
    wake_for,
    whole_look_due,
)
from hyperpod_dhc.deephealth.evidence.attribute import SKEW_MAX_S
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
    full = state.windows is None or whole_look_due(observed_at, meta.changed_at, state.acting > 0, now)
    # Nodes another check left settling (below) have their lines due: judged on the whole look that found them out
    # of it when nothing moved since (`unchanged_since`), else on a new whole look.
    elsewhere = state.judge_at is not None and now >= state.judge_at
    full = full or (elsewhere and not unchanged_since(observed_at, meta.changed_at))
    ask = operations_look_due(state.operations_at, now)
    listed = True
    try:
        lines = _count_lines(ctx, state)
        look = "list" if full else members_look(state, lines, meta.changed_at, now)
        if look == "none" and elsewhere:
            look = "judge"
        if look == "none":
            return _quiet_poll(state, now)
        if not full:
            listed = look == "list"
            spans = (state.windows or []) if listed else []
            view = observe_members(ctx, state.cluster, state.round_id, spans, ask, elsewhere=elsewhere)
            # It looks finished, or its check just ended (once): confirm on the whole cluster. Not after judging
            # without a listing: the listing that found the last member out did.
            members = view.members(state.round_id)
            left = [r.check_left_at for r in members if r.check_left_at is not None]
            ended = len(left) == len(members) and (not left or observed_at is None or observed_at < max(left))
            full = listed and ended
        if full:
            view = observe_cluster(
                ctx, state.cluster, state.round_id, orphaned_before=state.round_seq, ask_operations=ask, by_round=True
            )
            observed_at = now
    except ClusterNotFound:
        close_cluster(ctx, state.cluster, "cluster deleted during the round", state.round_id)
        return state.model_copy(update={"done": True, "wait_s": 0, "recovery_due": 0})
    if full:
        # Nodes that began HyperPod's on-start check since: this round's polls judge them too.
        watch_on_start_checks(ctx, view, state.round_id, state.round_seq)
    windows = state.windows
    if listed:
        # Where the members still in the check are now (one replaced mid-check has a new launch time), in the fewest
        # pages; the next listing leaves out those that left it (judged on their last listing once settled), so a
        # round's tail lists fewer pages as it drains. As before while one has no launch time (provisioning), or
        # none is left in the check.
        inside = [view.snapshots.get(r.key) for r in view.members(state.round_id) if r.check_left_at is None]
        if full:
            windows = listing_windows(inside, view.snapshots.values()) or windows
        elif any(s is None for s in inside):
            # A member in its check the windows missed (HyperPod replaced it: a new launch time; or one found with
            # another instance while it settled): the next poll looks at the whole cluster, not the hourly one.
            windows = None
        else:
            windows = narrowed_windows(state.windows or [], inside, view.snapshots.values()) or windows
    members = view.members(state.round_id)
    polls = state.polls + 1
    handed_on = full and check_over(members, view.records.values()) and ctx.progress(view) is not None
    done = not members or handed_on or polls >= MAX_POLLS
    configs = build_check_request(members, view.groups) if members else []
    judge_at = state.judge_at
    if full or elsewhere:
        judge_at = settling_elsewhere((view.names() or {}).values(), view.groups, state.round_id, now)
    wait = (
        0
        if done
        else next_look(members, view.groups, state.started_at or now, now, expected_check_s(configs), judge_at)
    )
    started = [r.check_started_at for r in members if r.check_started_at is not None]
    return state.model_copy(
        update={
            "done": done,
            "wait_s": wait,
            "polls": polls,
            "observed_at": observed_at,
            "listed_at": now if listed else state.listed_at,
            "lines_from": min(started) - SKEW_MAX_S if started else None,
            # Counted from the old edge: a count from a new one is a new number, so the next poll lists again.
            "lines_seen": lines,
            "members_due_at": members_due_at(members, view.groups, now),
            "judge_at": judge_at,
            "operations_at": now if view.operations_asked else state.operations_at,
            "windows": windows,
            "acting": acting_on(view.records.values()) if full else state.acting,
            # Due now, among what this look saw: the workflow recovers them at once (Recover decided nodes) rather
            # than at the round's end, so they are back for the next round. Only a look at the whole cluster sees
            # every due node; the round ends on one.
            "recovery_due": len(ctx.due(view)),
        }
    )


def _count_lines(ctx: Context, state: RoundState) -> int | None:
    """The result-log events from where the members' lines begin (None: no listing has said where yet)."""
    if state.lines_from is None:
        return None
    return ctx.logs.count_since(ctx.describe(state.cluster).log_group, state.lines_from)


def _quiet_poll(state: RoundState, now: float) -> RoundState:
    """A poll that lists nothing (`members_look`): it waits as the last listing said, no later than the
    next listing that falls due by time."""
    until = [state.listed_at + MEMBERS_LIST_S - now] if state.listed_at is not None else []
    if state.members_due_at is not None:
        until.append(state.members_due_at - now)
    wait = min([float(state.wait_s), *until])
    return state.model_copy(
        update={
            "polls": state.polls + 1,
            "wait_s": wake_for(max(1, math.ceil(wait)), state.judge_at, now),
            "recovery_due": 0,
        }
    )
