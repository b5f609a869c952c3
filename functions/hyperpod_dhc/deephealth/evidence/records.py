"""From CloudWatch events to records: one record is what its writer logged as one entry, however the shipper cut it.

AWS's page prints one DCGM summary over three physical lines and an EFA result over two (2026 rendering), and its
failure example as a JSON object over five; a CloudWatch agent without a multi-line start pattern ships each physical
line as its own event. So, per stream and in time order, an event continues the stream's open record when
- it starts with white space and has no time or level of its own (the agent's multi-line default), within
  CONTINUATION_GAP_S of the record's last event; or
- the open record is a JSON object not closed yet (its lines are joined until it parses).
Everything else starts a record: the unit is the physical line, so an event that batches several entries is
several records, and an entry shipped one line per event is one. A record's head (`<time>  <level>  <message>`,
`[LEVEL] message`, logfmt, a syslog prefix, a JSON object with a level and a message field, JSON wrapping a plain
line) gives its level and message; the message keeps its physical lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperpod_dhc.deephealth.evidence.text import clean

STREAM_PREFIX = "DeepHealthCheckResults/"
CONTINUATION_GAP_S = 60.0  # a continuation line ships within this of the line it continues
JSON_MAX_LINES = 64  # a JSON object still open after this many lines is closed as it is (plain text)
RECORD_MAX_CHARS = 64 * 1024

# Levels as writers spell them, lower case. Pass levels may prove a pass; the failure family always fails; the
# others place a line but never pass it (`warn`: an outcome no rule placed).
PASS_LEVELS = frozenset({"", "info", "debug"})
QUIET_LEVELS = frozenset({"trace", "notice"})  # state nothing by themselves
WARN_LEVELS = frozenset({"warn", "warning"})
FAILURE_LEVELS = frozenset({"error", "err", "fatal", "critical", "crit", "alert", "emerg", "emergency", "panic"})
KNOWN_LEVELS = PASS_LEVELS | QUIET_LEVELS | WARN_LEVELS | FAILURE_LEVELS
UNKNOWN_LEVEL = "?"  # a level field the code does not know (numeric, `E`, ...): never a pass
LEVEL_FIELDS = ("level", "severity", "lvl", "levelname", "log_level", "loglevel")
MESSAGE_FIELDS = ("msg", "message", "log", "MESSAGE")

TIME = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"
BARE_TIME = re.compile(rf"{TIME}")
# `<time>  <level>  [caller]  <message>` (zap's console encoder, the on-node log), `LEVEL: message`, `[level] m`.
PLAIN = re.compile(
    rf"^(?:(?P<time>{TIME})\s+)?\[?(?P<level>[A-Za-z]+)\]?:?(?:\s+(?:[\w./-]+\.\w+:\d+\s+)?(?P<msg>.*))?$", re.DOTALL
)
SYSLOG = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w./@-]+(?:\[\d+\])?: ")
LOGFMT_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')
LOGFMT = re.compile(r'^(?:\w+=(?:"(?:[^"\\]|\\.)*"|\S*)\s*)+$')


@dataclass(frozen=True)
class Event:
    """One CloudWatch log event of a result stream, as FilterLogEvents returns it."""

    stream: str  # the stream's name after `DeepHealthCheckResults/`
    timestamp_ms: int  # the writer's clock
    message: str
    ingestion_ms: int | None = None  # CloudWatch's clock: when it became readable
    event_id: str = ""

    @property
    def at(self) -> float:
        return self.timestamp_ms / 1000

    @property
    def ingested_at(self) -> float | None:
        return None if self.ingestion_ms is None else self.ingestion_ms / 1000

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> Event | None:
        """An event as `aws logs filter-log-events` prints it; None for one of another stream."""
        stream = str(event.get("logStreamName", ""))
        if not stream.startswith(STREAM_PREFIX):
            return None
        ingestion = event.get("ingestionTime")
        return cls(
            stream=stream.removeprefix(STREAM_PREFIX),
            timestamp_ms=int(event["timestamp"]),
            message=str(event.get("message", "")),
            ingestion_ms=None if ingestion is None else int(ingestion),
            event_id=str(event.get("eventId", "")),
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "logStreamName": STREAM_PREFIX + self.stream,
            "timestamp": self.timestamp_ms,
            "message": self.message,
        }
        if self.ingestion_ms is not None:
            out["ingestionTime"] = self.ingestion_ms
        if self.event_id:
            out["eventId"] = self.event_id
        return out


@dataclass(frozen=True)
class Head:
    level: str  # lower case; "" none; UNKNOWN_LEVEL
    message: str
    fields: Mapping[str, Any] | None = None
    time_only: bool = False  # the text is a timestamp and nothing else (a console's time column)


@dataclass(frozen=True)
class Record:
    """What one writer logged as one entry: one event, or several of one stream joined."""

    stream: str
    events: tuple[Event, ...]
    text: str  # the events' cleaned messages, joined by newlines
    head: Head = field(default=Head("", ""))

    @property
    def at(self) -> float:
        """The writer's timestamp of its first event."""
        return self.events[0].at

    @property
    def last_at(self) -> float:
        return self.events[-1].at

    @property
    def ingested_at(self) -> float | None:
        """When the whole record was readable: its last event's ingestion."""
        times = [e.ingested_at for e in self.events if e.ingested_at is not None]
        return max(times) if times else None

    @property
    def level(self) -> str:
        return self.head.level

    @property
    def message(self) -> str:
        return self.head.message

    @property
    def skew_ahead_s(self) -> float:
        """How far its writer's clock ran ahead of CloudWatch's, as far as this record shows (0 if not)."""
        ahead = [e.at - e.ingested_at for e in self.events if e.ingested_at is not None]
        return max(0.0, *ahead) if ahead else 0.0


