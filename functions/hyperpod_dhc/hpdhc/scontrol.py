"""Slurm as the bridge sees it: each node as `scontrol -o --future show node` reports it, `scontrol update` limited
to what never stops a job (drain, resume, reason, features), many nodes at a time, and the controller's lock: one
Slurm reservation per cluster (`lock_name`), `Flags=MAINT,IGNORE_JOBS`, `Users=root`, that holds every node the
controller has not passed. Slurm starts no job on a reserved node unless the job names the reservation, and no
`scontrol update State=RESUME` (an admin's, HyperPod's reboot flow) changes a reservation's nodes: the drain is the
label an admin sees, the reservation is the lock. `Slurm` is the protocol `hyperpod_dhc.hpdhc.sync.sync_once` uses;
`Scontrol` runs the binary, the digital twin has its own (tests/twin/slurm.py).

Who owns a node's state is read by allow-list (`SlurmNode.claim`): the bridge may change a node only when every
word of its state is one of use (idle, allocated, mixed, completing, reserved, planned) or a drain whose reason is
ours, any reason on it is ours, and no active reservation but ours holds it. Anything else (an admin's or Slurm's
DOWN, FAIL, MAINT, REBOOT_*, POWER_*, NOT_RESPONDING, a drain with another reason, HyperPod's `Action:Reboot`, a
state word this version does not know, someone else's reservation, MAINT or not) is someone else's claim, and the
node's state is left exactly as it is.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

OWNED_PREFIX = "hpdhc:"  # a drain reason the controller owns: the only kind the bridge resumes or re-words
SCONTROL_TIMEOUT_S = 60.0
# Node names per `scontrol update NodeName=a,b,...`: one update per distinct change, in parts this long (a
# 10,000-node labelling pass is tens of calls, far under the command line's limit).
UPDATE_BATCH = 500
# Words of a State that are no one's claim on the node: its use. DRAIN and its forms are ours only with our reason.
FREE_STATE_WORDS = frozenset({"IDLE", "ALLOCATED", "MIXED", "COMPLETING", "RESERVED", "PLANNED"})
DRAIN_WORDS = frozenset({"DRAIN", "DRAINING", "DRAINED"})
_BUSY_WORDS = frozenset({"ALLOCATED", "MIXED", "COMPLETING", "DRAINING"})
# What Slurm itself says of a node whose slurmd is not up (yet): no one's claim on its use, so it may be locked (and
# the boot gate may label it) before it registers.
NOT_UP_WORDS = frozenset({"DOWN", "UNKNOWN", "NOT_RESPONDING", "FUTURE", "CLOUD", "POWERED_DOWN"})
NOT_UP_REASONS = frozenset({None, "Not responding"})
# The lock: Slurm 22.05 caps `Duration=infinite` at 365 days, so a lock whose end is this close is renewed.
LOCK_FLAGS = "MAINT,IGNORE_JOBS"  # MAINT: may overlap other reservations; IGNORE_JOBS: a running job keeps running
LOCK_RENEW_S = 60 * 86400
LOCK_YEAR_S = 365 * 86400
# Slurm's answer when slurmctld cannot be reached: a pass stops at the first one (each costs ~10 s).
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted", re.I)


@dataclass(frozen=True)
class SlurmNode:
    """A node as `scontrol show node` reports it."""

    name: str
    drained: bool = False  # DRAIN (draining or drained)
    reason: str | None = None
    features: tuple[str, ...] = ()  # ActiveFeatures
    available: tuple[str, ...] | None = None  # AvailableFeatures; None: the same as ActiveFeatures
    partitions: tuple[str, ...] = ()
    busy: bool = False  # a running or completing job on it
    states: tuple[str, ...] = ("IDLE",)  # every word of State= (IDLE, DRAIN, DOWN, NOT_RESPONDING, ...)
    reservation: str | None = None  # someone else's active reservation that holds it, `reservation NAME [(FLAGS)]`
    locked: bool = False  # in the controller's lock (our reservation)

    @property
    def owned(self) -> bool:
        return bool(self.reason and self.reason.startswith(OWNED_PREFIX))

    @property
    def claim(self) -> str | None:
        """Why the node is someone else's (a reservation, a foreign state word or reason), or None when the bridge
        may change it."""
        if self.reservation:
            return self.reservation
        # Our own MAINT reservation shows as MAINTENANCE in the node's State: that word is ours when we hold it.
        ours = FREE_STATE_WORDS | DRAIN_WORDS | ({"MAINTENANCE"} if self.locked else set())
        foreign = [w for w in self.states if w not in ours]
        if foreign:
            return "+".join(foreign) + (f": {self.reason}" if self.reason else "")
        if self.reason and not self.owned:
            return self.reason
        if self.drained and not self.owned:
            return "DRAIN"  # a drain with no reason: not ours
        return None

    @property
    def not_up(self) -> bool:
        """Only Slurm's own marks of a node whose slurmd is not up (yet) are on it: no one else's claim."""
        if self.reservation or ((self.drained or self.reason not in NOT_UP_REASONS) and not self.owned):
            return False
        ours = FREE_STATE_WORDS | DRAIN_WORDS | NOT_UP_WORDS | ({"MAINTENANCE"} if self.locked else set())
        return bool(NOT_UP_WORDS.intersection(self.states)) and all(w in ours for w in self.states)

    @property
    def lockable(self) -> bool:
        """The lock may be put on it: no one has a claim on it, or Slurm only says it is not up yet."""
        return self.claim is None or self.not_up


# ---------------------------------------------------------------------- reading `scontrol -o show node`

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z_]*)=")
# Slurm appends who set a reason and when: "Reason=admin maintenance [root@2026-12-03T18:03:26]".
_REASON_STAMP = re.compile(r" \[[^\[\]\s@]+@[^\[\]\s]+\]")


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """Every node of `scontrol -o show node` output (one node a line), by name."""
    nodes = (parse_node(line) for line in text.splitlines())
    return {n.name: n for n in nodes if n is not None}


def parse_node(line: str) -> SlurmNode | None:
    """One `scontrol -o show node` line; None for a line that is no node (`No nodes in the system`).

    Values may hold spaces (`OS=Linux 6.1 #1 SMP ...`): a value runs to the next ` Key=`. The reason is free
    text and comes after every fixed field, so it is cut off first and ends at Slurm's `[user@time]` stamp.
    scontrol prints the base state and its flags (IDLE+DRAIN, DOWN+DRAIN+NOT_RESPONDING); a trailing `*`, `~`,
    `#`, `!`, `%` or `$` (sinfo's short forms) is read as the flag it stands for, so it is never missed."""
    head, _, tail = line.strip().partition(" Reason=")
    fields = _fields(head)
    if not fields.get("NodeName"):
        return None
    reason: str | None = None
    if tail:
        stamp = _REASON_STAMP.search(tail)
        reason = tail[: stamp.start()] if stamp else _fields("Reason=" + tail)["Reason"]
    states = _state_words(fields.get("State", ""))
    return SlurmNode(
        name=fields["NodeName"],
        drained=bool(DRAIN_WORDS.intersection(states)),
        reason=reason or None,
        features=_listed(fields.get("ActiveFeatures")),
        available=_listed(fields.get("AvailableFeatures")),
        partitions=_listed(fields.get("Partitions")),
        busy=bool(_BUSY_WORDS.intersection(states)),
        states=states,
    )


_SUFFIX_FLAGS = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "!": "POWERING_DOWN",
                 "%": "POWERING_DOWN", "$": "MAINT", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
                 "-": "PLANNED"}  # fmt: skip


