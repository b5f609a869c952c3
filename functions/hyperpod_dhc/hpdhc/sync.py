"""One pass of the Slurm bridge (`hpdhc bridge`, hyperpod_dhc.hpdhc.bridge runs it every interval): read the
controller's desired state (hyperpod_dhc.hpdhc.document), read Slurm's, apply the difference, report occupancy and
claims. Pure rules (`changes`, `unlisted_node_changes`) and `sync_once`, which takes any `Controller` and `Slurm`, so
the digital twin runs the same logic without subprocesses.

It changes a node only when nothing and nobody else has a claim on it (`hyperpod_dhc.hpdhc.scontrol.SlurmNode.claim`:
every state word one of use, any reason ours). An admin's DOWN or DRAIN, HyperPod's `FAIL Action:Reboot`, Slurm's `Not
responding`: the node is left exactly as it is, and the controller hears "held: <claim>". A Slurm node the controller
does not list is drained (`hpdhc:wait`) only when the document says the cluster is fully recorded (`complete`) and the
node's partition belongs to an isolating group; a document older than the last applied (`generation`) is not applied.
When the controller is unreachable, the last applied document (`Memory`) still drains new nodes of isolating partitions;
nothing is resumed without a fresh answer.

The drain is the label an admin sees; the lock is what keeps jobs off (hyperpod_dhc.hpdhc.lock): the reservation
`hpdhc-<cluster>` holds every node the controller has not passed, and no `RESUME` lifts it. A pass writes the lock
once, before the labels: a node is locked, then drained; unlocked, then resumed. Only a bridge holding the cluster's
fence (`Document.holder`) with a fresh document releases a node; any other pass only adds to the lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from hyperpod_dhc.hpdhc.client import ApiError, Json, OperatorClient
from hyperpod_dhc.hpdhc.document import (
    FEATURE_KEY,
    FEATURES,
    Desired,
    Document,
    Memory,
    isolating,
    read_document,
    still_holds,
)
from hyperpod_dhc.hpdhc.lock import AWAITING, LockPlan, plan_lock
from hyperpod_dhc.hpdhc.scontrol import (
    LOCK_RENEW_S,
    UPDATE_BATCH,
    Lock,
    Slurm,
    SlurmError,
    SlurmNode,
    SlurmUnreachable,
    hostlist,
    lock_name,
)

HELD_MAX = 200  # characters of a foreign claim reported back to the controller

# What stopped a pass, as the agent's exit code (an admin, or systemd's RestartPreventExitStatus, tells them apart).
EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_AUTH, EXIT_API, EXIT_SLURM, EXIT_CONFIG, EXIT_LOCKED = range(8)

log = logging.getLogger("hpdhc.bridge")


# ---------------------------------------------------------------------- desired vs actual (pure)


def changes(desired: Desired, actual: SlurmNode) -> list[str]:
    """`scontrol update` arguments (after `NodeName=`) that take `actual` to `desired`; [] when it is there or when
    someone else has a claim on the node (then nothing of it is ours to change, features included).

    Features follow the awsome-distributed-training health_check sample: AvailableFeatures hold the node's other
    features and all four `HealthCheck:*` values, ActiveFeatures its others and the current one."""
    if actual.claim is not None:
        return []
    out: list[str] = []
    if desired.reason is not None:
        if not actual.drained or actual.reason != desired.reason:
            out += ["State=DRAIN", f"Reason={desired.reason}"]
    elif actual.drained:  # ours: a foreign drain is a claim
        out.append("State=RESUME")
    available = actual.features if actual.available is None else actual.available
    others = tuple(f for f in available if not f.startswith(FEATURE_KEY + ":"))
    listed = (*others, *FEATURES)
    active = (*(f for f in actual.features if not f.startswith(FEATURE_KEY + ":")), desired.feature)
    # Both in one update: Slurm refuses ActiveFeatures that are not a subset of AvailableFeatures at any moment.
    if set(active) != set(actual.features) or set(listed) != set(available):
        out += [f"AvailableFeatures={','.join(listed)}", f"ActiveFeatures={','.join(active)}"]
    return out


def unlisted_node_changes(node: SlurmNode, isolating: bool | None, complete: bool) -> list[str]:
    """The change for a Slurm node the controller does not list. Only a document that covers the whole cluster
    says such a node is new: then it is drained when its group isolates (`isolating` True), and our own drain on
    it is lifted when its group does not (False). An unknown group (None), a partial document or a claim: []."""
    if not complete or isolating is None or node.claim is not None:
        return []
    if isolating and not node.drained:
        return ["State=DRAIN", f"Reason={AWAITING}"]
    if not isolating and node.drained:  # ours (a foreign drain is a claim): an opted-out group's new node
        return ["State=RESUME"]
    return []


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


@dataclass
class SyncResult:
    """What one pass did (or, dry, would do): the updates (a tuple of nodes -> arguments), the occupancy
    reported, the nodes held by someone else's claim, and what went wrong (`failure`: the kind that stopped it)."""

    applied: dict[str, list[str]] = field(default_factory=dict)  # node -> arguments
    commands: list[list[str]] = field(default_factory=list)  # each `scontrol` write run (or, dry, to run)
    reported: list[Json] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    failure: int = EXIT_OK  # EXIT_AUTH, EXIT_API, EXIT_SLURM when the pass could not be made
    interval_s: float | None = None  # the controller's suggested sync_interval_s
    stale: bool = False  # the controller's answer was older than the document applied last: not applied
    lock: LockPlan | None = None  # the lock as this pass planned it
    writes: int = 0  # scontrol writes slurmctld took
    refused: int = 0  # scontrol writes slurmctld refused


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
    locked = _write_lock(slurm, lock, result.lock, current, result, dry_run)
    if locked is not None and not dry_run:  # the lock as this bridge leaves it: what a release by hand is told from
        memory.locked = result.lock.nodes if locked else (current.nodes if current else frozenset())
    if locked is None:
        _remember(memory, result, None, dry_run)
        return result
    plan = _plan(document, actual, partitions_to_groups, may_release and locked, result)
    _apply(plan, slurm, lock, result, dry_run)
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


