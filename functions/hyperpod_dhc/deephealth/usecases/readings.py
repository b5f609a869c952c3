"""Note what a look saw the cluster do (domain/readings.py): its result records (stream naming, shapes, lateness,
streams that are no node's), the statuses of nodes that failed their check, nodes that came back with nothing
said, verdicts an unrecognised shape made inconclusive, a check operation that stays open too long; and say once
what an operator should know of it: a record shape no rule places, a stream that is no node's, one shape costing a
share of the cluster's verdicts, a cluster that logs no pass line, a stuck operation."""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from hyperpod_dhc.deephealth.adapters.hyperpod import ActiveCheck
from hyperpod_dhc.deephealth.domain.errors import StaleRecord
from hyperpod_dhc.deephealth.domain.nodes import Decision, NodeRecord, NodeState, Verdict
from hyperpod_dhc.deephealth.domain.readings import NO_PASS_LINES, ClusterReadings, SeenRecord
from hyperpod_dhc.deephealth.domain.result_log import ResultLog
from hyperpod_dhc.deephealth.domain.rounds import check_overdue
from hyperpod_dhc.deephealth.evidence.attribute import Ownership
from hyperpod_dhc.deephealth.evidence.rules import HOSTNAME, INSTANCE_ID, Kind
from hyperpod_dhc.deephealth.observability import logger
from hyperpod_dhc.deephealth.usecases.context import ClusterView, Context
from hyperpod_dhc.deephealth.usecases.decisions import notify

NEW_SHAPE = "shape:"
OVERDUE = "operation:"
FOREIGN = "foreign:"
COSTLY = "inconclusive:"


def note_look(
    ctx: Context,
    view: ClusterView,
    results: ResultLog | None,
    changes: Iterable[tuple[NodeRecord, Decision]],
    active: ActiveCheck | None,
    now: float,
) -> None:
    """Add what this look saw to the cluster's readings, and raise the alerts it calls for (once each)."""
    changes = list(changes)
    before = view.readings
    if before is None:
        return
    readings, new_shapes, new_foreign = before, list[str](), list[str]()
    examples: dict[str, str] = {}  # shape -> a node that wrote it
    if results is not None and results.read_whole:
        settle = min((g.settle_s for g in view.groups.values() if g.watched), default=0.0)
        left = {r.key: r.check_left_at for r, _ in changes}
        readings, new_shapes, new_foreign = readings.with_records(_seen(view, results, left), settle, now)
        examples = {f.shape: owner for f, owner in results.owned() if f.kind == Kind.UNRECOGNISED}
    failed, silent, verdicts, costly = _verdicts_seen(view, results, changes)
    shapes = [shape for shape, _ in costly]
    readings = readings.with_counts(failed, silent, verdicts=verdicts, inconclusive_shapes=shapes)
    examples.update({shape: node for shape, node in costly})
    alerts = [f"{NEW_SHAPE}{shape}" for shape in new_shapes if " unrecognised" in shape]
    alerts += [f"{FOREIGN}{stream}" for stream in new_foreign]
    alerts += [f"{COSTLY}{shape}" for shape in readings.costly_shapes()]
    alerts = [a for a in alerts if a not in readings.alerted]
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
        _alert(ctx, view, readings, what, active, examples, now)


def note_busy_error(ctx: Context, view: ClusterView, refusal: tuple[str, str]) -> None:
    """HyperPod refused a check saying a check is already active: its code and words, as the cluster answers."""
    if view.readings is None:
        return
    try:
        view.readings = ctx.table.save_readings(view.readings.with_counts(busy_error=refusal))
    except StaleRecord:
        logger.info("readings changed concurrently; busy error not noted", extra={"cluster": view.info.name})


def stream_kind(stream: str, how: Ownership) -> str:
    """How a result stream is named (domain/readings.STREAM_KINDS)."""
    if how == Ownership.OWN:
        return "instance-id" if INSTANCE_ID.search(stream) else "hostname" if HOSTNAME.search(stream) else "logical-id"
    return "unknown-host" if INSTANCE_ID.search(stream) or HOSTNAME.search(stream) else "opaque"


def _seen(view: ClusterView, results: ResultLog, left_now: dict[str, float | None]) -> list[SeenRecord]:
    """The look's records with when their node left its check, as this look leaves it (`left_now`, by record key):
    a node seen leaving in the same look as its records still gives its lateness samples, which are taken once."""
    everyone = view.names() or {}
    seen = []
    for finding, how, owner in results.unfiltered():
        record = everyone.get(owner) if owner is not None and how == Ownership.OWN else None
        left = None if record is None else left_now.get(record.key, record.check_left_at)
        seen.append(SeenRecord(finding, stream_kind(finding.record.stream, how), how == Ownership.FOREIGN, left))
    return seen


