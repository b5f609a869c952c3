"""The controller's lock on a cluster's nodes, planned (pure): which nodes the reservation `hpdhc-<cluster>`
(hyperpod_dhc.hpdhc.scontrol) holds after a pass. It holds every node the controller has not passed: a node the document
drains (waiting, in its check, failed, inconclusive), and a node it does not list yet in an isolating partition of a
complete document. A `RESUME` lifts the drain, the label; it does not lift the lock, so no job starts on the node
until the controller passes it.

- A node is added only when no one else has a claim on it (`SlurmNode.lockable`: Slurm's own "not up yet" marks
  are no claim, so a node is locked before its slurmd registers).
- A node in the lock stays there whatever happens to it (an admin's `RESUME`, HyperPod's `FAIL Action:Reboot`, a
  `scontrol reboot nextstate=RESUME`), until a fresh document from the fence holder says it passed (`may_release`).
- An admin who takes a node out of the lock by hand (`scontrol update ReservationName=hpdhc-<cluster> Nodes=...`,
  or deletes the reservation) has released it on purpose: it is reported and left alone, lock and label, until the
  controller's desired state for it changes (a new check, a new instance); it is never fought over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hyperpod_dhc.hpdhc.document import Document, isolating
from hyperpod_dhc.hpdhc.scontrol import SlurmNode

AWAITING = "hpdhc:wait not recorded by the controller yet"


@dataclass(frozen=True)
class LockPlan:
    """The lock's nodes after the pass, what changes, and the nodes released by hand (node -> the desired reason
    they were released under: while it stays the same, they are left alone)."""

    nodes: frozenset[str]
    added: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    released: Mapping[str, str] = field(default_factory=dict)
    newly_released: frozenset[str] = frozenset()

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def wanted(
    name: str, node: SlurmNode, document: Document, partitions_to_groups: Mapping[str, str], marked: bool = False
) -> str | None:
    """The reason the node should be locked for, "" when it should not be, None when the document does not say
    (an entry off the contract, an unknown group, a partial document): then the lock is left as it is. A node the
    boot gate marked (`marked`) and the document does not list is locked unless its group does not isolate."""
    if name in document.wanted:
        desired = document.wanted[name]
        return None if desired is None else desired.reason or ""
    group_isolates = isolating(node.partitions, partitions_to_groups, document.isolating_groups)
    if marked and group_isolates is not False:
        return AWAITING
    if not document.complete or group_isolates is None:
        return None
    return AWAITING if group_isolates else ""


def plan_lock(
    document: Document,
    actual: Mapping[str, SlurmNode],
    partitions_to_groups: Mapping[str, str],
    written: frozenset[str] | None,
    released: Mapping[str, str],
    may_release: bool,
    marked: frozenset[str] = frozenset(),
) -> LockPlan:
    """The lock after this pass. `actual`: every Slurm node, each with `locked`; `written`: the lock's nodes as
    this bridge left them last (None: it never wrote, so no release by hand can be told); `released`: nodes released
    by hand so far; `may_release`: a fresh document from the fence holder (else nodes are only added); `marked`: the
    nodes the boot gate could not lock (hyperpod_dhc.hpdhc.gate)."""
    current = frozenset(name for name, node in actual.items() if node.locked)
    reasons = {
        name: wanted(name, node, document, partitions_to_groups, name in marked) for name, node in actual.items()
    }
    kept_released: dict[str, str] = {}
    for name, reason in released.items():
        if name in actual and not actual[name].locked and reasons[name] in (None, reason):
            kept_released[name] = reason  # still released: the controller wants the same as when it was
    newly: frozenset[str] = frozenset()
    if written is not None:
        newly = frozenset(
            name
            for name in written - current
            if name in actual and reasons[name] and name not in kept_released  # would be locked: someone took it out
        )
        for name in newly:
            kept_released[name] = reasons[name] or ""
    added = frozenset(
        name
        for name, node in actual.items()
        if not node.locked and reasons[name] and node.lockable and name not in kept_released
    )
    removed = frozenset(name for name in current if reasons[name] == "" and may_release)
    return LockPlan((current | added) - removed, added, removed, kept_released, newly)
