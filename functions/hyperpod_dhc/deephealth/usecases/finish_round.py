"""Finish round (and Abandon round): the round's last step on every exit path."""

from __future__ import annotations

from collections import Counter

from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound
from hyperpod_dhc.deephealth.domain.nodes import NodeState, transition
from hyperpod_dhc.deephealth.domain.rounds import RoundState, round_name
from hyperpod_dhc.deephealth.observability import MetricUnit, logger, metrics
from hyperpod_dhc.deephealth.usecases.context import Context
from hyperpod_dhc.deephealth.usecases.decisions import announce_round, save_and_announce


def finish_round(ctx: Context, state: RoundState) -> RoundState:
    """Release the lease on every exit path; hand unstarted nodes back; start the next round."""
    round_id = state.round_id or round_name(state.cluster, state.round_seq)
    now = ctx.clock()
    records = ctx.table.load_cluster(state.cluster)
    handed_back = save_and_announce(
        ctx,
        [
            transition(
                r,
                now,
                NodeState.PENDING,
                "round ended before the check started; back in the queue",
                round_id,
                round_id=None,
            )
            for r in records.values()
            if r.state == NodeState.CHECKING and r.round_id == round_id and r.check_started_at is None
        ],
    )
    released = ctx.table.release_lease(state.cluster, round_id)
    summary = Counter(
        r.state.value
        for r in records.values()
        if r.round_id == round_id or any(h.trigger == round_id for h in r.history[-3:])
    )
    logger.info(
        "round finished",
        extra={
            "round_id": round_id,
            "error": state.error,
            "released": released,
            "handed_back": len(handed_back),
            "summary": dict(summary),
        },
    )
    announce_round(ctx, round_id, state, records.values())
    if state.error:
        metrics.add_metric(name="RoundsFailed", unit=MetricUnit.Count, value=1)
    elif released:
        # A failed round leaves the restart to the reconciler, so a persistent fault cannot hot-loop; and a
        # round is chained only if it could change something now: held work waits for its due time, which
        # Reconcile sees (a budget of 0 or a full out-of-service cap must not chain rounds back to back).
        try:
            view = ctx.view(state.cluster)
        except ClusterNotFound:
            return state.model_copy(update={"done": True})
        progress = ctx.progress(view)
        logger.info("next round", extra={"round_id": round_id, "chained": progress is not None, "why": progress})
        if progress is not None:
            ctx.start_round(state.cluster)
    return state.model_copy(update={"done": True})