def _verdicts_seen(
    view: ClusterView, results: ResultLog | None, changes: Iterable[tuple[NodeRecord, Decision]]
) -> tuple[list[str], int, int, list[tuple[str, str]]]:
    """The statuses of nodes that failed their check in this look, how many came back with nothing of their own,
    how many check verdicts were made, and the unrecognised shape of each inconclusive one (with the node)."""
    failed: list[str] = []
    silent = verdicts = 0
    costly: list[tuple[str, str]] = []
    for record, decision in changes:
        was = view.records.get(record.key)
        if was is None or was.state != NodeState.CHECKING or decision.verdict is None:
            continue
        verdicts += 1
        snapshot = view.snapshots.get(record.key)
        evidence = results.evidence(was) if results is not None and was.check_started_at else None
        if decision.verdict == Verdict.FAILED and snapshot is not None:
            failed.append(snapshot.status)
        elif decision.verdict in (Verdict.SKIPPED, Verdict.PASSED) and evidence is not None:
            silent += was.seen_in_progress and evidence.silent
        elif decision.verdict == Verdict.INCONCLUSIVE and evidence is not None and evidence.unrecognised:
            costly.append((evidence.unrecognised[0].shape, record.key))
    return failed, silent, verdicts, costly


def operation_overdue(view: ClusterView, active: ActiveCheck, now: float) -> bool:
    """The check operation has been InProgress for longer than the longest check it can hold (any the groups'
    policies or a checking node asked for)."""
    types: set[str] = {t for g in view.groups.values() if g.watched for t in g.policy.checks}
    types |= {t for r in view.records.values() if r.state == NodeState.CHECKING for t in r.check_types or ()}
    return check_overdue(active.created_at, types, now)


def teach(cluster: str, node: str | None) -> list[str]:
    """The commands that teach the controller a record: capture a node's check, classify it with a pattern."""
    c = shlex.quote(cluster)
    if node is None:
        return [f"hpdhc readings show {c}"]
    return [
        f"hpdhc readings capture {c} {shlex.quote(node)} --out check.json",
        "hpdhc readings classify check.json --policy patterns.json --json",
        f"hpdhc readings show {c}",
    ]


def _alert(
    ctx: Context,
    view: ClusterView,
    readings: ClusterReadings,
    what: str,
    active: ActiveCheck | None,
    examples: dict[str, str],
    now: float,
) -> None:
    cluster = view.info.name
    detail: dict[str, Any]
    if what.startswith(NEW_SHAPE):
        shape = what.removeprefix(NEW_SHAPE)
        seen = readings.shapes.get(shape)
        subject = f"hyperpod-dhc: {cluster} wrote a result record no rule places: {shape}"
        detail = {
            "shape": shape,
            "example": seen.example if seen else "",
            "note": (
                "a record no rule places is never a pass: the node it is about is inconclusive; teach the controller "
                "the line with a result_patterns policy key (docs/OPERATIONS.md), no release needed"
            ),
            "commands": teach(cluster, examples.get(shape)),
        }
    elif what.startswith(FOREIGN):
        stream = what.removeprefix(FOREIGN)
        seen = readings.foreign_streams.get(stream)
        subject = f"hyperpod-dhc: {cluster} has a result stream that is no node's"
        detail = {
            "foreign_stream": stream,
            "example": seen.example if seen else "",
            "note": (
                "records on a stream that names no node of the cluster (or two) never pass or fail a node; a failure "
                "there costs the nodes whose window it falls in one re-check. Who can write to the log group: "
                "docs/SECURITY.md"
            ),
        }
    elif what.startswith(COSTLY):
        shape = what.removeprefix(COSTLY)
        seen = readings.shapes.get(shape)
        count = readings.inconclusive_by_shape.get(shape, 0)
        subject = f"hyperpod-dhc: one unrecognised record made {count} verdicts on {cluster} inconclusive"
        detail = {
            "shape": shape,
            "inconclusive": count,
            "verdicts": readings.verdicts,
            "example": seen.example if seen else "",
            "note": (
                "inconclusive keeps only new nodes of isolating groups out of service; teach the controller this "
                "line (capture, classify with a pattern, add it under result_patterns, make deploy)"
            ),
            "commands": teach(cluster, examples.get(shape)),
        }
    elif what == NO_PASS_LINES:
        subject = f"hyperpod-dhc: {cluster} logs no pass line for its deep health checks"
        detail = {
            "silent_nodes": readings.silent_nodes,
            "note": (
                "nodes come back Running from their check with no result line about them, and no pass line "
                "was ever seen, so none is passed; the group policy pass_on_silence (opt-in) passes a node "
                "seen in its check, Running again, with HyperPod's operation Done and no line about it "
                "through revisit_s"
            ),
        }
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
                    "no new check can start on the cluster while it runs; a node isolated after failing it is "
                    "failed by status once its check times out, and its recovery ends the operation"
                ),
            },
        )
        return
    else:
        return
    notify(ctx, "reading-observed", cluster, "", subject, detail)
