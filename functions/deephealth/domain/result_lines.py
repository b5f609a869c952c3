"""What one line of a `DeepHealthCheckResults/*` stream proves: which test it is about, and whether it says that
test passed. An allow-list, because a false pass is the worst mistake the controller can make.

A line is a **pass** only when a pattern below recognises the whole line as a test's success (the node's own name
aside), at level `info` or `debug` (or with no level), with no failure word in it. It is a **failure** when it says
so clearly: a level of the error family, a failure word on its own in any form (`error`, `errors`, `fails`,
`failure`, `faulty`, ... but not `0 errors`, `errors: 0`, `error.log`), or a DCGM summary with any
`replacementRequired: true` or `rebootRequired: true`. Everything else (a `warn` line with no failure word, an `info`
line no pattern knows, a level the code does not know, a DCGM summary missing one of its two flags) is
**unrecognised**: never a pass, never an action, quoted in the node's evidence and an alert.

The documented on-node lines [D-DHC], one per test, plain text `<time>  info  <message>`:
`stress-ng success`, `GpuPci Count check success`, `DCGM diagnostic health summary: ... replacementRequired: false
rebootRequired: false`, `EFA Loopback check passed for device: <dev>`; InstanceConnectivity's
`Nccl test successful. Summary: ... NcclNodes: 2 ...` names no node. The one documented failure line is JSON
(`{"level": "error", "ts": ..., "msg": "Encountered FaultyInstance. ..."}`) and names no instance either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

STREAM_PREFIX = "DeepHealthCheckResults/"
INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8}(?:[0-9a-f]{9})?\b")
HOSTNAME = re.compile(r"\bip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}\b")
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
INSTANCE_FIELDS = ("instance_id", "InstanceId", "instanceId", "instance", "node_id", "NodeId", "hostname", "host")
LEVEL_FIELDS = ("level", "severity", "lvl", "levelname", "log_level", "loglevel")  # compared lower case
MESSAGE_FIELDS = ("msg", "message")
UNKNOWN_LEVEL = "?"  # a field that looks like a level but is none of the known ones: never a pass
TEXT_LIMIT = 500

# Levels whose lines may prove a pass; the error family always fails; any other level is never a pass.
PASS_LEVELS = frozenset({"", "info", "debug"})
FAILURE_LEVELS = frozenset({"error", "err", "fatal", "critical", "crit", "alert", "emerg", "emergency", "panic"})
KNOWN_LEVELS = PASS_LEVELS | FAILURE_LEVELS | {"trace", "notice", "warn", "warning"}
# `<ISO time>  <level>  <message>` (the on-node log's plain-text layout), or `LEVEL: message`, `[level] message`.
PLAIN = re.compile(r"^\s*(?:\d{4}-\d\d-\d\dT\S+\s+)?\[?(?P<level>[A-Za-z]+)\]?:?\s+(?P<msg>.*)$", re.DOTALL)
# A failure word on its own (not part of a path or a name: `error.log`, `error-free`, `failover`).
FAILURE_WORDS = re.compile(
    r"(?<![\w./-])(?:errors?|fail(?:s|ed|ure|ures|ing)?|faulty\w*|faults?|unhealthy)(?![\w./]|-free)", re.IGNORECASE
)
# "0 errors", "no failures", "errors: 0": not a failure; not a pass either, unless a pass pattern takes the line.
NEGATED = re.compile(
    r"\b(?:0|no|zero|without)\s+(?:errors?|failures?|faults?)\b|\b(?:errors?|failures?|faults?|failed)\s*[:=]\s*0\b",
    re.IGNORECASE,
)
SUCCESS = r"(?:passed|success|successful|succeeded)"
# Before a pass pattern is matched, the node's own names and the words that carry them are taken out (readings
# name the node in the text: "... on instance i-...", "... instance: i-...", "... host: ip-...").
NODE = "<node>"
NODE_MENTION = re.compile(rf"\s*(?:\bon instance|\binstance:|\bhost:)\s*{re.escape(NODE)}", re.IGNORECASE)


class Test(StrEnum):
    """The tests a deep health check runs, as its result lines name them."""

    STRESS = "stress-ng"
    GPU_PCI = "gpu-pci"
    DCGM = "dcgm"
    EFA = "efa-loopback"
    NCCL = "nccl"
    TRAINING = "training"  # MultiNodeTrainingValidation: no documented line; only a summary can prove it


# What a pass of each check type needs proven, one test at a time (or by a summary line that covers them).
REQUIRED_TESTS: dict[str, frozenset[Test]] = {
    "InstanceStress": frozenset({Test.STRESS, Test.GPU_PCI, Test.DCGM, Test.EFA}),
    "InstanceConnectivity": frozenset({Test.NCCL}),
    "MultiNodeTrainingValidation": frozenset({Test.TRAINING}),
}
ALL_TESTS = frozenset(Test)


def required_tests(check_types: Iterable[str]) -> frozenset[Test]:
    """Every test the checks of these types run; an unknown type needs a summary line naming it (TRAINING)."""
    return frozenset(t for c in check_types for t in REQUIRED_TESTS.get(c, frozenset({Test.TRAINING})))


class Finding(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNRECOGNISED = "unrecognised"


Hint = Literal["reboot", "replace"]


@dataclass(frozen=True)
class PassPattern:
    name: str
    pattern: re.Pattern[str]
    proves: frozenset[Test]


def _whole(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"{pattern}\.?", re.IGNORECASE)


# The recognised pass lines, each matched against the whole line. `summary` and `check-type` cover several tests at
# once (the fake's, and one reading's, one line per node and check); the others are the documented per-test lines.
PASS_PATTERNS = (
    PassPattern("summary", _whole(rf"deep health checks? {SUCCESS}"), ALL_TESTS),
    *(
        PassPattern("check-type", _whole(rf"{check}(?: check)? {SUCCESS}"), tests)
        for check, tests in REQUIRED_TESTS.items()
    ),
    PassPattern("stress-ng", _whole(rf"stress-ng {SUCCESS}"), frozenset({Test.STRESS})),
    PassPattern("gpu-pci", _whole(rf"GpuPci Count check {SUCCESS}"), frozenset({Test.GPU_PCI})),
    PassPattern(
        "efa-loopback", _whole(r"EFA loopback(?: check)? passed(?: for device: [\w.:-]+)?"), frozenset({Test.EFA})
    ),
    # The documented summary of a multi-node NCCL test: figures only after "Summary:"
    PassPattern("nccl", _whole(r"Nccl test successful\. Summary:[\w.,:\s-]*"), frozenset({Test.NCCL})),
    PassPattern("nccl", _whole(rf"NCCL [\w-]+ with peer {NODE}(?: \({NODE}\))? {SUCCESS}"), frozenset({Test.NCCL})),
)
DCGM_SUMMARY = re.compile(r"\bDCGM diagnostic health summary:", re.IGNORECASE)
DCGM_FLAG = re.compile(r"\b(replacementRequired|rebootRequired)\s*[:=]\s*\"?(true|false)\b", re.IGNORECASE)
TEST_WORDS = (
    (Test.STRESS, re.compile(r"\bstress-ng\b", re.IGNORECASE)),
    (Test.GPU_PCI, re.compile(r"\bgpu ?pci\b", re.IGNORECASE)),
    (Test.DCGM, re.compile(r"\bdcgm\w*", re.IGNORECASE)),
    (Test.EFA, re.compile(r"\befa\b", re.IGNORECASE)),
    (Test.NCCL, re.compile(r"\bnccl\w*", re.IGNORECASE)),
)
NCCL_NODES = re.compile(r"\bNcclNodes:\s*(\d+)")


@dataclass(frozen=True)
class ResultLine:
    """One log event of a result stream, classified."""

    at: float  # the line's own timestamp (epoch s): when the test wrote it, not when it became readable
    ingested_at: float | None  # when CloudWatch Logs ingested it (epoch s), if the read said
    stream: str  # the stream's name after the `DeepHealthCheckResults/` prefix
    finding: Finding
    text: str
    level: str = ""  # as written, lower case ("" for none)
    shape: str = ""  # "<level> <pattern>": what kind of line this is, for the cluster's readings
    proves: frozenset[Test] = frozenset()  # the tests a pass line says passed
    test: Test | None = None  # the test a failure or unrecognised line is about, when it names one
    hint: Hint | None = None  # a DCGM summary's own advice: replacementRequired / rebootRequired
    stream_names: frozenset[str] = frozenset()  # instance ids, short hostnames and UUIDs in the stream name
    field_names: frozenset[str] = frozenset()  # instance ids and short hostnames in the line's instance fields
    text_names: frozenset[str] = frozenset()  # ... and in its text
    nccl_nodes: int | None = None  # NcclNodes of an NCCL summary
    json_format: bool = False

    @property
    def lag_s(self) -> float | None:
        return None if self.ingested_at is None else max(0.0, self.ingested_at - self.at)


def parse_line(stream: str, message: str, timestamp_ms: int, ingestion_ms: int | None = None) -> ResultLine | None:
    """One log event of a result stream, classified; None for an event of another stream."""
    if not stream.startswith(STREAM_PREFIX):
        return None
    fields: dict[str, object] = {}
    try:
        parsed = json.loads(message)
        if isinstance(parsed, dict):
            fields = parsed
    except ValueError:
        pass  # plain text: the on-node log's layout
    if fields:
        level = _field_level(fields)
        text = next((str(fields[k]) for k in MESSAGE_FIELDS if k in fields), message)
    else:
        level, text = _plain(message)
    suffix = stream.removeprefix(STREAM_PREFIX)
    finding, proves, test, hint, pattern = classify(level, text)
    return ResultLine(
        at=timestamp_ms / 1000,
        ingested_at=None if ingestion_ms is None else ingestion_ms / 1000,
        stream=suffix,
        finding=finding,
        text=text[:TEXT_LIMIT],
        level=level,
        shape=f"{level or '-'} {pattern}",
        proves=proves,
        test=test,
        hint=hint,
        stream_names=_names(suffix) | frozenset(m.lower() for m in UUID.findall(suffix)),
        field_names=frozenset(n for k in INSTANCE_FIELDS for n in _names(str(fields.get(k, "")))),
        text_names=_names(text),
        nccl_nodes=int(m.group(1)) if (m := NCCL_NODES.search(text)) else None,
        json_format=bool(fields),
    )


def _field_level(fields: dict[str, object]) -> str:
    """The level a JSON line gives itself: "" for none, UNKNOWN_LEVEL for a level-like field the code does not
    know (a numeric level, `Level: "E"`, ...)."""
    levels = {k.lower(): str(v).strip().lower() for k, v in fields.items() if _level_like(k.lower())}
    level = next((levels[k] for k in LEVEL_FIELDS if k in levels), None)
    if level is None:
        return UNKNOWN_LEVEL if levels else ""
    return level if level in KNOWN_LEVELS else UNKNOWN_LEVEL


def _level_like(key: str) -> bool:
    return "level" in key or key in ("severity", "lvl")


def _plain(message: str) -> tuple[str, str]:
    match = PLAIN.match(message)
    if match and match.group("level").lower() in KNOWN_LEVELS:
        return match.group("level").lower(), match.group("msg").strip()
    return "", message.strip()


def _names(text: str) -> frozenset[str]:
    return frozenset((*INSTANCE_ID.findall(text), *HOSTNAME.findall(text)))


def classify(level: str, text: str) -> tuple[Finding, frozenset[Test], Test | None, Hint | None, str]:
    """(finding, tests proven, the test it is about, recovery hint, pattern name) of a line's level and text."""
    test = next((t for t, words in TEST_WORDS if words.search(text)), None)
    if DCGM_SUMMARY.search(text):
        return _dcgm_summary(level, text)
    failing = FAILURE_WORDS.search(NEGATED.sub("", text))
    if level in FAILURE_LEVELS or failing:
        return Finding.FAIL, frozenset(), test, None, "failure"
    if level not in PASS_LEVELS:
        return Finding.UNRECOGNISED, frozenset(), test, None, "unrecognised"
    bare = NODE_MENTION.sub("", INSTANCE_ID.sub(NODE, HOSTNAME.sub(NODE, text))).strip()
    matched = [p for p in PASS_PATTERNS if p.pattern.fullmatch(bare)]
    if not matched:
        return Finding.UNRECOGNISED, frozenset(), test, None, "unrecognised"
    proves = frozenset(t for p in matched for t in p.proves)
    return Finding.PASS, proves, test, None, "+".join(sorted({p.name for p in matched}))


def _dcgm_summary(level: str, text: str) -> tuple[Finding, frozenset[Test], Test | None, Hint | None, str]:
    """The documented DCGM summary: its two flags decide, whatever its level says (any flag `true`, in a summary
    that names several GPUs, is a failure)."""
    flags: dict[str, bool] = {}
    for name, value in DCGM_FLAG.findall(text):
        flags[name.lower()] = flags.get(name.lower(), False) or value.lower() == "true"
    replace, reboot = flags.get("replacementrequired"), flags.get("rebootrequired")
    if replace or reboot:
        return Finding.FAIL, frozenset(), Test.DCGM, "replace" if replace else "reboot", "dcgm-summary"
    failing = FAILURE_WORDS.search(NEGATED.sub("", text))
    if level in FAILURE_LEVELS or failing:
        return Finding.FAIL, frozenset(), Test.DCGM, None, "dcgm-summary"
    if replace is None or reboot is None or level not in PASS_LEVELS:
        return Finding.UNRECOGNISED, frozenset(), Test.DCGM, None, "dcgm-summary"
    return Finding.PASS, frozenset({Test.DCGM}), Test.DCGM, None, "dcgm-summary"