def _write_lock(
    slurm: Slurm, lock: str, plan: LockPlan, current: Lock | None, result: SyncResult, dry_run: bool
) -> bool | None:
    """The pass's one write of the lock's node list, when it changes or Slurm would end it within LOCK_RENEW_S (the
    write renews it). True: the lock is as planned; False: refused (the labels are still applied, but nothing is
    resumed); None: slurmctld unreachable (the pass stops)."""
    ending = current is not None and current.ends_at is not None and current.ends_at - time.time() < LOCK_RENEW_S
    if not plan.changed and not (ending and plan.nodes):
        return True
    nodes = sorted(plan.nodes)
    command = (
        ["scontrol", "update", f"ReservationName={lock}", "Nodes=" + hostlist(nodes)]
        if nodes
        else ["scontrol", "delete", f"ReservationName={lock}"]  # Slurm refuses a reservation of no node
    )
    if dry_run:
        result.commands.append(command)
        return True
    try:
        slurm.set_lock(lock, nodes, current)
    except SlurmUnreachable as err:
        _stop(result, err)
        return None
    except SlurmError as err:
        result.refused += 1
        result.errors.append(f"{err}: the lock is unchanged, nothing is resumed")
        log.error("%s", result.errors[-1])
        return False
    result.writes += 1
    result.commands.append(command)
    if plan.added:
        log.info("locked in %s: %s", lock, ",".join(sorted(plan.added)))
    if plan.removed:
        log.info("released from %s: %s", lock, ",".join(sorted(plan.removed)))
    return True


