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
    hostnames its instances had. A private IP, and so a hostname, can be handed out again: a gone node's hostnames
    are its own only for lines stamped while it lived (`past`), and a hostname two live nodes hold names nobody."""

    owners: dict[str, str] = field(default_factory=dict)
    past: dict[str, tuple[tuple[float, float, str], ...]] = field(default_factory=dict)  # name -> (from, to, key)

    @classmethod
    def of(cls, records: Iterable[NodeRecord], snapshots: Iterable[NodeSnapshot] = ()) -> NameIndex:
        owners: dict[str, str] = {}
        past: dict[str, tuple[tuple[float, float, str], ...]] = {}

        def add(name: str | None, key: str) -> None:
            if name:
                owners[name] = key if owners.get(name, key) == key else AMBIGUOUS

        for r in records:
            for name in (*r.instance_ids, r.instance_id, r.logical_id and r.logical_id.lower()):
                add(name, r.key)
            hostnames = {n for n in (*r.hostnames, short_hostname(r.hostname)) if n}
            for name in hostnames:
                if r.state == NodeState.GONE:
                    past[name] = (*past.get(name, ()), (r.created_at, r.updated_at, r.key))
                else:
                    add(name, r.key)
        for s in snapshots:
            add(s.instance_id, s.key)
            add(short_hostname(s.hostname), s.key)
        return cls(owners, past)

    def owner(self, line: ResultLine) -> str | None:
        """The node whose line this is, or None (anonymous)."""
        for names in (line.stream_names, line.field_names, line.text_names):
            found = self._resolve(names, line.at)
            if found is not None:
                return found or None  # "": it names someone unknown, or several: anonymous
        return None

    def names_unknown(self, line: ResultLine) -> bool:
        """The line is anonymous because it names someone no record knows (not because it names nobody)."""
        for names in (line.stream_names, line.field_names, line.text_names):
            known = [self._owner_of(n, line.at) for n in names]
            if any(k is None and not _uuid(n) for n, k in zip(names, known, strict=True)):
                return True
            if any(k is not None for k in known):
                return False
        return False

    def names_peer(self, line: ResultLine, owner: str | None) -> bool:
        """The line is `owner`'s and its text names another node a record knows (a multi-node test's peer)."""
        others = (self._owner_of(n, line.at) for n in line.text_names)
        return owner is not None and any(k not in (None, AMBIGUOUS, owner) for k in others)

    def stream_kind(self, line: ResultLine) -> str:
        """What the line's stream is named by (domain/readings.STREAM_KINDS)."""
        names = line.stream_names
        if any(self._owner_of(n, line.at) is None and not _uuid(n) for n in names):
            return "unknown-host"
        known = sorted(n for n in names if self._owner_of(n, line.at))
        if not known:
            return "opaque"
        if INSTANCE_ID.fullmatch(known[0]):
            return "instance-id"
        return "hostname" if HOSTNAME.fullmatch(known[0]) else "logical-id"

    def _owner_of(self, name: str, at: float) -> str | None:
        """Whose `name` was at `at`: a gone node's while it lived, else a live record's; AMBIGUOUS for two."""
        then = {key for start, end, key in self.past.get(name, ()) if start <= at <= end}
        if then:
            return then.pop() if len(then) == 1 else AMBIGUOUS
        return self.owners.get(name)

    def _resolve(self, names: frozenset[str], at: float) -> str | None:
        """The one node `names` name; "" when they name someone unknown, or more than one node; None when they
        name nobody. A UUID nobody knows is an opaque stream id, not a name."""
        owners = {n: self._owner_of(n, at) for n in names}
        known = {k for k in owners.values() if k is not None}
        unknown = any(k is None and not _uuid(n) for n, k in owners.items())
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
    anonymous_nccl_nodes: int = 0  # the largest node set an anonymous NCCL summary in the window says it tested
    # Lines naming someone the look could not know (it had no listing of the whole cluster): only a look at the
    # whole cluster can tell whether they are anonymous.
    unresolved: int = 0

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
            and not self.anonymous_unrecognised
        )


@dataclass(frozen=True)
class ResultLog:
    """The result lines of a cluster's log group stamped since `since`, as read at `read_at`, each attributed."""

    lines: tuple[ResultLine, ...]
    since: float
    read_at: float
    index: NameIndex = field(default_factory=NameIndex)
    # Whether the index knows every node listed (a look at the whole cluster) or only the records and the nodes a
    # poll listed (then a line naming someone unknown may be a node of a group nobody records).
    names_complete: bool = True
    owners: tuple[str | None, ...] = field(init=False)
    unknown: tuple[bool, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "owners", tuple(self.index.owner(line) for line in self.lines))
        unknown = (
            not self.names_complete and owner is None and self.index.names_unknown(line)
            for line, owner in zip(self.lines, self.owners, strict=True)
        )
        object.__setattr__(self, "unknown", tuple(unknown))

    def evidence(self, key: str, since: float, until: float | None = None) -> NodeEvidence:
        """What the lines stamped in [since, until] prove about node `key`."""
        proven: set[Test] = set()
        anon_proven: set[Test] = set()
        failures: list[ResultLine] = []
        unrecognised: list[ResultLine] = []
        anon_failures: list[ResultLine] = []
        anon_unrecognised: list[ResultLine] = []
        own = anon_passes = nccl_nodes = unresolved = 0
        for line, owner, unknown in zip(self.lines, self.owners, self.unknown, strict=True):
            if line.at < since or (until is not None and line.at > until) or owner not in (key, None):
                continue
            if unknown:
                unresolved += 1
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
                nccl_nodes = max(nccl_nodes, line.nccl_nodes or 0)
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
            anonymous_nccl_nodes=nccl_nodes,
            unresolved=unresolved,
        )