@dataclass(frozen=True)
class Reservation:
    """One `scontrol -o show reservation` line."""

    name: str
    nodes: str  # a hostlist expression ("" for none)
    active: bool
    flags: tuple[str, ...] = ()
    ends_at: float | None = None  # epoch seconds; None when unread

    @property
    def claim(self) -> str:
        shown = [f for f in self.flags if f != "SPEC_NODES"]
        return f"reservation {self.name}" + (f" ({','.join(shown)})" if shown else "")


def parse_reservations(text: str) -> list[Reservation]:
    """Every reservation of `scontrol -o show reservation` output (`No reservations in the system`: none)."""
    out = []
    for line in text.splitlines():
        fields = _fields(line.strip())
        if fields.get("ReservationName"):
            nodes = fields.get("Nodes", "")
            active = fields.get("State", "").upper() == "ACTIVE"
            out.append(Reservation(name=fields["ReservationName"], nodes="" if nodes == "(null)" else nodes,
                                   active=active, flags=_listed(fields.get("Flags")),
                                   ends_at=_epoch(fields.get("EndTime"))))  # fmt: skip
    return out


def _epoch(stamp: str | None) -> float | None:
    """slurmctld's local time (`2027-12-05T01:31:26`) as epoch seconds; None when unreadable."""
    try:
        return datetime.fromisoformat(stamp or "").timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Lock:
    """The controller's lock as Slurm has it: our reservation's nodes, and when Slurm would end it."""

    name: str
    nodes: frozenset[str]
    ends_at: float | None = None