def _plan(
    document: Document,
    actual: Mapping[str, SlurmNode],
    partitions_to_groups: Mapping[str, str],
    may_release: bool,
    result: SyncResult,
) -> dict[str, list[str]]:
    """node -> the arguments of its update. Unless the pass may release, only drains are planned. A node released
    from the lock by hand keeps whatever label it has: it is reported held."""
    released = result.lock.released if result.lock is not None else {}
    plan: dict[str, list[str]] = {}
    for name, node in sorted(actual.items()):
        if name in released:
            result.held[name] = "released from the controller's lock by hand"
            continue
        if name in document.wanted:
            desired = document.wanted[name]
            if node.claim is not None:
                result.held[name] = _printable(node.claim)[:HELD_MAX]
            if desired is not None:
                args = changes(desired, node)
                if may_release or args[:1] == ["State=DRAIN"]:
                    plan[name] = args
            continue
        args = unlisted_node_changes(
            node, isolating(node.partitions, partitions_to_groups, document.isolating_groups), document.complete
        )
        if may_release or args[:1] == ["State=DRAIN"]:  # a kept document drains new nodes, never resumes one
            plan[name] = args
    return {name: args for name, args in plan.items() if args}


def _apply(plan: Mapping[str, list[str]], slurm: Slurm, lock: str, result: SyncResult, dry_run: bool) -> None:
    """One `scontrol update` per distinct change and UPDATE_BATCH nodes; a refused batch is retried node by node
    (one node's refusal does not hold back the others); slurmctld unreachable stops the pass."""
    batches: dict[tuple[str, ...], list[str]] = {}
    for name, args in plan.items():
        batches.setdefault(tuple(args), []).append(name)
    for change, names in batches.items():
        for start in range(0, len(names), UPDATE_BATCH):
            part = names[start : start + UPDATE_BATCH]
            if "State=RESUME" in change and not dry_run:
                kept = _still_ours(slurm, part, lock, result)
                if kept is None:
                    return
                part = kept
            if part and not _update(slurm, part, list(change), result, dry_run):
                return


def _still_ours(slurm: Slurm, names: list[str], lock: str, result: SyncResult) -> list[str] | None:
    """The nodes of `names` that, read again right before their RESUME, are still drained by us alone: a drain,
    DOWN or FAIL someone placed since the pass read Slurm is theirs, and is kept (held, reported as such). None
    when slurmctld cannot be reached (the pass stops); [] when the read is refused: nothing is resumed."""
    try:
        now = slurm.nodes(names, lock=lock)
    except SlurmUnreachable as err:
        _stop(result, err)
        return None
    except SlurmError as err:
        result.errors.append(f"{err}: not resumed")
        log.warning("%s: not resumed", err)
        return []
    kept = []
    for name in names:
        node = now.get(name)
        if node is not None and node.claim is None and node.drained and not node.locked:
            kept.append(name)
        elif node is not None and node.claim is not None:
            result.held[name] = _printable(node.claim)[:HELD_MAX]
            log.info("%s: %s since this pass read Slurm; not resumed", name, result.held[name])
    return kept


def _stop(result: SyncResult, err: SlurmUnreachable) -> None:
    """slurmctld cannot be reached: the pass stops, and says so."""
    result.failure = result.failure or EXIT_SLURM
    result.errors.append(f"{err}: the pass stops here")
    log.error("%s: the pass stops here", err)


def _update(slurm: Slurm, names: list[str], args: list[str], result: SyncResult, dry_run: bool) -> bool:
    """False when slurmctld cannot be reached (the pass stops)."""
    command = ["scontrol", "update", "NodeName=" + ",".join(names), *args]
    if dry_run:
        result.commands.append(command)
        result.applied.update({n: args for n in names})
        return True
    try:
        slurm.update(names, args)
    except SlurmUnreachable as err:
        _stop(result, err)
        return False
    except SlurmError as err:
        if len(names) == 1:
            result.refused += 1
            result.errors.append(str(err))
            log.warning("%s", err)
            return True
        return all(_update(slurm, [n], args, result, dry_run) for n in names)
    result.writes += 1
    result.commands.append(command)
    result.applied.update({n: args for n in names})
    log.info("%s", " ".join(quoted(a) for a in command))
    return True


def quoted(arg: str) -> str:
    key, _, value = arg.partition("=")
    return f'{key}="{value}"' if " " in value else arg


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
