"""Whose record is whose, and which records bear on one node's check.

**Only a node's own stream speaks for it.** A stream is node N's when the names in it (`DeepHealthCheckResults/
<log_stream_id>`: an instance id, a short hostname, a `NodeLogicalId` as a path segment) name N and no one else:
N's current instance id, its logical id, or the hostname it holds now. Fields and text never make a record
anyone's: AWS's managed instance-role policy lets any node write into every cluster's log group, so a line proves
nothing by what it says about whom. A stream that names nobody we know, someone unknown, or two nodes is
**foreign**: its records never pass or fail a node; a foreign failure inside a node's window keeps it from
passing on that check and costs it at most one re-check (`judge.py`). A stream naming only a record's past
instance, or a gone node's hostname, is **retired**: nothing it says counts. A poll that knows only some nodes
leaves a stream naming someone it does not know **unplaced** for the next look at the whole cluster.

**A node's window** is its check, widened at both ends by its clock's measured skew (the node stamps lines with its
own clock): from the check's start less the skew behind (at least START_SKEW_FLOOR_S, never before its previous
verdict) to, for passes, the first look that found it out of the check plus the skew ahead (at least
PASS_SKEW_FLOOR_S). Failures count on both wider edges: from the first check of the instance since its last pass or
recovery action (a failure of an earlier check that did not pass, delivered late, still fails it), up to the end of
its revisit once it passed, or up to now.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from hyperpod_dhc.deephealth.evidence.classify import Finding
from hyperpod_dhc.deephealth.evidence.rules import HOSTNAME, INSTANCE_ID, Kind

PASS_SKEW_FLOOR_S = 300.0  # a line may be stamped when HyperPod closes the check, after the node's status changed
START_SKEW_FLOOR_S = 120.0  # a node's clock may run behind ours
SKEW_MAX_S = 1800.0  # the most either edge is widened by a measured skew


class Ownership(str, Enum):
    OWN = "own"
    FOREIGN = "foreign"
    RETIRED = "retired"
    UNPLACED = "unplaced"


class Named(NamedTuple):
    """A node as attribution sees it: its key and the names its stream may carry now (`past`: names it had). A
    tuple: a look at a 10,000-node cluster makes one a node."""

    key: str
    instance_id: str | None = None
    logical_id: str | None = None
    hostname: str | None = None  # the short hostname it holds now
    past: tuple[str, ...] = ()
    live: bool = True


@dataclass(frozen=True)
class StreamIndex:
    """Stream name -> (ownership, the owner's key). `complete`: it knows every node of the cluster (a whole look)."""

    current: dict[str, str | None] = field(default_factory=dict)  # name -> key (None: two live nodes hold it)
    past: frozenset[str] = frozenset()
    complete: bool = True

    @classmethod
    def of(cls, nodes: Iterable[Named], complete: bool = True) -> StreamIndex:
        current: dict[str, str | None] = {}
        past: set[str] = set()
        for node in nodes:
            if not node.live:
                past.update([n.lower() for n in (node.instance_id, node.logical_id, node.hostname, *node.past) if n])
                continue
            if node.past:
                past.update([n.lower() for n in node.past if n])
            for name in (node.instance_id, node.logical_id, node.hostname):
                if name:
                    key = name.lower()
                    current[key] = node.key if current.get(key, node.key) == node.key else None
        return cls(current, frozenset(past - current.keys()), complete)

    def owner(self, stream: str) -> tuple[Ownership, str | None]:
        """Whose stream this is."""
        lowered = stream.lower()
        names = {*INSTANCE_ID.findall(lowered), *HOSTNAME.findall(lowered)}
        tokens = names | {segment for segment in lowered.split("/") if segment}
        owners = {self.current[t] for t in tokens if t in self.current}
        unknown = [n for n in names if n not in self.current and n not in self.past]
        if unknown:
            return (Ownership.UNPLACED if not self.complete else Ownership.FOREIGN), None
        if len(owners) == 1 and None not in owners:
            return Ownership.OWN, owners.pop()
        if owners:
            return Ownership.FOREIGN, None  # two nodes, or a name two live nodes hold
        if any(t in self.past for t in tokens):
            return Ownership.RETIRED, None
        return Ownership.FOREIGN, None  # names nobody: an opaque id, a made-up name


@dataclass(frozen=True)
class Window:
    """Where a node's records are read: [start, pass_edge] for passes, [fail_start, fail_edge] for everything that
    keeps it from passing (None: still open)."""

    start: float
    pass_edge: float | None
    fail_edge: float | None = None
    fail_start: float | None = None  # None: `start`

    def holds_pass(self, at: float) -> bool:
        return self.start <= at and (self.pass_edge is None or at <= self.pass_edge)

    def holds_failure(self, at: float) -> bool:
        start = self.start if self.fail_start is None else min(self.start, self.fail_start)
        return start <= at and (self.fail_edge is None or at <= self.fail_edge)


@dataclass(frozen=True)
class Skew:
    """How far a node's clock runs from CloudWatch's, measured on its own events (0 when nothing says so)."""

    ahead_s: float = 0.0
    behind_s: float = 0.0

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> Skew:
        ahead = 0.0
        behind = math.inf
        for f in findings:
            for e in f.record.events:
                if e.ingested_at is None:
                    continue
                ahead = max(ahead, e.at - e.ingested_at)
                behind = min(behind, max(0.0, e.ingested_at - e.at))
        return cls(min(ahead, SKEW_MAX_S), 0.0 if math.isinf(behind) else min(behind, SKEW_MAX_S))


def window(
    started: float,
    left: float | None,
    skew: Skew,
    not_before: float | None = None,
    fail_edge: float | None = None,
    failures_from: float | None = None,
) -> Window:
    """The node's window for its check `started`..`left` (None: still in it); `failures_from`: its failures count
    from then (an earlier check of the same instance that did not pass, since its last pass or recovery)."""
    start = started - max(START_SKEW_FLOOR_S, skew.behind_s)
    # The previous verdict and recovery are on our clock; a node's clock ahead stamps what it wrote before them later.
    if not_before is not None:
        start = max(start, min(not_before + skew.ahead_s, started))
    if failures_from is not None:
        failures_from = min(failures_from + skew.ahead_s, start)
    edge = None if left is None else left + max(PASS_SKEW_FLOOR_S, skew.ahead_s)
    return Window(start, edge, fail_edge, failures_from)


@dataclass(frozen=True)
class NodeEvidence:
    """The records that bear on one node's check: its own in its window, and foreign failures in its window."""

    own: tuple[Finding, ...] = ()
    anonymous_failures: tuple[Finding, ...] = ()
    unplaced: tuple[Finding, ...] = ()  # failures on streams this look could not place
    window: Window | None = None
    skew: Skew = Skew()

    @property
    def passes(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.own if f.kind == Kind.PASS)

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.own if f.kind == Kind.FAILURE)

    @property
    def unrecognised(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.own if f.kind == Kind.UNRECOGNISED)

    @property
    def silent(self) -> bool:
        """Nothing of its own at all."""
        return not self.own