_NUMBERED = re.compile(r"(.*?)([1-9][0-9]*)")


def hostlist(names: Sequence[str]) -> str:
    """Slurm's compressed hostlist of `names` (`ip-10-1-2-[1-3,7]`): a reservation's whole node list is one
    argument, and Linux caps an argument at 128 KiB, which 10,000 names written out would pass. A name that does not
    end in a number without leading zeros is written as it is."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        numbered = _NUMBERED.fullmatch(name)
        if numbered and not any(c in "[]," for c in numbered[1]):
            groups.setdefault(numbered[1], []).append(int(numbered[2]))
        else:
            plain.append(name)
    out = list(plain)
    for prefix, numbers in sorted(groups.items()):
        if len(numbers) == 1:
            out.append(f"{prefix}{numbers[0]}")
            continue
        numbers.sort()
        runs: list[str] = []
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            runs.append(f"{start}" if start == previous else f"{start}-{previous}")
            if number is not None:
                start = previous = number
        out.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(out)


def lock_name(cluster: str) -> str:
    """The reservation that is the controller's lock on `cluster`'s nodes: no one else's reservation has it."""
    return f"hpdhc-{cluster}"


def _state_words(state: str) -> tuple[str, ...]:
    words: list[str] = []
    for word in state.upper().split("+"):
        while word and word[-1] in _SUFFIX_FLAGS:
            words.append(_SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        if word:
            words.append(word)
    return tuple(words) or ("UNREAD",)  # no State at all is no proof of anything: a claim


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


class SlurmUnreachable(SlurmError):
    """slurmctld did not answer: nothing more is tried this pass."""


class Slurm(Protocol):
    """What the bridge needs of Slurm: its nodes (every one, or those of `names` it knows, each with `locked` when
    the lock named `lock` holds it), one update of some nodes, the lock, and one write of the lock's node list
    (creating it for its first node, deleting it when none is left). Writes raise SlurmError when refused."""

    def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]: ...

    def update(self, nodes: Sequence[str], args: list[str]) -> None: ...

    def lock(self, name: str) -> Lock | None: ...

    def set_lock(self, name: str, nodes: Sequence[str], current: Lock | None) -> None: ...


