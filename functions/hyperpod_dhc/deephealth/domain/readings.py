"""What a cluster actually does where AWS does not document it, as the controller observed it: how its result
streams are named, the record shapes it writes (level and the rule that placed them, with counts and an example of
each), the streams that are no node's, how late its records arrive, the statuses of nodes after a failed check,
the busy errors it answers with, and how many verdicts one unrecognised shape made inconclusive. One record per
cluster.

Two things follow from it. The **settle time** (how long after a node left its check its records are read)
follows the records' **lateness**: `ingestionTime - max(timestamp, check_left_at)`, how long after the node left its
check a record became readable (a record stamped at test time and shipped at the check's end is not late; its age
is not lateness). Samples decay with a half-life (LATENESS_HALF_LIFE_S), so one outlier weighs less every hour;
the settle time is their SETTLE_QUANTILE with a margin, within [`log_settle_floor_s`, `log_settle_max_s`], or the
policy's `log_settle_s` until MIN_LAG_WEIGHT was weighed. The **revisit time** (how long a passed node's window is
read again) is the policy's `revisit_s`, or twice the latest lateness that still weighs (at most a day).
And `as_fidelity()` writes the observations as the twin's `fidelity` block, so a real cluster's first hour,
unrecognised shapes included, becomes a scenario anyone can replay (tests/fakes/readings.py).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hyperpod_dhc.deephealth.domain.policy import GroupPolicy
from hyperpod_dhc.deephealth.evidence.classify import Finding
from hyperpod_dhc.deephealth.evidence.records import FAILURE_LEVELS
from hyperpod_dhc.deephealth.evidence.rules import Kind

LAG_BUCKETS = (5, 15, 30, 60, 120, 180, 300, 600, 1800, 3600, 7200, 14400, 14 * 86400)  # upper bounds (s)
LATENESS_HALF_LIFE_S = 6 * 3600
MIN_LAG_WEIGHT = 10.0  # decayed samples: with less weight, the policy's conservative settle time stays
SETTLE_QUANTILE = 0.99
REVISIT_MIN_WEIGHT = 0.05  # a bucket weighing less no longer moves the revisit time
SETTLE_MARGIN = 1.5
SETTLE_PAD_S = 10
REVISIT_CAP_S = 86400
EXAMPLE_LIMIT = 300
FOREIGN_KEPT = 50  # foreign streams remembered (each alerted once)
SHAPES_KEPT = 100  # shapes remembered; more unrecognised ones count as `<level> unrecognised: (other)`
STREAM_KINDS = ("instance-id", "hostname", "logical-id", "opaque", "unknown-host")
# What an alert has already been raised for, once per cluster: "shape:<shape>", NO_PASS_LINES, "operation:<id>",
# "foreign:<stream>", "inconclusive:<shape>".
NO_PASS_LINES = "no-pass-lines"
SILENT_NODES_FOR_ALERT = 3  # nodes back to Running with no record about them before "logs no pass lines" is said
# One unrecognised shape that made this share of the cluster's verdicts inconclusive (at least this many) is said.
INCONCLUSIVE_SHARE = 0.2
INCONCLUSIVE_MIN = 3
INSTANCE_FIELDS = ("instance_id", "instanceid", "instance", "node_id", "nodeid", "hostname", "host")
INSTANCE_IN_TEXT = re.compile(r"\bi-[0-9a-f]{8}(?:[0-9a-f]{9})?\b")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Seen(_Model):
    count: int = 0
    example: str = ""


class Bucket(_Model):
    weight: float = 0.0
    max_s: float = 0.0


@dataclass(frozen=True)
class SeenRecord:
    """A record as a look placed it: its finding, how its stream is named, whether the stream is no node's, and
    when its owner left its check (None: it had not, or the record is not a node's: no lateness sample)."""

    finding: Finding
    stream_kind: str
    foreign: bool = False
    left_at: float | None = None


class ClusterReadings(_Model):
    cluster: str
    cluster_id: str | None = None
    version: int = 0
    # Records ingested at or before this (epoch s) have been counted: a look that re-reads them counts nothing twice.
    ingested_through: float = 0.0
    lines: int = 0  # records counted
    streams: dict[str, int] = Field(default_factory=dict)  # STREAM_KINDS -> records
    formats: dict[str, int] = Field(default_factory=dict)  # json | plain -> records
    instance_in_line: dict[str, int] = Field(default_factory=dict)  # field | message | none -> records
    layouts: dict[str, int] = Field(default_factory=dict)  # one-event | multi-event | multi-line -> records
    shapes: dict[str, Seen] = Field(default_factory=dict)  # "<level> <rule>" -> count and an example
    pass_lines: int = 0
    foreign_streams: dict[str, Seen] = Field(default_factory=dict)  # stream -> records and an example
    lateness: dict[str, Bucket] = Field(default_factory=dict)  # "<= N s" -> decayed weight, largest lateness
    lateness_at: float = 0.0  # when the weights were last decayed
    lag_min_s: float | None = None  # lateness, as the settle time follows it
    lag_max_s: float = 0.0
    age_min_s: float | None = None  # ingestionTime - timestamp (what the twin's `log_lag_s` plays)
    age_max_s: float = 0.0
    late_lines: int = 0  # records later than the settle time in force when they were read
    statuses_after_failure: dict[str, int] = Field(default_factory=dict)
    busy_errors: dict[str, Seen] = Field(default_factory=dict)  # error code -> count and its message
    silent_nodes: int = 0  # nodes back to Running after their check with no record about them
    verdicts: int = 0  # verdicts made on records (for the inconclusive share)
    inconclusive_by_shape: dict[str, int] = Field(default_factory=dict)  # unrecognised shape -> verdicts it made
    alerted: list[str] = Field(default_factory=list)

    # -- what follows from it -----------------------------------------------------------------------------
    def settle_s(self, policy: GroupPolicy, now: float) -> float:
        buckets = self._decayed(now)
        total = sum(b.weight for b in buckets.values())
        if total < MIN_LAG_WEIGHT:
            # Too little weighed: the policy's conservative start, raised by any lateness already seen beyond it.
            measured = max(policy.log_settle_s, _with_margin(self.lag_max_s) if self.lag_max_s else 0)
        else:
            measured = _with_margin(_quantile(buckets, total, SETTLE_QUANTILE))
        return float(min(policy.log_settle_max_s, max(policy.log_settle_floor_s, measured)))

    def revisit_s(self, policy: GroupPolicy, now: float) -> float:
        """The policy's, or twice the latest lateness that still weighs (at most a day: one record back-filled days
        late must not keep every node waiting as long)."""
        weighty = [b.max_s for b in self._decayed(now).values() if b.weight >= REVISIT_MIN_WEIGHT]
        measured = math.ceil(2 * max(weighty, default=0.0))
        return float(max(policy.revisit_s, min(REVISIT_CAP_S, measured)))

    def _decayed(self, now: float) -> dict[str, Bucket]:
        factor = _decay(now - self.lateness_at)
        return {k: Bucket(weight=b.weight * factor, max_s=b.max_s) for k, b in self.lateness.items()}

    # -- what a look adds ---------------------------------------------------------------------------------
    def with_records(
        self, seen: Iterable[SeenRecord], settle_in_force: float, now: float
    ) -> tuple[ClusterReadings, list[str], list[str]]:
        """The readings with the records not counted yet (ingested after `ingested_through`); the shapes seen for
        the first time; and the foreign streams seen for the first time."""
        fresh = [s for s in seen if (s.finding.record.ingested_at or 0) > self.ingested_through]
        if not fresh:
            return self, [], []
        data = self.model_dump()
        streams, formats = Counter(self.streams), Counter(self.formats)
        instance, layouts = Counter(self.instance_in_line), Counter(self.layouts)
        shapes = {k: v.model_copy() for k, v in self.shapes.items()}
        foreign = {k: v.model_copy() for k, v in self.foreign_streams.items()}
        buckets = self._decayed(now)
        new_shapes: list[str] = []
        new_foreign: list[str] = []
        for s in fresh:
            finding, record = s.finding, s.finding.record
            streams[s.stream_kind] += 1
            formats["json" if record.head.fields is not None else "plain"] += 1
            instance[_instance_in(finding)] += 1
            layouts[_layout(finding)] += 1
            shape = finding.shape
            if shape not in shapes and len(shapes) >= SHAPES_KEPT:
                shape = f"{record.level or '-'} unrecognised: (other)"
            counted = shapes.get(shape)
            if counted is None:
                counted = shapes[shape] = Seen(example=record.text[:EXAMPLE_LIMIT])
                new_shapes.append(shape)
            counted.count += 1
            data["pass_lines"] += finding.kind == Kind.PASS
            if s.foreign:
                stream = foreign.get(record.stream)
                if stream is None and len(foreign) < FOREIGN_KEPT:
                    stream = foreign[record.stream] = Seen(example=record.text[:EXAMPLE_LIMIT])
                    new_foreign.append(record.stream)
                if stream is not None:
                    stream.count += 1
            ingested = record.ingested_at
            if ingested is not None and not s.foreign:
                age = max(0.0, ingested - record.last_at)
                data["age_min_s"] = age if data["age_min_s"] is None else min(data["age_min_s"], age)
                data["age_max_s"] = max(data["age_max_s"], age)
            if s.left_at is not None and ingested is not None:
                late = max(0.0, ingested - max(record.last_at, s.left_at))
                bucket = buckets.setdefault(_bucket(late), Bucket())
                bucket.weight, bucket.max_s = bucket.weight + 1, max(bucket.max_s, round(late, 1))
                data["lag_min_s"] = late if data["lag_min_s"] is None else min(data["lag_min_s"], late)
                data["lag_max_s"] = max(data["lag_max_s"], late)
                data["late_lines"] += late > settle_in_force
        data.update(
            lines=self.lines + len(fresh),
            ingested_through=max(self.ingested_through, *(s.finding.record.ingested_at or 0.0 for s in fresh)),
            streams=dict(streams),
            formats=dict(formats),
            instance_in_line=dict(instance),
            layouts=dict(layouts),
            shapes={k: v.model_dump() for k, v in shapes.items()},
            foreign_streams={k: v.model_dump() for k, v in foreign.items()},
            lateness={k: b.model_dump() for k, b in buckets.items() if b.weight >= 0.001 or b.max_s >= 3600},
            lateness_at=now,
        )
        return ClusterReadings.model_validate(data), new_shapes, new_foreign

    def with_counts(
        self,
        statuses_after_failure: Iterable[str] = (),
        silent_nodes: int = 0,
        busy_error: tuple[str, str] | None = None,
        alerted: Iterable[str] = (),
        verdicts: int = 0,
        inconclusive_shapes: Iterable[str] = (),
    ) -> ClusterReadings:
        statuses = Counter(self.statuses_after_failure)
        statuses.update(statuses_after_failure)
        busy = {k: v.model_copy() for k, v in self.busy_errors.items()}
        if busy_error is not None:
            code, message = busy_error
            seen = busy.setdefault(code or "-", Seen())
            seen.count, seen.example = seen.count + 1, message[:EXAMPLE_LIMIT]
        by_shape = Counter(self.inconclusive_by_shape)
        by_shape.update(inconclusive_shapes)
        return self.model_copy(
            update={
                "statuses_after_failure": dict(statuses),
                "silent_nodes": self.silent_nodes + silent_nodes,
                "busy_errors": busy,
                "alerted": list(dict.fromkeys([*self.alerted, *alerted])),
                "verdicts": self.verdicts + verdicts,
                "inconclusive_by_shape": dict(by_shape),
            }
        )

    def no_pass_lines(self) -> bool:
        """The cluster logs no pass line (as far as seen): nodes came back from their checks with nothing said."""
        return self.pass_lines == 0 and self.silent_nodes >= SILENT_NODES_FOR_ALERT

    def costly_shapes(self) -> list[str]:
        """Unrecognised shapes that made more than INCONCLUSIVE_SHARE of the cluster's verdicts inconclusive."""
        return [
            shape
            for shape, count in sorted(self.inconclusive_by_shape.items())
            if count >= INCONCLUSIVE_MIN and count > INCONCLUSIVE_SHARE * max(1, self.verdicts)
        ]

    # -- as a twin scenario's fidelity block ----------------------------------------------------------------
    def as_fidelity(self) -> dict[str, Any]:
        """The observations as `tests/fakes/readings.py` keys: only what was seen, so the rest keeps the fake's
        defaults; every unrecognised shape's example is a line the replay's nodes write too (`extra_lines`)."""
        out = {**self._naming(), **self._lines()}
        if self.age_min_s is not None and self.age_max_s > 0:
            out["log_lag_s"] = [math.floor(self.age_min_s), math.ceil(self.age_max_s)]
        if self.statuses_after_failure:
            status = Counter(self.statuses_after_failure).most_common(1)[0][0]
            if status != "Running":
                out["failed_status"] = status
        if self.busy_errors:
            code, seen = max(self.busy_errors.items(), key=lambda kv: kv[1].count)
            cluster = re.compile(rf"(?<![\w-]){re.escape(self.cluster)}(?![\w-])")
            out["busy_error"] = {"code": code, "message": cluster.sub("{cluster}", seen.example)}
        unrecognised = [seen.example for shape, seen in sorted(self.shapes.items()) if " unrecognised" in shape]
        if unrecognised:
            out["extra_lines"] = unrecognised[:10]
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
        return out

    def _lines(self) -> dict[str, Any]:
        """The records' format and layout, how a failure and a pass are written."""
        out: dict[str, Any] = {}
        rules = {_rule(s) for s in self.shapes}
        if self.formats and Counter(self.formats).most_common(1)[0][0] == "plain":
            out["result_format"] = _doc_format(rules, Counter(self.layouts))
        elif rules & PER_TEST_RULES:
            out["result_lines"] = "per-test"
        levels = {_level(s) for s in self.shapes if _rule(s).startswith("builtin:failure")}
        if levels and not levels & FAILURE_LEVELS:
            out["failure_line"] = "warn"
        elif not levels and "builtin:dcgm-summary" in rules and self.statuses_after_failure:
            out["failure_line"] = "none"
        if self.no_pass_lines():
            out["pass_line"] = "none"
        return out


PER_TEST_RULES = frozenset({"builtin:stress-ng", "builtin:gpu-pci", "builtin:efa-loopback", "builtin:dcgm-summary"})


def _doc_format(rules: set[str], layouts: Counter[str]) -> str:
    """Which rendering of the documented lines the plain records look like."""
    if "builtin:progress" not in rules:
        return "doc-plain"
    if layouts.get("multi-event"):
        return "doc-2026-lines"
    if layouts.get("multi-line"):
        return "doc-2026-records"
    return "doc-2024"


def _layout(finding: Finding) -> str:
    record = finding.record
    if len(record.events) > 1:
        return "multi-event"
    return "multi-line" if "\n" in record.text.strip() else "one-event"


def _instance_in(finding: Finding) -> str:
    fields = finding.record.head.fields or {}
    if any(k.lower() in INSTANCE_FIELDS for k in fields):
        return "field"
    return "message" if INSTANCE_IN_TEXT.search(finding.record.head.message) else "none"


def _decay(elapsed: float) -> float:
    return 1.0 if elapsed <= 0 else 0.5 ** (elapsed / LATENESS_HALF_LIFE_S)


def _quantile(buckets: dict[str, Bucket], total: float, q: float) -> float:
    """The upper bound of the bucket where the weights reach `q` of `total` (its largest sample, when smaller)."""
    running = 0.0
    for bound in LAG_BUCKETS:
        bucket = buckets.get(f"<= {bound} s")
        if bucket is None:
            continue
        running += bucket.weight
        if running >= q * total:
            return min(float(bound), bucket.max_s) if bucket.max_s else float(bound)
    return max((b.max_s for b in buckets.values()), default=0.0)


def _with_margin(lag: float) -> int:
    return math.ceil(lag * SETTLE_MARGIN + SETTLE_PAD_S)


def _rule(shape: str) -> str:
    return shape.split(" ", 1)[-1]


def _level(shape: str) -> str:
    return shape.split(" ", 1)[0]


def _bucket(lag: float) -> str:
    bound = next((b for b in LAG_BUCKETS if lag <= b), LAG_BUCKETS[-1])
    return f"<= {bound} s"
