"""Start check: ask HyperPod for one deep health check of the round's members that are Running (at most once
per round), and hand the others back to the queue."""

from __future__ import annotations

from hyperpod_dhc.deephealth.domain.errors import CheckRefused, ClusterBusy, RecoveryFirst, Throttled
from hyperpod_dhc.deephealth.domain.listing_windows import listing_windows, narrowed_windows
from hyperpod_dhc.deephealth.domain.nodes import IN_PROGRESS, RUNNING, NodeRecord, NodeState, Verdict, transition
from hyperpod_dhc.deephealth.domain.recovery import apply_verdict
from hyperpod_dhc.deephealth.domain.rounds import (
    CLAIM_LOOK_S,
    RoundState,
    acting_on,
    build_check_request,
    expected_check_s,
    next_wait,
    poll_interval,
    split_dry_run,
    unchanged_since,
    wake_for,
)
from hyperpod_dhc.deephealth.observability import logger, node_metric
from hyperpod_dhc.deephealth.usecases.claim_round import shadow_checks
from hyperpod_dhc.deephealth.usecases.context import ClusterView, Context
from hyperpod_dhc.deephealth.usecases.decisions import save_and_announce
from hyperpod_dhc.deephealth.usecases.observe_cluster import observe_cluster, observe_members
from hyperpod_dhc.deephealth.usecases.readings import note_busy_error, note_look, operation_overdue


def start_check(ctx: Context, state: RoundState) -> RoundState:
    now, meta = ctx.renewed(state)
    fresh = (
        state.windows is not None
        and state.observed_at is not None
        and now - state.observed_at < CLAIM_LOOK_S
        and unchanged_since(state.observed_at, meta.changed_at)
    )
    if fresh:
        # The Claim's whole look just now found the members (and judged what else was due then): list only theirs.
        view = observe_members(ctx, state.cluster, state.round_id, state.windows or [])
        # One the windows miss (claimed by an earlier try of the Claim, replaced since): look at the whole cluster.
        fresh = all(r.key in view.snapshots for r in view.members(state.round_id))
        view.records, view.complete = dict(view.names() or view.records), True
    if not fresh:
        # Observing (not just listing) judges nodes still in the check of a round that died mid-check.
        view = observe_cluster(ctx, state.cluster, state.round_id, orphaned_before=state.round_seq, by_round=True)
    snapshots = view.snapshots
    members = view.members(state.round_id)
    # A group switched to dry-run while this round waited (ClusterBusy retries) gets no check.
    shadow, members = split_dry_run(members, view.groups)
    shadow_checks(ctx, shadow, view, state.round_id, now)
    # Nodes in HyperPod's on-start check, which this round watches: no request, only polls.
    watched = [r for r in members if r.observe_only]
    members = [r for r in members if not r.observe_only]
    # Members in a check are ours only if this round asked for one (a retry after the call went through).
    requested = ctx.table.round_meta(state.cluster).check_requested == state.round_id
    ready, unready, already = [], [], []
    for r in members:
        s = snapshots.get(r.key)
        if s and s.instance_id == r.instance_id and s.status == IN_PROGRESS and requested:
            already.append(r)  # our own request went through before a retry of this step
        elif s and s.instance_id == r.instance_id and s.status == RUNNING:
            ready.append(r)
        else:
            # Not Running, or left in DeepHealthCheckInProgress by a check that is over (a node can stay
            # there after failing one): it waits in the queue and holds back no one else's request.
            unready.append(r)
    if ready and not requested and (active := ctx.hyperpod.active_check(state.cluster)) is not None:
        # HyperPod's operation, not node statuses, says a check is active (a dead round's, an operator's):
        # asking now is only refused. One open for longer than any check takes (held open by a node isolated
        # after failing it?) is said once, and asked past once: HyperPod may merge or supersede; if it refuses,
        # the rounds wait for it to close (asking at every retry would only be refused again).
        note_look(ctx, view, None, [], active, now)
        # Only when the gate lets one through: a held recovery (a budget of 0, say) would change nothing, and the
        # round would go round Recover before check until the operation closed.
        holders = [r for r in ctx.due(view) if r.status == IN_PROGRESS]
        if holders and ctx.recoverable(view, holders, check_active=True):
            raise RecoveryFirst(f"{len(holders)} node(s) due for recovery may hold the operation on {state.cluster}")
        if not operation_overdue(view, active, now):
            raise ClusterBusy(f"a deep health check this round did not start is in progress on {state.cluster}")
        if not ctx.table.note_asked_past(state.cluster, active.operation_id):
            raise ClusterBusy(
                f"operation {active.operation_id} on {state.cluster} is overdue and was asked past once already"
            )
        logger.warning(
            "asking past an overdue check operation",
            extra={"round_id": state.round_id, "operation_id": active.operation_id},
        )
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
    checked = ready + already
    if ready and not already and requested:
        # This round asked before and the answer was lost (a 5xx, or this step failed after the call): the
        # check may be starting. Asking again could be a second request while it runs, so it is not: if the
        # first request never arrived, its members are judged skipped and checked again (never passed).
        logger.warning("check already requested by this round; not asking again", extra={"round_id": state.round_id})
    elif ready and not already:
        checked = request_check(ctx, state, view, ready, now)
    configs = build_check_request(checked + watched, view.groups)
    types = {iid: tuple(cfg["DeepHealthChecks"]) for cfg in configs for iid in cfg["InstanceIds"]}
    sizes = {iid: len(cfg["InstanceIds"]) for cfg in configs for iid in cfg["InstanceIds"]}
    save_and_announce(
        ctx,
        [
            r.model_copy(
                update={
                    "check_started_at": now,
                    "updated_at": now,
                    "check_types": types.get(r.instance_id or ""),
                    "check_set_size": sizes.get(r.instance_id or ""),
                }
            )
            for r in checked
            if r.check_started_at is None
        ],
        audit=False,
    )
    node_metric("NodesChecked", state.cluster, len(checked))
    expected = expected_check_s(configs)
    # The round's clock starts with its earliest member's check (a watched node's began before the round); a
    # requested check's first poll confirms its start.
    started = min([now, *(r.check_started_at for r in watched if r.check_started_at is not None)])
    clock = (now, now) if checked else (started, now)
    # An earlier round's nodes may have their lines due before the first poll (judge_at).
    wait = (
        wake_for(next_wait(*clock, expected, poll_interval(view.groups), bool(checked)), state.judge_at, now)
        if configs
        else 0
    )
    inside = [snapshots.get(r.key) for r in checked + watched]
    if fresh:
        windows = narrowed_windows(state.windows or [], inside, snapshots.values()) or state.windows
    else:
        windows = listing_windows(inside, snapshots.values())
    return state.model_copy(
        update={
            "started_at": started,
            "wait_s": wait,
            "done": not configs,
            "windows": windows,
            "observed_at": state.observed_at if fresh else now,
            "acting": acting_on(view.records.values()),
        }
    )