# What an update may say: drain, resume, reason, features. Nothing that stops a job (DOWN, FAIL, POWER_DOWN...).
_SAFE_ARG = re.compile(r"State=(DRAIN|RESUME)|Reason=[^\n\r\x00]+|(Available|Active)Features=[^\s=]*")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Scontrol(Slurm):
    """Slurm through its `scontrol` binary (the cluster's slurm.conf, or $SLURM_CONF)."""

    def __init__(self, binary: str = "scontrol", timeout_s: float = SCONTROL_TIMEOUT_S) -> None:
        self.binary = binary
        self.timeout_s = timeout_s

    def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
        """The nodes (every one, or those of `names`; `FUTURE` ones too, which plain `show node` hides), each with
        someone else's active reservation that holds it and whether the lock `lock` does: Slurm 22.05 shows no
        reservation in a node's State, so reservations are read too (`scontrol -o show reservation`)."""
        known = [n for n in names if _NODE_NAME.fullmatch(n)]
        if names and not known:
            return {}
        nodes = parse_nodes(self._run(["-o", "--future", "show", "node", *([",".join(known)] if known else [])]))
        held, locked = self._reserved(lock)
        return {name: replace(node, reservation=held.get(name), locked=name in locked) for name, node in nodes.items()}

    def _reserved(self, lock: str | None) -> tuple[dict[str, str], frozenset[str]]:
        """(node -> someone else's active reservation holding it, `reservation NAME (FLAGS)`; the lock's nodes)."""
        out: dict[str, str] = {}
        locked: frozenset[str] = frozenset()
        for reservation in parse_reservations(self._run(["-o", "show", "reservation"])):
            if reservation.active and reservation.nodes:
                names = self.hostnames(reservation.nodes)
                if reservation.name == lock:
                    locked = frozenset(names)
                    continue
                for name in names:
                    out.setdefault(name, reservation.claim)
        return out, locked

    def hostnames(self, expression: str) -> list[str]:
        return self._run(["show", "hostnames", expression]).split()

    def lock(self, name: str) -> Lock | None:
        # Every reservation: `show reservation NAME` fails when there is none of that name.
        for reservation in parse_reservations(self._run(["-o", "show", "reservation"])):
            if reservation.name == name:
                nodes = frozenset(self.hostnames(reservation.nodes)) if reservation.nodes else frozenset()
                return Lock(name, nodes, reservation.ends_at)
        return None

    def set_lock(self, name: str, nodes: Sequence[str], current: Lock | None) -> None:
        """Slurm 22.05 takes a reservation's whole node list (no `Nodes+=`), refuses an empty one, and ends an
        `infinite` one after 365 days: so create, replace the list (renewing the end when near), or delete."""
        names = sorted(n for n in nodes if _NODE_NAME.fullmatch(n))
        if len(names) != len(nodes) or not _NODE_NAME.fullmatch(name):
            raise SlurmError(f"refused to write reservation {name} with nodes {','.join(nodes)}")
        if not names:
            if current is not None:
                self._run(["delete", f"ReservationName={name}"])
            return
        listed = "Nodes=" + hostlist(names)
        if current is None:
            self._run(["create", "reservation", f"ReservationName={name}", listed, "StartTime=now",
                       "Duration=infinite", "Users=root", f"Flags={LOCK_FLAGS}"])  # fmt: skip
            return
        renew = current.ends_at is not None and current.ends_at - time.time() < LOCK_RENEW_S
        end = datetime.fromtimestamp(time.time() + LOCK_YEAR_S)  # slurmctld's local time, as it prints it
        renewal = [f"EndTime={end:%Y-%m-%dT%H:%M:%S}"] if renew else []
        self._run(["update", f"ReservationName={name}", listed, *renewal])

    def update(self, nodes: Sequence[str], args: list[str]) -> None:
        unsafe = [a for a in args if not _SAFE_ARG.fullmatch(a)]
        names = [n for n in nodes if _NODE_NAME.fullmatch(n)]
        if unsafe or not args or not nodes or len(names) != len(nodes):
            raise SlurmError(f"refused to run scontrol update NodeName={','.join(nodes)} with {unsafe or args}")
        self._run(["update", "NodeName=" + ",".join(names), *args])

    def _run(self, args: list[str]) -> str:
        shown = " ".join(args) if len(" ".join(args)) < 300 else " ".join(args)[:300] + "..."
        try:
            done = subprocess.run(
                [self.binary, *args], capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise SlurmUnreachable(f"scontrol {shown}: no answer in {self.timeout_s:g} s") from None
        except OSError as err:
            raise SlurmUnreachable(f"scontrol {shown}: {err}") from None
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
            kind = SlurmUnreachable if _UNREACHABLE.search(message) else SlurmError
            raise kind(f"scontrol {shown}: {message}")
        return done.stdout
