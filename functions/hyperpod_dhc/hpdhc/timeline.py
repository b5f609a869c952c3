"""A picture of a run: every node of a cluster, by instance group, against time, as one self-contained HTML page.

The picture is built from node histories, the documents of the API's `GET /clusters/{cluster}/nodes/{node}` (what
`hpdhc history` prints): `hpdhc timeline CLUSTER` fetches them from a deployed stack, `hpdhc simulate --timeline
FILE` makes the same documents from the twin's records. From each document:

- segments: each history entry's state, mapped onto `STATES`, starts a segment that lasts until an entry with
  another state (the last one until the end of the picture); the entries' reasons, the controller's decision
  lines, are what hovering the segment shows. `recovery_due` is `recovery-due` (failed, its recovery
  due) or `held` (its recovery held by the breaker, a capacity hold or a budget: the reason says `... held: ...`);
- marks: the node's reboots and replacements (`actions`), by the controller or by HyperPod, each with the lines
  that led to it;
- rounds: the entries' triggers that are round ids (`<cluster>-r000042`): a round spans its first to its last
  entry in any node's history, and its nodes are those it claimed (moved into a check).

Histories keep their last 50 entries: a node older than that starts where its history does. Times are seconds
after the timeline's origin (the twin's start, or the first entry). `to_json` is the data the page embeds,
`hyperpod_dhc.hpdhc.timeline_page` draws it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

FORMAT_VERSION = 1
# Every state a segment may have, in the legend's order; `unknown` is a controller state this client does not know.
STATES: tuple[str, ...] = (
    "waiting", "in-check", "recovery-due", "held", "recovering", "passed", "failed", "quarantined", "inconclusive",
    "gone", "shadowed", "unknown",
)  # fmt: skip
VERDICT_STATES = frozenset({"passed", "failed", "quarantined", "inconclusive", "shadowed"})
STATE_OF = {
    "pending": "waiting",
    "checking": "in-check",
    "recovery_due": "recovery-due",
    "recovering": "recovering",
    "passed": "passed",
    "failed": "failed",
    "quarantined": "quarantined",
    "inconclusive": "inconclusive",
    "gone": "gone",
    "shadowed": "shadowed",
}
ROUND_ID = re.compile(r"-r\d{6,}$")
HELD = " held: "  # in a reason: `replace held: <why>` (domain/safety.py)
Clock = Literal["relative", "utc"]
Json = dict[str, Any]


@dataclass(frozen=True)
class Line:
    """One decision line of a node: when, and the controller's reason (with its trigger, if any)."""

    at: float
    text: str


@dataclass
class Segment:
    start: float
    end: float
    state: str  # one of STATES
    lines: list[Line]  # the history entries within it; the first one began it
    round: str | None = None  # the round of the entry that began it, if a round's
    instance_id: str | None = None


@dataclass(frozen=True)
class Mark:
    at: float
    action: str  # reboot | replace | hyperpod (HyperPod's own) | what a newer controller records
    actor: str  # controller | hyperpod
    instance_id: str | None
    line: str


@dataclass
class Node:
    key: str
    group: str
    instance_ids: list[str]
    state: str | None  # the controller's state now (None: no record)
    verdict: str | None
    evidence: list[str]
    segments: list[Segment] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @property
    def final(self) -> str | None:
        """The state of its last segment: its verdict, or where it is at the end of the picture."""
        return self.segments[-1].state if self.segments else None


@dataclass
class Group:
    name: str
    nodes: list[Node]


@dataclass(frozen=True)
class Round:
    id: str
    start: float
    end: float
    nodes: int  # nodes it claimed (moved into a check)


@dataclass
class Timeline:
    """Every time is in seconds after `origin` (epoch seconds); the picture spans `start` to `end`."""

    cluster: str
    origin: float
    start: float
    end: float
    clock: Clock  # the axis: `t+1h30` after the origin, or UTC times
    source: str
    groups: list[Group]
    rounds: list[Round]

    @property
    def nodes(self) -> list[Node]:
        return [n for g in self.groups for n in g.nodes]


# ---------------------------------------------------------------------------------------------------- building


def state_of(entry: Json) -> str:
    """A history entry's state on the picture."""
    state = STATE_OF.get(str(entry.get("state")), "unknown")
    if state == "recovery-due" and HELD in str(entry.get("reason", "")):
        return "held"
    return state


