"""Claim round: the round workflow's first step. Take the cluster's lease, observe the cluster afresh, and
claim the nodes this round checks (dry-run groups record the check they would get)."""

from __future__ import annotations

from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound
from hyperpod_dhc.deephealth.domain.listing_windows import listing_windows
from hyperpod_dhc.deephealth.domain.nodes import (
    JOB_WON,
    NodeRecord,
    NodeState,
    revalidating,
    revalidation_queued_at,
    transition,
)
from hyperpod_dhc.deephealth.domain.round_admission import admit_to_round
from hyperpod_dhc.deephealth.domain.rounds import (
    LEASE_TTL_S,
    RoundState,
    claimable,
    gather_delay,
    round_name,
    select_for_round,
    settling_elsewhere,
    split_dry_run,
    wake_for,
)
from hyperpod_dhc.deephealth.domain.slurm import (
    BUSY_FRESH_S,
    deferred_too_long,
    job_wait,
    revalidation_idle,
    waits_for_job,
)
from hyperpod_dhc.deephealth.observability import MetricUnit, logger, metrics
from hyperpod_dhc.deephealth.usecases.context import ClusterView, Context
from hyperpod_dhc.deephealth.usecases.decisions import notify, save_and_announce
from hyperpod_dhc.deephealth.usecases.observe_cluster import close_cluster, observe_cluster, watch_on_start_checks


def claim_round(ctx: Context, state: RoundState) -> RoundState:
    round_id = round_name(state.cluster, state.round_seq)
    state = state.model_copy(update={"round_id": round_id, "gather_s": 0, "windows": None})
    now = ctx.clock()
    if not ctx.table.acquire_lease(state.cluster, state.round_seq, round_id, now, LEASE_TTL_S):
        logger.info("round not started: lease held or round superseded", extra={"round_id": round_id})
        return state.model_copy(update={"claimed": 0, "recovery_due": 0})
    try:
        # Fresh: arrivals whose events were lost, and nodes earlier rounds claimed but never started.
        view = observe_cluster(ctx, state.cluster, round_id, orphaned_before=state.round_seq, by_round=True)
    except ClusterNotFound:
        close_cluster(ctx, state.cluster, "cluster not found", round_id)
        return state.model_copy(update={"claimed": 0, "recovery_due": 0})
    state = state.model_copy(update={"observed_at": now})
    candidates = claimable(view.records.values(), view.groups)
    # Revalidation never touches a job: a node queued for it is claimed only on the bridge's idle report since it
    # was queued; one a job reached first goes back in service (tried again later), one without a report waits.
    released, unreported = release_revalidations(ctx, [r for r in candidates if revalidating(r)], round_id, now)
    candidates = [r for r in candidates if r.key not in released and r.key not in unreported]
    # Busy with a Slurm job (the bridge says so): HyperPod would queue the check behind the job and skip the node
    # after 10 min. It stays pending; the bridge's report that it is idle starts a round (usecases/slurm_bridge).
    bound = {name: g.policy.job_defer_max_s for name, g in view.groups.items()}
    waiting = [r for r in candidates if waits_for_job(r, now, bound.get(r.group))] + list(unreported.values())
    candidates = [r for r in candidates if not waits_for_job(r, now, bound.get(r.group))]
    # Nodes an earlier round left settling: this round's looks judge them when their lines are due.
    judge_at = settling_elsewhere(view.records.values(), view.groups, round_id, now)
    state = state.model_copy(update={"judge_at": judge_at})
    if (delay := gather_delay(candidates, view.groups, now)) > 0:  # again after each wait: bounded by the window
        # This step's look judges them: wake for them.
        return state.model_copy(update={"gather_s": wake_for(delay, judge_at, now), "gathered": True})
    shadow, live = split_dry_run(candidates, view.groups)
    shadow_checks(ctx, shadow, view, round_id, now)
    chosen = select_for_round(admit_to_round(live, view.records.values(), view.groups), ctx.config().max_round_nodes)
    claimed = save_and_announce(
        ctx,
        [
            transition(
                r,
                now,
                NodeState.CHECKING,
                "claimed for a check round",
                round_id,
                round_id=round_id,
                check_started_at=None,
                check_left_at=None,
                seen_in_progress=False,
                observe_only=False,
            )
            for r in chosen
        ],
    )
    announce_deferrals(ctx, view, [r for r in claimed if deferred_too_long(r, now, bound.get(r.group))], now)
    claimed += watch_on_start_checks(ctx, view, round_id, state.round_seq)
    due = ctx.due(view)
    logger.info(
        "round claimed",
        extra={
            "round_id": round_id,
            "claimed": len(claimed),
            "recovery_due": len(due),
            "waiting_for_jobs": len(waiting),
        },
    )
    metrics.add_metric(name="NodesClaimed", unit=MetricUnit.Count, value=len(claimed))
    metrics.add_metric(name="NodesWaitingForJobs", unit=MetricUnit.Count, value=len(waiting))
    if waiting and not claimed and not due and not state.gathered:
        # Nothing to do but wait for jobs: wait here once before the round ends, or Finish round, which still
        # counts these nodes as waiting, would chain the next round at once, and that one the next.
        wait = job_wait(waiting, now)
        return state.model_copy(update={"gather_s": wait, "claimed": 0, "recovery_due": 0, "gathered": True})
    # Where the members are, in the fewest pages: Start check lists only these while this look is fresh.
    windows = listing_windows((view.snapshots.get(r.key) for r in claimed), view.snapshots.values())
    return state.model_copy(
        update={"claimed": len(claimed), "recovery_due": len(due), "gathered": True, "windows": windows}
    )


