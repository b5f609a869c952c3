"""Whose result line is whose, and what the lines prove about one node's check.

A line counts for a node only when it is the node's own: its stream names the node (instance id, present or
past, short hostname or `NodeLogicalId`), or, in a stream that names nobody, an instance field or its text names
that node alone. A line on node A's stream that names peer B is A's evidence, never B's. A line that names a host
or instance no record knows, or several nodes, or nobody, is anonymous: it cannot clear or condemn any one node,
so it bears on every node whose check window it falls in (an anonymous failure makes them `inconclusive`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState, short_hostname
from deephealth.domain.result_lines import HOSTNAME, INSTANCE_ID, UUID, Finding, Hint, ResultLine, Test

AMBIGUOUS = ""  # a name two nodes share (a reused private IP): it names nobody for sure


@dataclass(frozen=True)
class NameIndex:
    """The node (record key) each name belongs to: every instance id it ever had, its logical id, and the short
    hostnames its instances had, unless it is gone (a private IP, and so a hostname, can be handed out again)."""

    owners: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable[NodeRecord], snapshots: Iterable[NodeSnapshot] = ()) -> NameIndex:
        owners: dict[str, str] = {}

        def add(name: str | None, key: str) -> None:
            if name:
                owners[name] = key if owners.get(name, key) == key else AMBIGUOUS

        for r in records:
            for name in (*r.instance_ids, r.instance_id, r.logical_id and r.logical_id.lower()):
                add(name, r.key)
            if r.state != NodeState.GONE:
                for name in (*r.hostnames, short_hostname(r.hostname)):
                    add(name, r.key)
        for s in snapshots:
            add(s.instance_id, s.key)
            add(short_hostname(s.hostname), s.key)
        return cls(owners)

    def owner(self, line: ResultLine) -> str | None:
        """The node whose line this is, or None (anonymous)."""
        by_stream = self._resolve(line.stream_names)
        if by_stream is not None:
            return by_stream or None  # "": the stream names someone unknown, or several: anonymous
        for names in (line.field_names, line.text_names):
            by_line = self._resolve(names)
            if by_line is not None:
                return by_line or None
        return None

    def stream_kind(self, line: ResultLine) -> str:
        """What the line's stream is named by (domain/readings.STREAM_KINDS)."""
        names = line.stream_names
        if any(n not in self.owners and not _uuid(n) for n in names):
            return "unknown-host"
        known = sorted(n for n in names if self.owners.get(n))
        if not known:
            return "opaque"
        if INSTANCE_ID.fullmatch(known[0]):
            return "instance-id"
        return "hostname" if HOSTNAME.fullmatch(known[0]) else "logical-id"

    def _resolve(self, names: frozenset[str]) -> str | None:
        """The one node `names` name; "" when they name someone unknown, or more than one node; None when they
        name nobody. A UUID nobody knows is an opaque stream id, not a name."""
        known = {self.owners[n] for n in names if n in self.owners}
        unknown = any(n not in self.owners and not _uuid(n) for n in names)
        if unknown or AMBIGUOUS in known or len(known) > 1:
            return ""
        return known.pop() if known else None


def _uuid(name: str) -> bool:
    return UUID.fullmatch(name) is not None


@dataclass(frozen=True)
class NodeEvidence:
    """The result lines that bear on one node's check window: its own, and the anonymous ones."""

    proven: frozenset[Test] = frozenset()  # tests its own pass lines say passed
    failures: tuple[ResultLine, ...] = ()  # its own failure lines
    unrecognised: tuple[ResultLine, ...] = ()  # its own lines that no pattern recognises
    own_lines: int = 0
    anonymous_failures: tuple[ResultLine, ...] = ()
    anonymous_unrecognised: tuple[ResultLine, ...] = ()
    anonymous_proven: frozenset[Test] = frozenset()  # tests anonymous pass lines say passed (an NCCL summary)
    anonymous_passes: int = 0

    @property
    def hint(self) -> Hint | None:
        """What its DCGM summary asks for: a replacement wins over a reboot."""
        hints = {line.hint for line in self.failures}
        return "replace" if "replace" in hints else "reboot" if "reboot" in hints else None

    @property
    def silent(self) -> bool:
        """No line bears on the node at all."""
        return (
            not self.own_lines
            and not self.anonymous_passes
            and not self.anonymous_failures
            and not (self.anonymous_unrecognised)
        )


@dataclass(frozen=True)
class ResultLog:
    """The result lines of a cluster's log group stamped since `since`, as read at `read_at`, each attributed."""

    lines: tuple[ResultLine, ...]
    since: float
    read_at: float
    index: NameIndex = field(default_factory=NameIndex)
    owners: tuple[str | None, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "owners", tuple(self.index.owner(line) for line in self.lines))

    def evidence(self, key: str, since: float, until: float | None = None) -> NodeEvidence:
        """What the lines stamped in [since, until] prove about node `key`."""
        proven: set[Test] = set()
        anon_proven: set[Test] = set()
        failures: list[ResultLine] = []
        unrecognised: list[ResultLine] = []
        anon_failures: list[ResultLine] = []
        anon_unrecognised: list[ResultLine] = []
        own = anon_passes = 0
        for line, owner in zip(self.lines, self.owners, strict=True):
            if line.at < since or (until is not None and line.at > until) or owner not in (key, None):
                continue
            if owner == key:
                own += 1
                if line.finding == Finding.PASS:
                    proven |= line.proves
                else:
                    (failures if line.finding == Finding.FAIL else unrecognised).append(line)
            elif line.finding == Finding.PASS:
                anon_passes += 1
                anon_proven |= line.proves
            else:
                (anon_failures if line.finding == Finding.FAIL else anon_unrecognised).append(line)
        return NodeEvidence(
            proven=frozenset(proven),
            failures=tuple(failures),
            unrecognised=tuple(unrecognised),
            own_lines=own,
            anonymous_failures=tuple(anon_failures),
            anonymous_unrecognised=tuple(anon_unrecognised),
            anonymous_proven=frozenset(anon_proven),
            anonymous_passes=anon_passes,
        )
