"""The controller's lock (hyperpod_dhc.hpdhc.scontrol's reservation) for the test fakes of the bridge's `Slurm`: one
reservation of a node list, as Slurm 22.05 keeps it (created for its first node, replaced whole, deleted when empty)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from hyperpod_dhc.hpdhc.scontrol import Lock, SlurmNode


class FakeLock:
    """Mixed into a fake `Slurm`: `lock`, `set_lock`, and `locked_view` to mark its nodes as `nodes()` returns them."""

    lock_name: str | None = None
    lock_nodes: frozenset[str] = frozenset()
    lock_writes: list[tuple[str, tuple[str, ...]]]

    def lock(self, name: str) -> Lock | None:
        return Lock(name, self.lock_nodes) if name == self.lock_name else None

    def set_lock(self, name: str, nodes: Sequence[str], current: Lock | None) -> None:
        if not hasattr(self, "lock_writes"):
            self.lock_writes = []
        self.lock_writes.append((name, tuple(sorted(nodes))))
        self.lock_name = name if nodes else None
        self.lock_nodes = frozenset(nodes)

    def locked_view(self, nodes: Mapping[str, SlurmNode], lock: str | None) -> dict[str, SlurmNode]:
        held = self.lock_nodes if lock is not None and lock == self.lock_name else frozenset()
        return {name: replace(node, locked=name in held) for name, node in nodes.items()}
