"""One pass of the Slurm bridge (`hpdhc bridge`, hyperpod_dhc.hpdhc.bridge runs it every interval): read the
controller's desired state (hyperpod_dhc.hpdhc.document), read Slurm's, apply the difference (hyperpod_dhc.hpdhc.apply),
report occupancy and claims. `sync_once` takes any `Controller` and `Slurm`, so the digital twin runs the same logic
without subprocesses.

A document older than the last applied (`generation`) is not applied. When the controller is unreachable, the last
applied document (`Memory`) still drains new nodes of isolating partitions; nothing is resumed without a fresh answer.

The drain is the label an admin sees; the lock is what keeps jobs off (hyperpod_dhc.hpdhc.lock): the reservation
`hpdhc-<cluster>` holds every node the controller has not passed, and no `RESUME` lifts it. A pass writes the lock
once, before the labels: a node is locked, then drained; unlocked, then resumed. Only a bridge holding the cluster's
fence (`Document.holder`) with a fresh document releases a node; any other pass only adds to the lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

from hyperpod_dhc.hpdhc.apply import apply, plan, write_lock
from hyperpod_dhc.hpdhc.client import ApiError, Json, OperatorClient
from hyperpod_dhc.hpdhc.document import Document, Memory, read_document, still_holds
from hyperpod_dhc.hpdhc.lock import plan_lock
from hyperpod_dhc.hpdhc.outcome import EXIT_API, EXIT_AUTH, EXIT_SLURM, SyncResult
from hyperpod_dhc.hpdhc.scontrol import Slurm, SlurmError, SlurmNode, lock_name

log = logging.getLogger("hpdhc.bridge")


# ---------------------------------------------------------------------- the controller


class Controller(Protocol):
    """What the bridge needs of the controller: the desired state document (every page), and who hears occupancy.
    `since` (a document's `cursor()`): the controller may answer `unchanged` instead. `status`: what the bridge says
    of itself with every page (`Memory.status`), so the controller decides who holds the fence and sees from
    Slurm's side whether the bridge applies what it must."""

    def desired(
        self, cluster: str, since: tuple[float, str] | None = None, status: Mapping[str, str] | None = None
    ) -> Json: ...

    def report(self, cluster: str, nodes: list[Json]) -> Json: ...


class ApiController(Controller):
    """The controller's REST API, SigV4-signed with the instance role's credentials."""

    def __init__(self, client: OperatorClient) -> None:
        self.client = client

    def desired(
        self, cluster: str, since: tuple[float, str] | None = None, status: Mapping[str, str] | None = None
    ) -> Json:
        return self.client.slurm_state(cluster, since, status)

    def report(self, cluster: str, nodes: list[Json]) -> Json:
        return self.client.report_occupancy(cluster, nodes)


# ---------------------------------------------------------------------- one pass


def sync_once(
    cluster: str,
    controller: Controller,
    slurm: Slurm,
    partitions_to_groups: Mapping[str, str],
    memory: Memory | None = None,
    dry_run: bool = False,
    marked: frozenset[str] = frozenset(),
) -> SyncResult:
    """Read the desired state, apply the difference, report occupancy and claims. `marked`: nodes the boot gate
    could not lock (their markers), locked here unless the controller says otherwise. Slurm is only touched once Slurm's
    own state was read and either the controller answered a whole, well-formed document, or (controller down)
    the last applied one says which new nodes to drain and lock."""
    memory = memory if memory is not None else Memory()
    result = SyncResult()
    lock = lock_name(cluster)
    document = _read_desired(cluster, controller, memory, result, dry_run)
    try:
        actual = slurm.nodes(lock=lock)
        current = slurm.lock(lock)
    except SlurmError as err:
        result.failure = result.failure or EXIT_SLURM
        result.errors.append(str(err))
        log.error("%s; nothing changed in Slurm", err)
        _remember(memory, result, None, dry_run)
        return result

    fresh = document is not None
    document = document or memory.document
    if document is None:
        log.error("no document from the controller and none kept: nothing changed in Slurm")
        _remember(memory, result, None, dry_run)
        return result
    if fresh and document.fence < memory.fence:
        result.errors.append(f"controller: fence {document.fence} is below the {memory.fence} seen: only adds")
        log.warning("%s", result.errors[-1])
    may_release = fresh and document.holder and document.fence >= memory.fence
    if fresh and not document.holder:
        log.warning("another bridge holds the fence of %s: this one only adds to the lock", cluster)
    result.lock = plan_lock(document, actual, partitions_to_groups, memory.locked, memory.released, may_release, marked)
    for name in sorted(result.lock.newly_released):
        log.warning("%s: released from %s by hand; left alone until its desired state changes", name, lock)
    if current is None and memory.locked:
        result.errors.append(f"reservation {lock} is gone: every node it held is treated as released by hand")
        log.error("%s", result.errors[-1])
    locked = write_lock(slurm, lock, result.lock, current, result, dry_run)
    if locked is not None and not dry_run:  # the lock as this bridge leaves it: what a release by hand is told from
        memory.locked = result.lock.nodes if locked else (current.nodes if current else frozenset())
    if locked is None:
        _remember(memory, result, None, dry_run)
        return result
    labels = plan(document, actual, partitions_to_groups, may_release and locked, result)
    apply(labels, slurm, lock, result, dry_run)
    _remember(memory, result, document if fresh else None, dry_run)
    if not fresh or dry_run:
        return result
    _report(cluster, controller, document, actual, memory, result)
    return result


def _read_desired(
    cluster: str, controller: Controller, memory: Memory, result: SyncResult, dry_run: bool
) -> Document | None:
    """The controller's fresh document, or None (unreachable, refused, malformed, or older than the one applied)."""
    try:
        cursor = memory.document.cursor() if memory.document is not None and not dry_run else None
        answer = controller.desired(cluster, since=cursor, status=memory.status())
        document = still_holds(cluster, answer, memory.document) or read_document(cluster, answer, result.errors)
        result.interval_s = document.interval_s if document else None
    except Exception as err:  # whatever failed (network, HTTP, JSON, shape): no fresh answer
        result.failure = (
            EXIT_AUTH if (isinstance(err, ApiError) and err.status in (401, 403)) or _no_credentials(err) else EXIT_API
        )
        result.errors.append(f"controller: {err}")
        log.error("controller: %s", err)
        document = None
    for error in result.errors[1 if document is None else 0 :]:
        log.warning("%s", error)
    if document is not None and memory.document is not None and document.generation < memory.document.generation:
        result.stale = True
        result.errors.append(
            f"controller: document generation {document.generation} is older than the one applied "
            f"({memory.document.generation}): not applied"
        )
        log.warning("%s", result.errors[-1])
        return None
    return document


def _report(
    cluster: str,
    controller: Controller,
    document: Document,
    actual: Mapping[str, SlurmNode],
    memory: Memory,
    result: SyncResult,
) -> None:
    """Occupancy matters to a node waiting for its check; a claim, when it changes. Nothing else is reported, so an
    idle cluster's pass reports nothing (the first pass of a run reports every node once)."""
    occupancy, held = [], {}
    for name in sorted(document.wanted):
        key = document.keys.get(name)
        if name not in actual or key is None:
            continue  # not in Slurm, or no record of its own (an ambiguous name): nothing to report it on
        held[name] = result.held.get(name)
        if memory.held is None or name in document.pending or memory.held.get(name) != held[name]:
            entry: Json = {"node": name, "busy": actual[name].busy} | ({"key": key} if key else {})
            if held[name] is not None:
                entry["held"] = held[name]
            occupancy.append(entry)
    try:
        if occupancy:
            controller.report(cluster, occupancy)
            result.reported = occupancy
        memory.held = held
    except Exception as err:  # Slurm is already right; the controller hears about occupancy next time
        result.errors.append(f"occupancy report: {err}")
        log.warning("occupancy report: %s", err)


def _remember(memory: Memory, result: SyncResult, document: Document | None, dry_run: bool) -> None:
    """What the next pull tells the controller of this pass (`Memory.status`), and the document and lock kept."""
    if dry_run:
        return
    unreachable = result.failure == EXIT_SLURM
    memory.slurmctld = "unreachable" if unreachable else "refused" if result.refused and not result.writes else "ok"
    memory.errors = len(result.errors)
    if result.lock is not None and not unreachable and not result.refused:
        memory.synced_at = time.time()  # every change due was applied (or none was due)
    if result.lock is not None:
        memory.released = dict(result.lock.released)
    memory.keep(document)


def _no_credentials(err: Exception) -> bool:
    return isinstance(err, ApiError) and err.status == 0 and "credentials" in str(err)