def build(
    cluster: str,
    documents: Iterable[Json],
    end: float,
    origin: float | None = None,
    clock: Clock = "utc",
    source: str = "",
    since_s: float | None = None,
) -> Timeline:
    """The timeline of a cluster from node documents (`GET /clusters/{cluster}/nodes/{node}`), up to `end` (epoch
    s). `origin`: what times count from (default: the first entry); `since_s`: only the last that many seconds."""
    docs = list(documents)
    times = [float(h["at"]) for d in docs for h in d.get("history", [])]
    first = min([*times, end]) if origin is None else origin
    start = first if since_s is None else max(first, end - since_s)
    by_group: dict[str, list[tuple[float, Node]]] = {}
    spans: dict[str, list[float]] = {}
    claimed: dict[str, set[str]] = {}
    for doc in docs:
        node = _node(doc, end)
        _rounds_of(doc, spans, claimed)
        node = _clipped(node, start)
        at = node.segments[0].start if node.segments else math.inf
        by_group.setdefault(node.group, []).append((at, node))
    rounds = [
        Round(rid, max(lo, start) - first, hi - first, len(claimed.get(rid, ())))
        for rid, (lo, hi) in sorted(spans.items(), key=lambda kv: (kv[1][0], kv[0]))
        if hi >= start
    ]
    groups = [
        Group(name, [_relative(n, first) for _, n in sorted(nodes, key=lambda an: (an[0], an[1].key))])
        for name, nodes in sorted(by_group.items())
    ]
    return Timeline(cluster, first, start - first, max(end, start) - first, clock, source, groups, rounds)


def last_change(documents: Iterable[Json]) -> float | None:
    """The time of the latest history entry or action of any of these node documents (None: none)."""
    times = [float(e["at"]) for d in documents for key in ("history", "actions") for e in d.get(key) or []]
    return max(times, default=None)


def _node(doc: Json, end: float) -> Node:
    history = sorted(doc.get("history", []), key=lambda h: float(h["at"]))
    node = Node(
        key=str(doc.get("node") or doc.get("logical_id") or ""),
        group=str(doc.get("group") or "-"),
        instance_ids=[
            str(i) for i in doc.get("instance_ids") or ([doc["instance_id"]] if doc.get("instance_id") else [])
        ],
        state=doc.get("state"),
        verdict=doc.get("verdict"),
        evidence=[str(e) for e in doc.get("evidence") or []],
    )
    for entry in history:
        at, state = float(entry["at"]), state_of(entry)
        trigger = entry.get("trigger")
        text = str(entry.get("reason", "")) + (f" [{trigger}]" if trigger else "")
        current = node.segments[-1] if node.segments else None
        if current is not None and current.state == state:
            current.lines.append(Line(at, text))
            continue
        if current is not None:
            current.end = at
        is_round = isinstance(trigger, str) and ROUND_ID.search(trigger) is not None
        node.segments.append(
            Segment(at, end, state, [Line(at, text)], trigger if is_round else None, entry.get("instance_id"))
        )
    if node.segments:
        last = node.segments[-1]
        last.end = max(last.end, last.start)
        if last.state == "recovery-due" and doc.get("held_by"):
            last.state = "held"
    for action in doc.get("actions") or []:
        node.marks.append(_mark(action, history))
    return node


def _mark(action: Json, history: list[Json]) -> Mark:
    """A reboot or replacement, with the line that made it due and the lines of the moment it was asked for."""
    at = float(action["at"])
    before = [h for h in history if float(h["at"]) < at][-1:]
    due = [h for h in before if h.get("state") == "recovery_due"]  # failed earlier: a grace, a hold, a busy node
    reasons = [str(h.get("reason", "")) for h in [*due, *(h for h in history if float(h["at"]) == at)]]
    return Mark(
        at=at,
        action=str(action.get("action")),
        actor=str(action.get("actor")),
        instance_id=action.get("instance_id"),
        line="; ".join(dict.fromkeys(r for r in reasons if r)),
    )


def _rounds_of(doc: Json, spans: dict[str, list[float]], claimed: dict[str, set[str]]) -> None:
    previous = None
    for entry in sorted(doc.get("history", []), key=lambda h: float(h["at"])):
        trigger, at, state = entry.get("trigger"), float(entry["at"]), entry.get("state")
        if isinstance(trigger, str) and ROUND_ID.search(trigger):
            span = spans.setdefault(trigger, [at, at])
            span[0], span[1] = min(span[0], at), max(span[1], at)
            if state == "checking" and previous != "checking":
                claimed.setdefault(trigger, set()).add(str(doc.get("node")))
        previous = state


