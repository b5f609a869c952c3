"""Slurm as the bridge sees it: each node as `scontrol -o show node` reports it, and `scontrol update` limited to
what never stops a job (drain, resume, reason, features). `Slurm` is the protocol `hpdhc.bridge.sync_once` uses;
`Scontrol` runs the binary, the digital twin has its own (tests/twin/slurm.py)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Protocol

OWNED_PREFIX = "hpdhc: "  # a drain reason the controller owns: the only kind the bridge resumes or re-words
SCONTROL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Actual:
    """A node as `scontrol show node` reports it."""

    drained: bool  # DRAIN (draining or drained)
    reason: str | None
    features: tuple[str, ...]  # ActiveFeatures
    available: tuple[str, ...] | None = None  # AvailableFeatures; None: the same as ActiveFeatures

    @property
    def owned(self) -> bool:
        return bool(self.reason and self.reason.startswith(OWNED_PREFIX))


@dataclass(frozen=True, kw_only=True)
class SlurmNode(Actual):
    name: str
    partitions: tuple[str, ...] = ()
    busy: bool = False  # a running or completing job on it


# ---------------------------------------------------------------------- reading `scontrol -o show node`

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z_]*)=")
# Slurm appends who set a reason and when: "Reason=admin maintenance [root@2026-12-03T18:03:26]".
_REASON_STAMP = re.compile(r" \[[^\[\]\s@]+@[^\[\]\s]+\]")
# scontrol prints the base state and its flags (IDLE+DRAIN, ALLOCATED+DRAIN, IDLE+COMPLETING+DRAIN); the short
# names (DRAINED, DRAINING: sinfo's %T) are read too.
_DRAIN_FLAGS = {"DRAIN", "DRAINING", "DRAINED"}
_BUSY_FLAGS = {"ALLOCATED", "MIXED", "COMPLETING", "DRAINING"}


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """Every node of `scontrol -o show node` output (one node a line), by name."""
    nodes = (parse_node(line) for line in text.splitlines())
    return {n.name: n for n in nodes if n is not None}


def parse_node(line: str) -> SlurmNode | None:
    """One `scontrol -o show node` line; None for a line that is no node (`No nodes in the system`).

    Values may hold spaces (`OS=Linux 6.1 #1 SMP ...`): a value runs to the next ` Key=`. The reason is free
    text and comes after every fixed field, so it is cut off first and ends at Slurm's `[user@time]` stamp."""
    head, _, tail = line.strip().partition(" Reason=")
    fields = _fields(head)
    if not fields.get("NodeName"):
        return None
    reason: str | None = None
    if tail:
        stamp = _REASON_STAMP.search(tail)
        reason = tail[: stamp.start()] if stamp else _fields("Reason=" + tail)["Reason"]
    flags = set(fields.get("State", "").split("+"))
    return SlurmNode(
        name=fields["NodeName"],
        drained=bool(flags & _DRAIN_FLAGS),
        reason=reason or None,
        features=_listed(fields.get("ActiveFeatures")),
        available=_listed(fields.get("AvailableFeatures")),
        partitions=_listed(fields.get("Partitions")),
        busy=bool(flags & _BUSY_FLAGS),
    )


def _fields(text: str) -> dict[str, str]:
    keys = list(_KEY.finditer(text))
    ends = [k.start() for k in keys[1:]] + [len(text)] if keys else []
    return {k.group(1): text[k.end() : end].strip() for k, end in zip(keys, ends, strict=True)}


def _listed(value: str | None) -> tuple[str, ...]:
    if not value or value == "(null)":
        return ()
    return tuple(v for v in value.split(",") if v)


class SlurmError(RuntimeError):
    """Slurm could not be read or refused an update."""


class Slurm(Protocol):
    """What the bridge needs of Slurm: its nodes, and one node's update (raising SlurmError when refused)."""

    def nodes(self) -> dict[str, SlurmNode]: ...

    def update(self, node: str, args: list[str]) -> None: ...


# What an update may say: drain, resume, reason, features. Nothing that stops a job (DOWN, FAIL, POWER_DOWN...).
_SAFE_ARG = re.compile(r"State=(DRAIN|RESUME)|Reason=[^\n]+|(Available|Active)Features=[^\s=]*")


class Scontrol(Slurm):
    """Slurm through its `scontrol` binary (the cluster's slurm.conf, or $SLURM_CONF)."""

    def __init__(self, binary: str = "scontrol", timeout_s: float = SCONTROL_TIMEOUT_S) -> None:
        self.binary = binary
        self.timeout_s = timeout_s

    def nodes(self) -> dict[str, SlurmNode]:
        return parse_nodes(self._run(["-o", "show", "node"]))

    def update(self, node: str, args: list[str]) -> None:
        unsafe = [a for a in args if not _SAFE_ARG.fullmatch(a)]
        if unsafe or not args:
            raise SlurmError(f"refused to run scontrol update NodeName={node} with {unsafe or 'nothing'}")
        self._run(["update", f"NodeName={node}", *args])

    def _run(self, args: list[str]) -> str:
        try:
            done = subprocess.run(
                [self.binary, *args], capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise SlurmError(f"scontrol {' '.join(args)}: {err}") from None
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
            raise SlurmError(f"scontrol {' '.join(args)}: {message}")
        return done.stdout
