"""A pass's writes to Slurm (hyperpod_dhc.hpdhc.sync makes them): the lock's node list in one write (`write_lock`, as
hyperpod_dhc.hpdhc.lock planned it), then each node's label, planned from the controller's document (`plan`: drain or
resume, reason, `HealthCheck:*` features) and written a batch of nodes at a time (`apply`).

It changes a node only when nothing and nobody else has a claim on it (`hyperpod_dhc.hpdhc.scontrol.SlurmNode.claim`:
every state word one of use, any reason ours). An admin's DOWN or DRAIN, HyperPod's `FAIL Action:Reboot`, Slurm's `Not
responding`: the node is left exactly as it is, and the controller hears "held: <claim>". A Slurm node the controller
does not list is drained (`hpdhc:wait`) only when the document says the cluster is fully recorded (`complete`) and the
node's partition belongs to an isolating group. Pure rules: `changes`, `unlisted_node_changes`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from hyperpod_dhc.hpdhc.document import FEATURE_KEY, FEATURES, Desired, Document, isolating
from hyperpod_dhc.hpdhc.lock import AWAITING, LockPlan
from hyperpod_dhc.hpdhc.outcome import EXIT_SLURM, SyncResult
from hyperpod_dhc.hpdhc.scontrol import (
    LOCK_RENEW_S,
    UPDATE_BATCH,
    Lock,
    Slurm,
    SlurmError,
    SlurmNode,
    SlurmUnreachable,
    hostlist,
)

HELD_MAX = 200  # characters of a foreign claim reported back to the controller

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


# ---------------------------------------------------------------------- the writes


def write_lock(
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


def plan(
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


def apply(plan: Mapping[str, list[str]], slurm: Slurm, lock: str, result: SyncResult, dry_run: bool) -> None:
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
