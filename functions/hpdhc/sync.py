"""One pass of the Slurm bridge (`hpdhc bridge`, hpdhc.bridge runs it every interval): read the controller's
desired state (hpdhc.document), read Slurm's, apply the difference, report occupancy and claims. Pure rules
(`changes`, `unlisted_node_changes`) and `sync_once`, which takes any `Controller` and `Slurm`, so the digital twin
runs the same logic without subprocesses.

It changes a node only when nothing and nobody else has a claim on it (`hpdhc.scontrol.SlurmNode.claim`: every
state word one of use, any reason ours). An admin's DOWN or DRAIN, HyperPod's `FAIL Action:Reboot`, Slurm's `Not
responding`: the node is left exactly as it is, and the controller hears "held: <claim>". A Slurm node the
controller does not list is drained (`hpdhc:wait`) only when the document says the cluster is fully recorded
(`complete`) and the node's partition belongs to an isolating group; a document older than the last applied
(`generation`) is not applied. When the controller is unreachable, the last applied document (`Memory`) still
drains new nodes of isolating partitions; nothing is resumed without a fresh answer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from hpdhc.client import ApiError, Json, OperatorClient
from hpdhc.document import FEATURE_KEY, FEATURES, Desired, Document, Memory, read_document, still_holds
from hpdhc.scontrol import OWNED_PREFIX, UPDATE_BATCH, Slurm, SlurmError, SlurmNode, SlurmUnreachable

AWAITING = OWNED_PREFIX + "wait not recorded by the controller yet"
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
    `since` (a document's `cursor()`): the controller may answer `unchanged` instead."""

    def desired(self, cluster: str, since: tuple[float, str] | None = None) -> Json: ...

    def report(self, cluster: str, nodes: list[Json]) -> Json: ...


class ApiController(Controller):
    """The controller's REST API, SigV4-signed with the instance role's credentials."""

    def __init__(self, client: OperatorClient) -> None:
        self.client = client

    def desired(self, cluster: str, since: tuple[float, str] | None = None) -> Json:
        return self.client.slurm_state(cluster, since)

    def report(self, cluster: str, nodes: list[Json]) -> Json:
        return self.client.report_occupancy(cluster, nodes)


# ---------------------------------------------------------------------- one pass


@dataclass
class SyncResult:
    """What one pass did (or, dry, would do): the updates (a tuple of nodes -> arguments), the occupancy
    reported, the nodes held by someone else's claim, and what went wrong (`failure`: the kind that stopped it)."""

    applied: dict[str, list[str]] = field(default_factory=dict)  # node -> arguments
    commands: list[list[str]] = field(default_factory=list)  # each `scontrol update` run (or, dry, to run)
    reported: list[Json] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    failure: int = EXIT_OK  # EXIT_AUTH, EXIT_API, EXIT_SLURM when the pass could not be made
    interval_s: float | None = None  # the controller's suggested sync_interval_s
    stale: bool = False  # the controller's answer was older than the document applied last: not applied


def sync_once(
    cluster: str,
    controller: Controller,
    slurm: Slurm,
    partitions_to_groups: Mapping[str, str],
    memory: Memory | None = None,
    dry_run: bool = False,
) -> SyncResult:
    """Read the desired state, apply the difference, report occupancy and claims. Slurm is only touched once Slurm's
    own state was read and either the controller answered a whole, well-formed document, or (controller down)
    the last applied one says which new nodes to drain."""
    memory = memory if memory is not None else Memory()
    result = SyncResult()
    try:
        cursor = memory.document.cursor() if memory.document is not None and not dry_run else None
        answer = controller.desired(cluster, cursor) if cursor is not None else controller.desired(cluster)
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
        document = None
    try:
        actual = slurm.nodes()
    except SlurmError as err:
        result.failure = result.failure or EXIT_SLURM
        result.errors.append(str(err))
        log.error("%s; nothing changed in Slurm", err)
        return result

    fresh = document is not None
    document = document or memory.document
    if document is None:
        log.error("no document from the controller and none kept: nothing changed in Slurm")
        return result
    plan = _plan(document, actual, partitions_to_groups, fresh, result)
    _apply(plan, slurm, result, dry_run)
    if not fresh or dry_run:
        return result
    memory.keep(document)
    # Occupancy matters to a node waiting for its check; a claim, when it changes. Nothing else is reported, so an
    # idle cluster's pass reports nothing (the first pass of a run reports every node once).
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
    return result