def _clipped(node: Node, start: float) -> Node:
    """Only what happened from `start` on (segments cut there)."""
    segments = node.segments  # the last lasts until `end`
    node.segments = [s for i, s in enumerate(segments) if s.end > start or s.start >= start or i == len(segments) - 1]
    for s in node.segments:
        if s.start < start:  # of the lines before `start`, the last one: why the node is in that state
            before = [line for line in s.lines if line.at < start][-1:]
            s.start, s.lines = start, before + [line for line in s.lines if line.at >= start]
    node.marks = [m for m in node.marks if m.at >= start]
    return node


def _relative(node: Node, origin: float) -> Node:
    def r(t: float) -> float:
        return round(t - origin, 1)

    for s in node.segments:
        s.start, s.end = r(s.start), r(s.end)
        s.lines = [Line(r(line.at), line.text) for line in s.lines]
    node.marks = [Mark(r(m.at), m.action, m.actor, m.instance_id, m.line) for m in node.marks]
    return node


# ---------------------------------------------------------------------------------------------------- the data


def to_json(t: Timeline) -> Json:
    """The timeline as the page embeds it (`id="timeline-data"`). Decision lines repeat across nodes (`claimed for a
    check round [demo-r000001]`): each text is in `texts` once, and a line or a mark names it by its index there."""
    texts: dict[str, int] = {}

    def text(value: str) -> int:
        return texts.setdefault(value, len(texts))

    groups = [
        {
            "name": g.name,
            "nodes": [
                {
                    "key": n.key,
                    "instance_ids": n.instance_ids,
                    "state": n.state,
                    "verdict": n.verdict,
                    "final": n.final,
                    "evidence": [text(e) for e in n.evidence],
                    "segments": [
                        {
                            "start": _num(s.start),
                            "end": _num(s.end),
                            "state": s.state,
                            "round": s.round,
                            "instance_id": s.instance_id,
                            "lines": [[_num(line.at), text(line.text)] for line in s.lines],
                        }
                        for s in n.segments
                    ],
                    "marks": [
                        {
                            "at": _num(m.at),
                            "action": m.action,
                            "actor": m.actor,
                            "instance_id": m.instance_id,
                            "line": text(m.line),
                        }
                        for m in n.marks
                    ],
                }
                for n in g.nodes
            ],
        }
        for g in t.groups
    ]
    return {
        "version": FORMAT_VERSION,
        "cluster": t.cluster,
        "source": t.source,
        "origin": t.origin,
        "start": _num(t.start),
        "end": _num(t.end),
        "clock": t.clock,
        "states": list(STATES),
        "rounds": [{"id": r.id, "start": _num(r.start), "end": _num(r.end), "nodes": r.nodes} for r in t.rounds],
        "groups": groups,
        "texts": list(texts),
    }


def _num(t: float) -> float:
    """A time to one decimal, written without `.0` when whole (the page's data is most of its size)."""
    rounded = round(t, 1)
    return int(rounded) if rounded == int(rounded) else rounded


def from_json(data: Json) -> Timeline:
    """`to_json`'s inverse."""
    texts: list[str] = data["texts"]
    groups = [
        Group(
            g["name"],
            [
                Node(
                    key=n["key"],
                    group=g["name"],
                    instance_ids=n["instance_ids"],
                    state=n["state"],
                    verdict=n["verdict"],
                    evidence=[texts[i] for i in n["evidence"]],
                    segments=[
                        Segment(
                            s["start"],
                            s["end"],
                            s["state"],
                            [Line(at, texts[i]) for at, i in s["lines"]],
                            s["round"],
                            s["instance_id"],
                        )
                        for s in n["segments"]
                    ],
                    marks=[
                        Mark(m["at"], m["action"], m["actor"], m["instance_id"], texts[m["line"]]) for m in n["marks"]
                    ],
                )
                for n in g["nodes"]
            ],
        )
        for g in data["groups"]
    ]
    rounds = [Round(r["id"], r["start"], r["end"], r["nodes"]) for r in data["rounds"]]
    return Timeline(
        data["cluster"], data["origin"], data["start"], data["end"], data["clock"], data["source"], groups, rounds
    )


def summary(t: Timeline) -> str:
    """`36 nodes in 2 groups, 5 rounds, 12 actions`."""
    nodes = t.nodes
    marks = sum(len(n.marks) for n in nodes)
    return (
        f"{len(nodes)} node(s) in {len(t.groups)} group(s), {len(t.rounds)} round(s), {marks} reboot(s) and "
        f"replacement(s)"
    )