def node_evidence(
    findings: Sequence[tuple[Finding, Ownership, str | None]],
    key: str,
    started: float,
    left: float | None,
    not_before: float | None = None,
    fail_edge: float | None = None,
    failures_from: float | None = None,
) -> NodeEvidence:
    """What `findings` (each with its stream's ownership) say about node `key`'s check `started`..`left`."""
    mine = [f for f, how, owner in findings if how == Ownership.OWN and owner == key]
    earliest = min(started, failures_from if failures_from is not None else started) - SKEW_MAX_S
    skew = Skew.of(f for f in mine if f.record.at >= earliest)
    span = window(started, left, skew, not_before, fail_edge, failures_from)
    own = tuple(
        f for f in mine if (span.holds_pass(f.record.at) if f.kind in (Kind.PASS, Kind.NEUTRAL) else
                            span.holds_failure(f.record.at))
    )  # fmt: skip
    reach = Window(span.start, span.pass_edge)  # a foreign line reaches no further than a pass does
    anonymous = tuple(
        f
        for f, how, _ in findings
        if how == Ownership.FOREIGN and f.kind == Kind.FAILURE and reach.holds_pass(f.record.at)
    )
    unplaced = tuple(
        f
        for f, how, _ in findings
        if how == Ownership.UNPLACED and f.kind == Kind.FAILURE and reach.holds_pass(f.record.at)
    )
    return NodeEvidence(own, anonymous, unplaced, span, skew)
