"""One read of a cluster's result log, attributed and classified once: what every consumer of a look (verdicts,
late reversals, the cluster's readings) asks of the lines (`hyperpod_dhc.deephealth.evidence` holds the rules).

Each record is classified with the operator patterns of its owner's instance group (`result_patterns`, per
cluster and group); a record on a stream that is no node's with the cluster's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState, Verdict, short_hostname
from hyperpod_dhc.deephealth.evidence.attribute import Named, NodeEvidence, Ownership, StreamIndex, node_evidence
from hyperpod_dhc.deephealth.evidence.classify import Finding, classified
from hyperpod_dhc.deephealth.evidence.records import Event, assemble
from hyperpod_dhc.deephealth.evidence.rules import NO_OPERATOR_RULES, Kind, OperatorRules

Placed = tuple[Finding, Ownership, str | None]  # a finding, its stream's ownership, the owner's key


def named(record: NodeRecord) -> Named:
    """What a record's stream may be named by now, and by what it was named before."""
    hostname = short_hostname(record.hostname)
    current = (record.instance_id, record.logical_id, hostname)
    past = tuple([n for n in (*record.instance_ids, *record.hostnames) if n not in current])
    return Named(record.key, record.instance_id, record.logical_id, hostname, past, record.state != NodeState.GONE)


def failures_from(record: NodeRecord) -> float | None:
    """Since when a failure of the node's own counts against its current check: its last pass, its last recovery
    action (a reboot may cure it), or its first sight, whichever is latest; its earlier checks that did not pass
    are in between (a failure of theirs delivered late still fails the node)."""
    started = record.check_started_at
    passes = [o.at for o in record.outcomes if o.verdict == Verdict.PASSED and started is not None and o.at < started]
    actions = [a.at for a in record.actions if started is not None and a.at <= started]
    return max([record.created_at, *passes, *actions]) if started is not None else None


def previous_verdict_at(record: NodeRecord) -> float | None:
    """When the node's last verdict before its current check was made: its lines before then are that check's."""
    started = record.check_started_at
    earlier = [o.at for o in record.outcomes if started is not None and o.at < started]
    return max(earlier) if earlier else None


@dataclass(frozen=True)
class ResultLog:
    """The records of a cluster's log group stamped since `since`, as read at `read_at`, each classified and
    placed. `complete`: the look knew every node of the cluster (else a stream naming someone unknown is unplaced).
    `failures_before`: the records stamped before it are a server-filtered scan's hits (math.inf: the whole read
    was), of which only failures are kept: a filter's hits are a prefilter's, and never pass anyone."""

    placed: tuple[Placed, ...]
    since: float
    read_at: float
    complete: bool = True
    failures_before: float | None = None
    groups: Mapping[str, str] = field(default_factory=dict)  # record key -> instance group

    @classmethod
    def of(
        cls,
        events: Iterable[Event],
        records: Iterable[NodeRecord],
        snapshots: Iterable[NodeSnapshot] = (),
        rules: Callable[[str | None], OperatorRules] = lambda group: NO_OPERATOR_RULES,
        *,
        since: float,
        read_at: float,
        complete: bool = True,
        failures_before: float | None = None,
    ) -> ResultLog:
        records = list(records)
        recorded = {r.key for r in records}
        nodes = [named(r) for r in records]
        nodes += [
            Named(s.key, s.instance_id, s.logical_id, short_hostname(s.hostname))
            for s in snapshots
            if s.key and s.key not in recorded
        ]
        groups = {r.key: r.group for r in records} | {s.key: s.group for s in snapshots if s.key not in recorded}
        index = StreamIndex.of(nodes, complete=complete)
        placed: list[Placed] = []
        by_group: dict[str | None, OperatorRules] = {}
        owners: dict[str, tuple[Ownership, str | None]] = {}
        for record in assemble(events):
            if record.stream not in owners:
                owners[record.stream] = index.owner(record.stream)
            how, owner = owners[record.stream]
            group = groups.get(owner) if how == Ownership.OWN and owner else None
            if group not in by_group:
                by_group[group] = rules(group)
            finding = classified(record, by_group[group])
            if failures_before is not None and record.at < failures_before and finding.kind != Kind.FAILURE:
                continue
            placed.append((finding, how, owner))
        return cls(tuple(placed), since, read_at, complete, failures_before, groups)

    @property
    def read_whole(self) -> bool:
        """Some of the read was every event (not only a filter's hits)."""
        return self.failures_before != math.inf

    def unfiltered(self) -> Iterable[Placed]:
        """The records of the part of the read that was every event: what the cluster's readings count."""
        edge = self.failures_before
        return (p for p in self.placed if edge is None or p[0].record.at >= edge)

    def evidence(self, record: NodeRecord, revisit_s: float | None = None) -> NodeEvidence:
        """What the read says about the node's current (or, once passed, last) check; `revisit_s` closes the
        failure edge of a passed node at the end of its revisit."""
        started = record.check_started_at
        if started is None:
            return NodeEvidence()
        fail_edge = None
        if record.state == NodeState.PASSED and record.verdict == Verdict.PASSED and revisit_s is not None:
            fail_edge = (record.verdict_at or started) + revisit_s
        return node_evidence(
            (*self._own.get(record.key, ()), *self._strangers_failures),
            record.key,
            started,
            record.check_left_at,
            previous_verdict_at(record),
            fail_edge,
            failures_from(record),
        )

    @cached_property
    def _own(self) -> dict[str, list[Placed]]:
        """The records of each node's own stream, by the node's key, in order."""
        out: dict[str, list[Placed]] = {}
        for placed in self.placed:
            if placed[1] == Ownership.OWN and placed[2] is not None:
                out.setdefault(placed[2], []).append(placed)
        return out

    @cached_property
    def _strangers_failures(self) -> tuple[Placed, ...]:
        """The failures on streams that are no node's or no known node's: all a node's evidence counts besides its
        own stream's records (`node_evidence`). Indexed once a read: a look at a round of 1,000 nodes walked every
        record once a node."""
        strangers = (Ownership.FOREIGN, Ownership.UNPLACED)
        return tuple(p for p in self.placed if p[1] in strangers and p[0].kind == Kind.FAILURE)

    def foreign(self) -> dict[str, list[Finding]]:
        """The records on streams that are no node's, by stream."""
        out: dict[str, list[Finding]] = {}
        for finding, how, _ in self.placed:
            if how == Ownership.FOREIGN:
                out.setdefault(finding.record.stream, []).append(finding)
        return out

    def owned(self) -> Iterable[tuple[Finding, str]]:
        """Every record of a node's own stream, with the node's key."""
        return ((f, owner) for f, how, owner in self.placed if how == Ownership.OWN and owner is not None)
