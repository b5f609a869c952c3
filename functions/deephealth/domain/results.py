"""What the `DeepHealthCheckResults/*` log streams say, and about which node.

AWS documents the streams as `DeepHealthCheckResults/<log_stream_id>` and its example failure line names no
instance, so a line is attributed only to what it names: an instance id or a private hostname (`ip-10-1-2-3`)
in the stream name, a field or the text. A line that names nothing cannot clear or condemn any one node: an
unattributable error makes every node whose check it could belong to `inconclusive`, never `passed`.
Result lines arrive late (CloudWatch ingestion), so a node is judged only from a read made `log_settle_s`
after it left its check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

STREAM_PREFIX = "DeepHealthCheckResults/"
INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8}(?:[0-9a-f]{9})?\b")
HOSTNAME = re.compile(r"\bip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}\b")
# Words of a failure or a success; level fields win over words (the documented line is JSON with a level).
FAILURE_WORDS = re.compile(r"\b(error|fail(ed|ure)?|faulty\w*)\b", re.IGNORECASE)
SUCCESS_WORDS = re.compile(r"\b(pass(ed)?|success(ful)?|succeeded)\b", re.IGNORECASE)
INSTANCE_FIELDS = ("instance_id", "InstanceId", "instanceId", "instance", "node_id", "NodeId", "hostname")


class Level(StrEnum):
    ERROR = "error"
    PASS = "pass"
    OTHER = "other"  # progress and noise: evidence of nothing


@dataclass(frozen=True)
class ResultLine:
    at: float  # the line's own timestamp (epoch s), not when it became readable
    level: Level
    names: frozenset[str]  # instance ids and short hostnames the line or its stream names
    text: str


def parse_line(stream: str, message: str, timestamp_ms: int) -> ResultLine | None:
    """One log event of a result stream, or None for one that is not (another stream)."""
    if not stream.startswith(STREAM_PREFIX):
        return None
    fields: dict[str, object] = {}
    try:
        parsed = json.loads(message)
        if isinstance(parsed, dict):
            fields = parsed
    except ValueError:
        pass  # plain text (the on-node log format): words decide
    text = str(fields.get("msg", fields.get("message", message)))
    level = _level(str(fields.get("level", "")), text)
    named = [stream.removeprefix(STREAM_PREFIX), text, *(str(fields.get(k, "")) for k in INSTANCE_FIELDS)]
    names = frozenset(n for part in named for n in (*INSTANCE_ID.findall(part), *HOSTNAME.findall(part)))
    return ResultLine(at=timestamp_ms / 1000, level=level, names=names, text=text[:500])


def _level(level: str, text: str) -> Level:
    level = level.lower()
    if level in ("error", "fatal", "critical") or (not level and FAILURE_WORDS.search(text)):
        return Level.ERROR
    if level in ("", "info", "notice") and SUCCESS_WORDS.search(text) and not FAILURE_WORDS.search(text):
        return Level.PASS
    return Level.OTHER


def short_hostname(hostname: str | None) -> str | None:
    """`ip-10-1-2-3.ec2.internal` -> `ip-10-1-2-3`, the form a stream name would use."""
    return hostname.split(".", 1)[0] if hostname else None


@dataclass(frozen=True)
class NodeResults:
    """The result lines that bear on one node's check: its own, and those that name no node at all."""

    error: str | None = None  # the first error line that names the node
    passed: bool = False  # a success line names the node
    unattributed_errors: int = 0  # error lines naming no node, logged while the node was in its check
    unattributed_passes: int = 0


@dataclass(frozen=True)
class ResultLog:
    """The result lines of a cluster's log group logged since `since`, as read at `read_at`."""

    lines: tuple[ResultLine, ...]
    since: float
    read_at: float

    def for_node(self, instance_id: str | None, hostname: str | None, since: float) -> NodeResults:
        own = {n for n in (instance_id, short_hostname(hostname)) if n}
        error, passed, anon_errors, anon_passes = None, False, 0, 0
        for line in self.lines:
            if line.at < since or line.level == Level.OTHER:
                continue  # an earlier check's line, or no evidence
            if not line.names:
                anon_errors += line.level == Level.ERROR
                anon_passes += line.level == Level.PASS
            elif line.names & own:
                if line.level == Level.ERROR and error is None:
                    error = line.text
                passed = passed or line.level == Level.PASS
        return NodeResults(error, passed and error is None, anon_errors, anon_passes)
