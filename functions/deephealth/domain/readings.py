"""What a cluster actually does where AWS does not document it, as the controller observed it: how its result
streams are named, the line shapes it writes (with counts, and an example of each), the lag of its lines, the
statuses its nodes show after a failed check, the busy errors it answers with. One record per cluster.

Two things follow from it. The **settle time** (how long after a node left its check its lines are read) comes from
the lag measured here: a cluster with no history uses the policy's conservative `log_settle_s`; once
MIN_LAG_SAMPLES lines were measured it is the largest lag of the last LAG_WINDOW_S with a margin, never below
`log_settle_floor_s`; a line later than the settle time then in force raises it and is counted. The **revisit time**
(how long a passed node's window is read again) is the policy's `revisit_s`, or twice the largest lag of the last day
(at most a day).
And `as_fidelity()` writes the observations as the twin's `fidelity` block, so a real cluster's first hour
becomes a scenario anyone can replay (tests/fakes/readings.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deephealth.domain.policy import GroupPolicy
from deephealth.domain.result_lines import FAILURE_LEVELS, Finding, ResultLine

LAG_BUCKETS = (5, 15, 30, 60, 120, 180, 300, 600, 1800, 3600, 14 * 86400)  # upper bounds (s), CloudWatch's 14 days
LAG_WINDOW_S = 24 * 3600  # the lags the settle time follows: the largest of each hour, for a day
MIN_LAG_SAMPLES = 20  # fewer measured lines in the window: the policy's conservative settle time stays
SETTLE_MARGIN = 1.5
SETTLE_PAD_S = 10
REVISIT_CAP_S = 86400
EXAMPLE_LIMIT = 300
STREAM_KINDS = ("instance-id", "hostname", "logical-id", "opaque", "unknown-host")
# What an alert has already been raised for, once per cluster: "shape:<shape>", NO_PASS_LINES, "operation:<id>".
NO_PASS_LINES = "no-pass-lines"
SILENT_NODES_FOR_ALERT = 3  # nodes back to Running with no line about them before "logs no pass lines" is said


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Seen(_Model):
    count: int = 0
    example: str = ""


@dataclass(frozen=True)
class SeenLine:
    """A result line as a look attributed it: how its stream is named, whose it is (None: anonymous), and whether
    it names another known node than its owner (a peer)."""

    line: ResultLine
    stream_kind: str
    owner: str | None
    names_peer: bool = False


class LagHour(_Model):
    count: int = 0
    max_s: float = 0.0


class ClusterReadings(_Model):
    cluster: str
    cluster_id: str | None = None
    version: int = 0
    # Lines ingested at or before this (epoch s) have been counted: a look that re-reads them counts nothing twice.
    ingested_through: float = 0.0
    lines: int = 0
    streams: dict[str, int] = Field(default_factory=dict)  # STREAM_KINDS -> lines
    formats: dict[str, int] = Field(default_factory=dict)  # json | plain -> lines
    instance_in_line: dict[str, int] = Field(default_factory=dict)  # field | message | none -> lines
    shapes: dict[str, Seen] = Field(default_factory=dict)  # "<level> <pattern>" -> count and an example
    pass_lines: int = 0
    peer_lines: int = 0  # lines on one node's stream that name another node
    anonymous_nccl: int = 0  # NCCL summaries that name no node
    lag_histogram: dict[str, int] = Field(default_factory=dict)  # "<= N s" -> lines
    lag_hours: dict[str, LagHour] = Field(default_factory=dict)  # the hour's start (epoch s) -> lines, largest lag
    lag_min_s: float | None = None
    lag_max_s: float = 0.0
    late_lines: int = 0  # lines that arrived later than the settle time in force when they were read
    statuses_after_failure: dict[str, int] = Field(default_factory=dict)
    busy_errors: dict[str, Seen] = Field(default_factory=dict)  # error code -> count and its message
    silent_nodes: int = 0  # nodes back to Running after their check with no line about them
    alerted: list[str] = Field(default_factory=list)

    # -- what follows from it -----------------------------------------------------------------------------
    def settle_s(self, policy: GroupPolicy, now: float) -> float:
        recent = self._recent(now)
        if sum(h.count for h in recent) < MIN_LAG_SAMPLES:
            # Too few measured: the policy's conservative start, raised by any lag already seen beyond it.
            measured = max(policy.log_settle_s, _with_margin(self.lag_max_s) if self.lag_max_s else 0)
        else:
            measured = _with_margin(max(h.max_s for h in recent))
        return float(min(policy.log_settle_max_s, max(policy.log_settle_floor_s, measured)))

    def revisit_s(self, policy: GroupPolicy, now: float) -> float:
        """The policy's, or twice the largest lag of the last day (at most a day: one line back-filled days late
        must not keep every node waiting as long)."""
        measured = math.ceil(2 * max((h.max_s for h in self._recent(now)), default=0.0))
        return float(max(policy.revisit_s, min(REVISIT_CAP_S, measured)))

    def _recent(self, now: float) -> list[LagHour]:
        return [h for start, h in self.lag_hours.items() if float(start) + 3600 > now - LAG_WINDOW_S]

    # -- what a look adds ---------------------------------------------------------------------------------
    def with_lines(self, lines: Iterable[SeenLine], settle_in_force: float) -> tuple[ClusterReadings, list[str]]:
        """The readings with the lines not counted yet (ingested after `ingested_through`); and the shapes seen for
        the first time."""
        fresh = [seen for seen in lines if (seen.line.ingested_at or 0) > self.ingested_through]
        if not fresh:
            return self, []
        data = self.model_dump()
        streams, formats, instance = Counter(self.streams), Counter(self.formats), Counter(self.instance_in_line)
        shapes = {k: v.model_copy() for k, v in self.shapes.items()}
        histogram = Counter(self.lag_histogram)
        hours = {k: v.model_copy() for k, v in self.lag_hours.items()}
        new_shapes: list[str] = []
        for attributed in fresh:
            line, owner = attributed.line, attributed.owner
            streams[attributed.stream_kind] += 1
            formats["json" if line.json_format else "plain"] += 1
            instance["field" if line.field_names else "message" if line.text_names else "none"] += 1
            seen = shapes.get(line.shape)
            if seen is None:
                seen = shapes[line.shape] = Seen(example=line.text[:EXAMPLE_LIMIT])
                new_shapes.append(line.shape)
            seen.count += 1
            data["pass_lines"] += line.finding == Finding.PASS
            data["peer_lines"] += attributed.names_peer
            data["anonymous_nccl"] += owner is None and line.nccl_nodes is not None
            if (lag := line.lag_s) is not None:
                histogram[_bucket(lag)] += 1
                hour = hours.setdefault(str(int((line.ingested_at or 0.0) // 3600 * 3600)), LagHour())
                hour.count, hour.max_s = hour.count + 1, max(hour.max_s, round(lag, 1))
                data["lag_min_s"] = lag if data["lag_min_s"] is None else min(data["lag_min_s"], lag)
                data["lag_max_s"] = max(data["lag_max_s"], lag)
                data["late_lines"] += lag > settle_in_force
        data.update(
            lines=self.lines + len(fresh),
            ingested_through=max(self.ingested_through, *(seen.line.ingested_at or 0.0 for seen in fresh)),
            streams=dict(streams),
            formats=dict(formats),
            instance_in_line=dict(instance),
            shapes={k: v.model_dump() for k, v in shapes.items()},
            lag_histogram=dict(histogram),
            lag_hours={k: v.model_dump() for k, v in sorted(hours.items(), key=lambda kv: float(kv[0]))[-25:]},
        )
        return ClusterReadings.model_validate(data), new_shapes

    def with_counts(
        self,
        statuses_after_failure: Iterable[str] = (),
        silent_nodes: int = 0,
        busy_error: tuple[str, str] | None = None,
        alerted: Iterable[str] = (),
    ) -> ClusterReadings:
        statuses = Counter(self.statuses_after_failure)
        statuses.update(statuses_after_failure)
        busy = {k: v.model_copy() for k, v in self.busy_errors.items()}
        if busy_error is not None:
            code, message = busy_error
            seen = busy.setdefault(code or "-", Seen())
            seen.count, seen.example = seen.count + 1, message[:EXAMPLE_LIMIT]
        return self.model_copy(
            update={
                "statuses_after_failure": dict(statuses),
                "silent_nodes": self.silent_nodes + silent_nodes,
                "busy_errors": busy,
                "alerted": list(dict.fromkeys([*self.alerted, *alerted])),
            }
        )

    def no_pass_lines(self) -> bool:
        """The cluster logs no pass line (as far as seen): nodes came back from their checks with nothing said."""
        return self.pass_lines == 0 and self.silent_nodes >= SILENT_NODES_FOR_ALERT

    # -- as a twin scenario's fidelity block ----------------------------------------------------------------
    def as_fidelity(self) -> dict[str, Any]:
        """The observations as `tests/fakes/readings.py` keys: only what was seen, so the rest keeps the fake's
        defaults."""
        out = {**self._naming(), **self._lines()}
        if self.lag_min_s is not None and self.lag_max_s > 0:
            out["log_lag_s"] = [math.floor(self.lag_min_s), math.ceil(self.lag_max_s)]
        if self.statuses_after_failure:
            status = Counter(self.statuses_after_failure).most_common(1)[0][0]
            if status != "Running":
                out["failed_status"] = status
        if self.busy_errors:
            code, seen = max(self.busy_errors.items(), key=lambda kv: kv[1].count)
            out["busy_error"] = {"code": code, "message": seen.example.replace(self.cluster, "{cluster}")}
        return out

    def _naming(self) -> dict[str, Any]:
        """How streams and lines name the node."""
        if not self.streams:
            return {}
        out: dict[str, Any] = {}
        kind = Counter(self.streams).most_common(1)[0][0]
        if kind == "unknown-host":
            out.update(result_stream="hostname", foreign_hostnames=True)
        elif kind != "instance-id":
            out["result_stream"] = kind
        instance = Counter(self.instance_in_line).most_common(1)[0][0]
        if instance != "none":
            out["result_line_instance"] = instance
        if self.peer_lines:
            out["peer_lines"] = True
        if self.anonymous_nccl:
            out["nccl_summary"] = True
        return out

    def _lines(self) -> dict[str, Any]:
        """The lines' format, whether there is one per test, how a failure and a pass are written."""
        out: dict[str, Any] = {}
        if self.formats and Counter(self.formats).most_common(1)[0][0] == "plain":
            out["result_format"] = "doc-plain"
        elif any(_pattern(s) in PER_TEST_PATTERNS for s in self.shapes):
            out["result_lines"] = "per-test"
        levels = {_level(s) for s in self.shapes if _pattern(s) == "failure"}
        if levels and not levels & FAILURE_LEVELS:
            out["failure_line"] = "warn"
        elif not levels and any(_pattern(s) == "dcgm-summary" for s in self.shapes) and self.statuses_after_failure:
            out["failure_line"] = "none"
        if self.no_pass_lines():
            out["pass_line"] = "none"
        return out


PER_TEST_PATTERNS = frozenset({"stress-ng", "gpu-pci", "efa-loopback", "dcgm-summary"})


def _with_margin(lag: float) -> int:
    return math.ceil(lag * SETTLE_MARGIN + SETTLE_PAD_S)


def _pattern(shape: str) -> str:
    return shape.split(" ", 1)[-1]


def _level(shape: str) -> str:
    return shape.split(" ", 1)[0]


def _bucket(lag: float) -> str:
    bound = next((b for b in LAG_BUCKETS if lag <= b), LAG_BUCKETS[-1])
    return f"<= {bound} s"
