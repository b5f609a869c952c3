"""Note what a look saw the cluster do (domain/readings.py): its result lines (stream naming, shapes, lag), the
statuses of nodes that failed their check, nodes that came back with nothing said, a check operation that stays
open too long; and say once what an operator should know of it: a line shape never seen before, a cluster that
logs no pass line, a stuck operation."""

from __future__ import annotations

from collections.abc import Iterable

from deephealth.adapters.hyperpod import ActiveCheck
from deephealth.domain.errors import StaleRecord
from deephealth.domain.nodes import Decision, NodeRecord, NodeState, Verdict
from deephealth.domain.readings import NO_PASS_LINES, ClusterReadings, SeenLine
from deephealth.domain.results import ResultLog
from deephealth.domain.rounds import check_overdue
from deephealth.domain.verdicts import window_end
from deephealth.observability import logger
from deephealth.usecases.context import ClusterView, Context
from deephealth.usecases.decisions import notify

NEW_SHAPE = "shape:"
OVERDUE = "operation:"


def note_look(
    ctx: Context,
    view: ClusterView,
    results: ResultLog | None,
    changes: Iterable[tuple[NodeRecord, Decision]],
    active: ActiveCheck | None,
    now: float,
) -> None:
    """Add what this look saw to the cluster's readings, and raise the alerts it calls for (once each)."""
    before = view.readings
    if before is None:
        return
    readings, new_shapes = before, list[str]()
    if results is not None:
        settle = min((g.settle_s for g in view.groups.values() if g.watched), default=0.0)
        lines = [
            SeenLine(line, results.index.stream_kind(line), owner, results.index.names_peer(line, owner))
            for line, owner in zip(results.lines, results.owners, strict=True)
        ]
        readings, new_shapes = readings.with_lines(lines, settle)
    failed, silent = _verdicts_seen(view, results, changes)
    readings = readings.with_counts(statuses_after_failure=failed, silent_nodes=silent)
    alerts = [f"{NEW_SHAPE}{shape}" for shape in new_shapes if f"{NEW_SHAPE}{shape}" not in readings.alerted]
    silence_refused = any(g.watched and not g.policy.pass_on_silence for g in view.groups.values())
    if readings.no_pass_lines() and NO_PASS_LINES not in readings.alerted and silence_refused:
        alerts.append(NO_PASS_LINES)  # said once, while some group would not pass such nodes
    overdue_key = f"{OVERDUE}{active.operation_id}" if active is not None else ""
    if active is not None and overdue_key not in readings.alerted and operation_overdue(view, active, now):
        alerts.append(overdue_key)
    readings = readings.with_counts(alerted=alerts)
    if readings == before:
        return
    try:
        view.readings = ctx.table.save_readings(readings)
    except StaleRecord:
        # Another look saved first; what this one saw is seen again by the next (the watermark did not move).
        logger.info("readings changed concurrently; not saved", extra={"cluster": view.info.name})
        return
    for what in alerts:
        _alert(ctx, view, readings, what, active, now)


def note_busy_error(ctx: Context, view: ClusterView, refusal: tuple[str, str]) -> None:
    """HyperPod refused a check saying a check is already active: its code and words, as the cluster answers."""
    if view.readings is None:
        return
    try:
        view.readings = ctx.table.save_readings(view.readings.with_counts(busy_error=refusal))
    except StaleRecord:
        logger.info("readings changed concurrently; busy error not noted", extra={"cluster": view.info.name})


def _verdicts_seen(
    view: ClusterView, results: ResultLog | None, changes: Iterable[tuple[NodeRecord, Decision]]
) -> tuple[list[str], int]:
    """The statuses of nodes that failed their check in this look, and how many came back with no line at all."""
    failed: list[str] = []
    silent = 0
    for record, decision in changes:
        was = view.records.get(record.key)
        if was is None or was.state != NodeState.CHECKING or decision.verdict is None:
            continue
        snapshot = view.snapshots.get(record.key)
        if decision.verdict == Verdict.FAILED and snapshot is not None:
            failed.append(snapshot.status)
        elif decision.verdict in (Verdict.SKIPPED, Verdict.PASSED) and results is not None and was.check_started_at:
            evidence = results.evidence(was.key, was.check_started_at, window_end(was))
            silent += was.seen_in_progress and evidence.silent
    return failed, silent


def operation_overdue(view: ClusterView, active: ActiveCheck, now: float) -> bool:
    """The check operation has been InProgress for longer than the longest check it can hold (any the groups'
    policies or a checking node asked for)."""
    types: set[str] = {t for g in view.groups.values() if g.watched for t in g.policy.checks}
    types |= {t for r in view.records.values() if r.state == NodeState.CHECKING for t in r.check_types or ()}
    return check_overdue(active.created_at, types, now)


def _alert(
    ctx: Context, view: ClusterView, readings: ClusterReadings, what: str, active: ActiveCheck | None, now: float
) -> None:
    cluster = view.info.name
    if what.startswith(NEW_SHAPE):
        shape = what.removeprefix(NEW_SHAPE)
        seen = readings.shapes.get(shape)
        notify(
            ctx,
            "reading-observed",
            cluster,
            "",
            f"hyperpod-dhc: {cluster} wrote a result line of a shape not seen before: {shape}",
            {
                "shape": shape,
                "example": seen.example if seen else "",
                "note": "a shape no pattern recognises is never a pass: the nodes it bears on are inconclusive",
                "readings": f"hpdhc readings {cluster}",
            },
        )
    elif what == NO_PASS_LINES:
        notify(
            ctx,
            "reading-observed",
            cluster,
            "",
            f"hyperpod-dhc: {cluster} logs no pass line for its deep health checks",
            {
                "silent_nodes": readings.silent_nodes,
                "note": (
                    "nodes come back Running from their check with no result line about them, and no pass line "
                    "was ever seen, so none is passed; the group policy pass_on_silence (opt-in) passes a node "
                    "seen in its check, Running again, with HyperPod's operation Done and no line about it "
                    "through revisit_s"
                ),
            },
        )
    elif what.startswith(OVERDUE) and active is not None:
        notify(
            ctx,
            "check-overdue",
            cluster,
            "",
            f"hyperpod-dhc: a deep health check on {cluster} has been in progress too long",
            {
                "operation_id": active.operation_id,
                "in_progress_s": int(now - (active.created_at or now)),
                "note": (
                    "no new check can start on the cluster while it runs; a node isolated after failing it may "
                    "be holding it (its result lines are read once it is overdue, and a failure line fails it)"
                ),
            },
        )