def head_of(text: str) -> Head:
    """A record's level and message from its text."""
    stripped = text.strip()
    if stripped.startswith("{"):
        fields = _json(stripped)
        if fields is not None:
            return _json_head(fields, stripped)
    first, _, rest = stripped.partition("\n")
    if LOGFMT.match(first) and "=" in first:
        pairs = {k.lower(): _unquote(v) for k, v in LOGFMT_PAIR.findall(first)}
        if any(k in pairs for k in LEVEL_FIELDS) or any(k in pairs for k in MESSAGE_FIELDS):
            level = next((pairs[k].strip().lower() for k in LEVEL_FIELDS if k in pairs), "")
            message = next((pairs[k] for k in MESSAGE_FIELDS if k in pairs), "")
            return Head(_known(level), _join(message, rest), fields=pairs)
    return _plain(SYSLOG.sub("", stripped, count=1))


def _plain(text: str) -> Head:
    if BARE_TIME.fullmatch(text):
        return Head("", "", time_only=True)
    match = PLAIN.match(text)
    if match and match.group("level").lower() in KNOWN_LEVELS:
        return Head(match.group("level").lower(), (match.group("msg") or "").strip())
    if match and match.group("time"):
        return Head("", text[match.end("time") :].strip())  # a time and a message with no level
    return Head("", text)


def _json_head(fields: dict[str, Any], text: str) -> Head:
    levels = {k.lower(): str(v).strip().lower() for k, v in fields.items() if _level_like(k.lower())}
    level = next((levels[k] for k in LEVEL_FIELDS if k in levels), None)
    message = next((str(fields[k]) for k in MESSAGE_FIELDS if k in fields), None)
    if message is None:
        return Head(_known(level or "") if levels else "", text, fields=fields)
    if level is None and not levels:
        inner = _plain(clean(message).strip())  # a shipper's wrapper ({"log": "<time>  info  ..."}) or none
        return Head(inner.level, inner.message, fields=fields, time_only=inner.time_only)
    return Head(_known(level or "?"), clean(message).strip(), fields=fields)


def _known(level: str) -> str:
    return level if level in KNOWN_LEVELS else UNKNOWN_LEVEL


def _level_like(key: str) -> bool:
    return "level" in key or key in ("severity", "lvl")


def _json(text: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(text, strict=False)  # strict=False: a pretty-printer may break a string's line
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"')
    return value


def _join(message: str, rest: str) -> str:
    return f"{message}\n{rest}" if rest else message


SHIPPER_KEYS = frozenset({"log", "stream", "time", "attrs", "tag"})  # a container runtime's JSON log driver


def unwrapped(message: str) -> str:
    """A shipper's wrapper (`{"log": "<line>\\n", "stream": "stdout", "time": ...}`) taken off: its line, so that a
    record it cut into lines is rebuilt like any other."""
    stripped = message.strip()
    if not (stripped.startswith("{") and '"log"' in stripped):
        return message
    fields = _json(stripped)
    if fields is None or not isinstance(fields.get("log"), str) or not set(fields) <= SHIPPER_KEYS:
        return message
    return str(fields["log"]).rstrip("\n")


def _continues(message: str) -> bool:
    """An event that continues the record before it: it starts with white space and has no head of its own."""
    if not message[:1].isspace():
        return False
    head = _plain(message.strip())
    return head.level == "" and not head.time_only and not message.strip().startswith("{")


class _Open:
    """A record being assembled, line by line."""

    def __init__(self, event: Event, line: str) -> None:
        self.events = [event]
        self.lines = [line]
        stripped = line.strip()
        self.json = stripped.startswith("{")
        self.json_open = self.json and _json(stripped) is None

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def takes(self, event: Event, line: str) -> bool:
        """Whether `line` (of `event`) continues this record."""
        if self.json_open:
            return True
        if self.json or not _continues(line):
            return False
        return event is self.events[-1] or event.at - self.events[-1].at <= CONTINUATION_GAP_S

    def add(self, event: Event, line: str) -> None:
        if event is not self.events[-1]:
            self.events.append(event)
        self.lines.append(line)
        if self.json_open:
            text = self.text
            self.json_open = (
                _json(text.strip()) is None and len(self.lines) < JSON_MAX_LINES and len(text) < RECORD_MAX_CHARS
            )

    def close(self, stream: str) -> Record:
        text = self.text
        return Record(stream=stream, events=tuple(self.events), text=text, head=head_of(text))


def assemble(events: Iterable[Event]) -> list[Record]:
    """The records the events make, stream by stream, each stream in time order (ties in the order read). An
    event's lines are records of their own unless they continue the record before them (an agent may batch
    several entries into one event, or ship each physical line as its own)."""
    by_stream: dict[str, list[Event]] = {}
    for event in events:
        by_stream.setdefault(event.stream, []).append(event)
    records: list[Record] = []
    for stream, stream_events in by_stream.items():
        current: _Open | None = None
        for event in sorted(stream_events, key=lambda e: e.timestamp_ms):
            for line in clean(unwrapped(event.message)).split("\n"):
                if not line.strip():
                    continue  # an empty line states nothing, and continues nothing
                if current is not None and current.takes(event, line):
                    current.add(event, line)
                    continue
                if current is not None:
                    records.append(current.close(stream))
                current = _Open(event, line)
        if current is not None:
            records.append(current.close(stream))
    return records
