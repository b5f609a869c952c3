"""Start check: ask HyperPod for one deep health check of the round's members that are Running (at most once
per round), and hand the others back to the queue."""

from __future__ import annotations

from deephealth.domain.errors import ClusterBusy, Throttled
from deephealth.domain.nodes import IN_PROGRESS, RUNNING, NodeState, transition
from deephealth.domain.rounds import RoundState, build_check_request, expected_check_s, listing_window, next_wait
from deephealth.observability import logger, node_metric
from deephealth.usecases.claim_round import shadow_checks
from deephealth.usecases.context import Context
from deephealth.usecases.decisions import save_and_announce
from deephealth.usecases.observe_cluster import observe_cluster


def start_check(ctx: Context, state: RoundState) -> RoundState:
    now = ctx.renew(state)
    # Observing (not just listing) judges nodes still in the check of a round that died mid-check.
    view = observe_cluster(ctx, state.cluster, state.round_id, orphaned_before=state.round_seq)
    snapshots = view.snapshots
    members = view.members(state.round_id)
    # A group switched to dry-run while this round waited (ClusterBusy retries) gets no check.
    shadow = [r for r in members if view.groups[r.group].policy.dry_run]
    shadow_checks(ctx, shadow, view, state.round_id, now)
    members = [r for r in members if not view.groups[r.group].policy.dry_run]
    ours = {r.key for r in members}
    # Members already in a check are ours only if this round asked for one (a retry after the call went
    # through); otherwise someone else's check (an operator's, a dead round's) covers them.
    requested = ctx.table.round_meta(state.cluster).check_requested == state.round_id
    elsewhere = [
        key
        for key, s in snapshots.items()
        if s.status == IN_PROGRESS
        and (key not in ours or not requested)
        and (group := view.groups.get(s.group)) is not None
        and not group.observe_only  # HyperPod's on-start checks are not on-demand checks
    ]
    if elsewhere:
        # An on-demand check is still active (a dead round's, or an operator's): asking now is only refused.
        raise ClusterBusy(f"{len(elsewhere)} node(s) of {state.cluster} are in a check this round did not start")
    ready, unready, already = [], [], []
    for r in members:
        s = snapshots.get(r.key)
        if s and s.instance_id == r.instance_id and s.status == IN_PROGRESS:
            already.append(r)  # our own request went through before a retry of this step
        elif s and s.instance_id == r.instance_id and s.status == RUNNING:
            ready.append(r)
        else:
            unready.append(r)
    save_and_announce(
        ctx,
        [
            transition(
                r,
                now,
                NodeState.PENDING,
                "not Running when the check started; back in the queue",
                state.round_id,
                round_id=None,
                ready_at=None,
            )
            for r in unready
        ],
    )
    configs = build_check_request(ready + already, view.groups)
    if ready and not already and requested:
        # This round asked before and the answer was lost (a 5xx, or this step failed after the call): the
        # check may be starting. Asking again could be a second request while it runs, so it is not: if the
        # first request never arrived, its members are judged skipped and checked again (never passed).
        logger.warning("check already requested by this round; not asking again", extra={"round_id": state.round_id})
    elif ready and not already:
        # Intent first: a retry of this step after the call went through knows the check is its own.
        ctx.table.note_check_request(state.cluster, state.round_id)
        try:
            ctx.hyperpod.start_health_check(state.cluster, configs)
        except (ClusterBusy, Throttled):
            ctx.table.note_check_request(state.cluster, None)  # refused or never carried out
            raise
        logger.info("check started", extra={"round_id": state.round_id, "configurations": configs})
    save_and_announce(
        ctx,
        [
            r.model_copy(update={"check_started_at": now, "updated_at": now})
            for r in ready + already
            if r.check_started_at is None
        ],
        audit=False,
    )
    node_metric("NodesChecked", state.cluster, len(ready) + len(already))
    expected = expected_check_s(configs)
    interval = min((g.policy.poll_interval_s for g in view.groups.values()), default=60)
    wait = next_wait(now, now, expected, interval, awaiting_start=True) if configs else 0
    window = listing_window(snapshots[r.key] for r in ready + already)
    return state.model_copy(
        update={"started_at": now, "wait_s": wait, "done": not configs, "window": window, "observed_at": now}
    )