def request_check(
    ctx: Context, state: RoundState, view: ClusterView, ready: list[NodeRecord], now: float
) -> list[NodeRecord]:
    """One StartClusterHealthCheck for `ready`; returns the members the started check covers.

    A request refused for itself (CheckRefused: not busy) that spans several groups is asked again one group
    at a time, stopping at the first accepted (one active check per cluster), so one group HyperPod will not
    check holds back no other: a group refused on its own leaves the round inconclusive, the groups not
    tried go back to the queue. At most one request per group per round.
    """
    cluster = state.cluster
    by_group: dict[str, list[NodeRecord]] = {}
    for r in ready:
        by_group.setdefault(r.group, []).append(r)
    # Intent first: a retry of this step after the call went through knows the check is its own.
    ctx.table.note_check_request(cluster, state.round_id)
    try:
        if _asked(ctx, state, ready, view, now):
            return ready
        groups = sorted(by_group) if len(by_group) > 1 else []
        for i, group in enumerate(groups):
            if _asked(ctx, state, by_group[group], view, now):
                requeue = [r for later in groups[i + 1 :] for r in by_group[later]]
                reason = f"not checked this round: HyperPod runs one check at a time ({group}'s went first)"
                save_and_announce(
                    ctx, [transition(r, now, NodeState.PENDING, reason, state.round_id, round_id=None) for r in requeue]
                )
                return by_group[group]
    except (ClusterBusy, Throttled, CheckRefused) as refused:
        ctx.table.note_check_request(cluster, None)  # refused or never carried out
        if isinstance(refused, ClusterBusy) and refused.refusal is not None:
            note_busy_error(ctx, view, refused.refusal)
        raise
    ctx.table.note_check_request(cluster, None)  # every request refused: no check is ours
    return []


def _asked(ctx: Context, state: RoundState, records: list[NodeRecord], view: ClusterView, now: float) -> bool:
    """Ask for a check of `records`: True if HyperPod accepted it. A refusal of a single group's request
    settles its members (inconclusive, HyperPod's message as evidence); a wider one is only reported. (A refusal
    by IAM never gets here: the adapter raises it, and the round fails.)"""
    configs = build_check_request(records, view.groups)
    try:
        ctx.hyperpod.start_health_check(state.cluster, configs)
    except CheckRefused as refused:
        groups = sorted({r.group for r in records})
        logger.warning(
            "check refused", extra={"round_id": state.round_id, "groups": groups, "refusal": str(refused)[:300]}
        )
        if len(groups) == 1:
            # HyperPod's words as evidence; asked again in a later round (a refusal can be a race with a check that
            # just ended) up to `max_inconclusive` times, then an operator decides. Never passed, never acted on.
            evidence = (f"StartClusterHealthCheck refused: {refused.code}: {refused.message}"[:500],)
            policy = view.groups[groups[0]].policy
            verdict = Verdict.INCONCLUSIVE
            node_recovery = view.info.node_recovery
            save_and_announce(
                ctx, [apply_verdict(r, verdict, evidence, policy, node_recovery, now, state.round_id) for r in records]
            )
        return False
    logger.info("check started", extra={"round_id": state.round_id, "configurations": configs})
    return True