def release_revalidations(
    ctx: Context, records: list[NodeRecord], round_id: str, now: float
) -> tuple[set[str], dict[str, NodeRecord]]:
    """Of the nodes queued for revalidation: those a job reached before their check began go back to passed (their
    verdict, and so their place in the revalidation order, unchanged), as do those the bridge never reported within
    BUSY_FRESH_S of their queueing; returns (the keys released, the nodes still waiting for a first report)."""
    releases, unreported = [], {}
    for r in records:
        idle = revalidation_idle(r, now)
        queued_at = revalidation_queued_at(r) or now
        if idle is False:
            releases.append(transition(r, now, NodeState.PASSED, JOB_WON, round_id, ready_at=None))
        elif idle is None and now - queued_at > BUSY_FRESH_S:
            why = "revalidation deferred: no report from the Slurm bridge"
            releases.append(transition(r, now, NodeState.PASSED, why, round_id, ready_at=None))
        elif idle is None:
            unreported[r.key] = r
    saved = save_and_announce(ctx, releases)
    if saved:
        logger.info("revalidation released", extra={"round_id": round_id, "nodes": [r.key for r in saved][:50]})
    return {r.key for r, _ in releases}, unreported


def announce_deferrals(ctx: Context, view: ClusterView, records: list[NodeRecord], now: float) -> None:
    """Nodes claimed although the bridge still reports a job on them: it deferred their check past the group's
    job_defer_max_s (HyperPod may skip a busy node; the verdict says so). Said once, when they are claimed."""
    by_group: dict[str, list[NodeRecord]] = {}
    for r in records:
        by_group.setdefault(r.group, []).append(r)
    for group, members in sorted(by_group.items()):
        bound = view.groups[group].policy.job_defer_max_s
        notify(
            ctx,
            "job-deferral",
            view.info.name,
            group,
            f"hyperpod-dhc: {len(members)} node(s) of {group} busy with jobs for over {bound} s: checked anyway",
            {
                "nodes": [r.key for r in members][:50],
                "busy_for_s": {r.key: round(now - (r.slurm_busy_since or now)) for r in members[:50]},
                "job_defer_max_s": bound,
            },
        )


def shadow_checks(ctx: Context, records: list[NodeRecord], view: ClusterView, round_id: str, now: float) -> None:
    """Dry-run groups: record the check this round would have started, and start none."""
    by_group: dict[str, list[NodeRecord]] = {}
    for r in records:
        by_group.setdefault(r.group, []).append(r)
    for group, members in sorted(by_group.items()):
        checks = ", ".join(view.groups[group].policy.checks)
        saved = save_and_announce(
            ctx,
            (
                transition(r, now, NodeState.SHADOWED, f"dry-run: would start a deep health check ({checks})", round_id)
                for r in members
            ),
        )
        if saved:
            notify(
                ctx,
                "dry-run",
                view.info.name,
                group,
                f"hyperpod-dhc: dry-run would check {len(saved)} node(s) of {group}",
                {"round_id": round_id, "checks": checks, "nodes": [r.key for r in saved]},
            )