def _no_credentials(err: Exception) -> bool:
    return isinstance(err, ApiError) and err.status == 0 and "credentials" in str(err)


def _plan(
    document: Document,
    actual: Mapping[str, SlurmNode],
    partitions_to_groups: Mapping[str, str],
    fresh: bool,
    result: SyncResult,
) -> dict[str, list[str]]:
    """node -> the arguments of its update. Without a fresh document only drains of new nodes are planned."""
    plan: dict[str, list[str]] = {}
    for name, node in sorted(actual.items()):
        if name in document.wanted:
            desired = document.wanted[name]
            if node.claim is not None:
                result.held[name] = _printable(node.claim)[:HELD_MAX]
            if desired is not None and fresh:
                plan[name] = changes(desired, node)
            continue
        isolating = _isolating(node, partitions_to_groups, document.isolating_groups)
        args = unlisted_node_changes(node, isolating, document.complete)
        if fresh or args[:1] == ["State=DRAIN"]:  # a kept document drains new nodes, never resumes one
            plan[name] = args
    return {name: args for name, args in plan.items() if args}


def _isolating(
    node: SlurmNode, partitions_to_groups: Mapping[str, str], isolating_groups: frozenset[str]
) -> bool | None:
    """Whether the node's group isolates new nodes: True if any partition's group does, False if every partition
    maps to a group that does not, None when a partition's group is unknown."""
    groups = [partitions_to_groups.get(p) for p in node.partitions]
    if any(g in isolating_groups for g in groups if g):
        return True
    if groups and all(groups):
        return False
    return None


def _apply(plan: Mapping[str, list[str]], slurm: Slurm, result: SyncResult, dry_run: bool) -> None:
    """One `scontrol update` per distinct change and UPDATE_BATCH nodes; a refused batch is retried node by node
    (one node's refusal does not hold back the others); slurmctld unreachable stops the pass."""
    batches: dict[tuple[str, ...], list[str]] = {}
    for name, args in plan.items():
        batches.setdefault(tuple(args), []).append(name)
    for change, names in batches.items():
        for start in range(0, len(names), UPDATE_BATCH):
            part = names[start : start + UPDATE_BATCH]
            if "State=RESUME" in change:
                kept = _still_ours(slurm, part, result)
                if kept is None:
                    return
                part = kept
            if part and not _update(slurm, part, list(change), result, dry_run):
                return


def _still_ours(slurm: Slurm, names: list[str], result: SyncResult) -> list[str] | None:
    """The nodes of `names` that, read again right before their RESUME, are still drained by us alone: a drain,
    DOWN or FAIL someone placed since the pass read Slurm is theirs, and is kept (held, reported as such). None
    when slurmctld cannot be reached (the pass stops); [] when the read is refused: nothing is resumed."""
    try:
        now = slurm.nodes(names)
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
        if node is not None and node.claim is None and node.drained:
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
            result.errors.append(str(err))
            log.warning("%s", err)
            return True
        return all(_update(slurm, [n], args, result, dry_run) for n in names)
    result.commands.append(command)
    result.applied.update({n: args for n in names})
    log.info("%s", " ".join(quoted(a) for a in command))
    return True


def quoted(arg: str) -> str:
    key, _, value = arg.partition("=")
    return f'{key}="{value}"' if " " in value else arg


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
