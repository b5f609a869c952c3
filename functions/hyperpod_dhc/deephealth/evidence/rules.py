"""The vocabulary of result records: the tests a check runs, the kinds a record can be, the built-in rules that place
the lines AWS documents, and the patterns operators add (`result_patterns`), validated where they are loaded.

Built-in rules are Python regular expressions of ours. Operator patterns are RE2 (`google-re2`): matching takes
time linear in the text whatever the pattern, so no pattern an operator writes can stall a Lambda; RE2 has no
backreferences or look-around, and such a pattern is refused when the configuration is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, Protocol

from hyperpod_dhc.deephealth.evidence.text import single_spaced


class Test(str, Enum):
    """The tests a deep health check runs, as its result lines name them."""

    STRESS = "stress-ng"
    GPU_PCI = "gpu-pci"
    DCGM = "dcgm"
    EFA = "efa-loopback"
    NCCL = "nccl"
    TRAINING = "training"  # MultiNodeTrainingValidation: no documented line; only a summary can prove it

    def __str__(self) -> str:
        return self.value


class Kind(str, Enum):
    """What a record says: a test passed, something failed, nothing about an outcome, or an outcome no rule
    places (never a pass)."""

    PASS = "pass"
    FAILURE = "failure"
    NEUTRAL = "neutral"
    UNRECOGNISED = "unrecognised"

    def __str__(self) -> str:
        return self.value


Hint = Literal["reboot", "replace"]

# What a pass of each check type needs proven, one test at a time (or by a summary that covers them).
REQUIRED_TESTS: dict[str, frozenset[Test]] = {
    "InstanceStress": frozenset({Test.STRESS, Test.GPU_PCI, Test.DCGM, Test.EFA}),
    "InstanceConnectivity": frozenset({Test.NCCL}),
    "MultiNodeTrainingValidation": frozenset({Test.TRAINING}),
}
ALL_TESTS = frozenset(Test)
TEST_NAMES = tuple(t.value for t in Test)


def required_tests(check_types: Iterable[str]) -> frozenset[Test]:
    """Every test the checks of these types run; an unknown type needs a summary naming it (TRAINING)."""
    return frozenset(t for c in check_types for t in REQUIRED_TESTS.get(c, frozenset({Test.TRAINING})))


# -- built-in rules ------------------------------------------------------------------------------------------------
SUCCESS = r"(?:passed|success|successful|succeeded)"
INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8}(?:[0-9a-f]{9})?\b")
HOSTNAME = re.compile(r"\bip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}\b")
NODE = "<node>"
# Readings that name the node in the text ("... on instance i-...", "instance: i-...", "host: ip-..."): taken out
# before a pass rule is matched (whose line it is, is the stream's to say).
NODE_MENTION = re.compile(rf"\s*(?:\bon instance|\binstance:|\bhost:)\s*{re.escape(NODE)}", re.IGNORECASE)
FIGURE = r"[A-Za-z][\w#]*: -?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
FIGURES = rf"{FIGURE}(?:,? {FIGURE})*,?"
DEVICE = r"(?P<device>[\w:-]+(?:\.[\w:-]+)*)"


@dataclass(frozen=True)
class Rule:
    """A named rule: `proves` the tests a pass says passed."""

    name: str
    kind: Kind
    regex: Any  # a compiled pattern (re, or re2 for operator rules): fullmatch against the single-spaced message
    proves: frozenset[Test] = frozenset()
    source: str = "builtin"


def _whole(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"{pattern}\.?", re.IGNORECASE)


BUILTIN_PASS: tuple[Rule, ...] = (
    Rule("summary", Kind.PASS, _whole(rf"deep health checks? {SUCCESS}"), ALL_TESTS),
    *(
        Rule(f"check-type:{check}", Kind.PASS, _whole(rf"{check}(?: check)? {SUCCESS}"), tests)
        for check, tests in REQUIRED_TESTS.items()
    ),
    Rule("stress-ng", Kind.PASS, _whole(rf"stress-ng {SUCCESS}"), frozenset({Test.STRESS})),
    Rule("gpu-pci", Kind.PASS, _whole(rf"GpuPci Count check {SUCCESS}"), frozenset({Test.GPU_PCI})),
    # [D24] `... gpuDriverVersion: 535.183.01, gpuDeviceIds: [2237] replacementRequired: false rebootRequired:false`;
    # [D26] the same over three lines (no comma), rebuilt into one record.
    Rule(
        "dcgm-summary",
        Kind.PASS,
        _whole(
            r"DCGM diagnostic health summary: dcgmCheckLevel: \d+ dcgmVersion: [\w.-]+ gpuDriverVersion: [\w.-]+,? "
            r"gpuDeviceIds: \[[\d, ]*\] replacementRequired: ?false,? rebootRequired: ?false"
        ),
        frozenset({Test.DCGM}),
    ),
    # [D24] `EFA Loopback check passed for device: rdmap0s29 . Output summary is MaxBw: 58.590000, ...`; [D26] the
    # device line, then `  MaxBw: 58.59, AvgBw: 32.42, ...` (one record once rebuilt). A line with no device is
    # the EFA test as a whole (the fake's `EFA loopback passed`).
    Rule(
        "efa-loopback",
        Kind.PASS,
        _whole(
            rf"EFA loopback(?: check)? passed(?: for device: {DEVICE})?(?: ?\.)?(?: (?:Output summary is )?{FIGURES})?"
        ),
        frozenset({Test.EFA}),
    ),
    # [D24] `Nccl test successful. Summary: NcclMaxAlgoBw: 1.190000, ..., NcclNodes: 2, NcclClusterMessage:`
    Rule("nccl-summary", Kind.PASS, _whole(r"Nccl test successful\. Summary:[\w.,:\s#-]*"), frozenset({Test.NCCL})),
    Rule(
        "nccl-peer",
        Kind.PASS,
        _whole(rf"NCCL [\w-]+ with peer {NODE}(?: \({NODE}\))? {SUCCESS}"),
        frozenset({Test.NCCL}),
    ),
)

# Neutral: progress lines, tools' tables and figures, a console's time column. They state no outcome, so they never
# block a pass (a pass still needs each test's own pass line).
NCCL_ROW = re.compile(
    r"\s*\d+\s+\d+\s+\w+\s+\w+\s+-?\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(?P<wrong1>\S+)"
    r"(?:\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+(?P<wrong2>\S+))?\s*"
)
NCCL_TABLE_LINES = (
    re.compile(r"#\s+size\s+count\s+type\b.*", re.IGNORECASE),
    re.compile(r"#\s+\(B\)\s+\(elements\).*", re.IGNORECASE),
    re.compile(r"#\s*(?:nThread|Using devices|Rank\s+\d+|Collective test \w+|Avg bus bandwidth)\b.*", re.IGNORECASE),
    re.compile(r"#\s*Out of bounds values\s*:\s*0 OK", re.IGNORECASE),
    re.compile(r"#\s*"),
    NCCL_ROW,
)
BUILTIN_NEUTRAL: tuple[Rule, ...] = (
    # [D26] `Executing Hardware stress check with command: stress-ng`; [D24] adds `, and args: [--cpu 32 ...]`
    Rule("progress", Kind.NEUTRAL, re.compile(r"Executing [\w /-]{1,80} check with command: \S.{0,600}", re.I)),
    Rule("efa-figures", Kind.NEUTRAL, re.compile(rf"(?:\. )?(?:Output summary is )?{FIGURES}", re.IGNORECASE)),
    # stress-ng's own output (`stress-ng: info:  [2210] dispatching hogs: ...`): the test's outcome is its pass line;
    # stress-ng's failures say `fail` or `error`, which no neutral rule lifts.
    Rule("stress-ng-output", Kind.NEUTRAL, re.compile(r"stress-ng: (?:info|debug|metrc):\s+\[\d+\] .{0,400}")),
    # `dcgmi diag`'s table: borders, its header, and rows whose result is Pass or Skip (the DCGM summary decides).
    Rule(
        "dcgmi-table",
        Kind.NEUTRAL,
        re.compile(
            r"\+[-=+]+\+|\|\s*Diagnostic\s*\|\s*Result\s*\||"
            r"\|\s*[\w /.()-]{1,60}\|\s*(?:Pass|Skip)\s*\|",
            re.I,
        ),
    ),
)
# NCCL's own debug output (`<host>:<pid>:<tid> [<dev>] NCCL INFO ...`): its probes print "Failed to open
# libibverbs.so" on EFA instances; NCCL's outcome is its test's table and summary, never an INFO line.
NCCL_DEBUG = re.compile(r"^(?:\S+:\d+:\d+ \[\d+\] )?NCCL (?:INFO|TRACE)\b")

# -- what makes a record a failure, whatever rule would pass it -----------------------------------------------------
FAILURE_WORDS = re.compile(
    r"(?<![\w./-])(?:errors?|fail(?:s|ed|ure|ures|ing)?|faulty\w*|faults?|unhealthy)(?![\w./]|-free)", re.IGNORECASE
)
# "0 errors", "no failures", "errors: 0": no failure (and no pass either unless a pass rule takes the record).
NEGATED = re.compile(
    r"\b(?:0|no|zero|without)\s+(?:errors?|failures?|faults?)\b|\b(?:errors?|failures?|faults?|failed)\s*[:=]\s*0\b",
    re.IGNORECASE,
)
DCGM_FLAG = re.compile(r"\b(replacementRequired|rebootRequired)\"?\s*[:=]\s*\"?([\w.+-]*)", re.IGNORECASE)
FAILED_COUNT = re.compile(
    r"(?<![\w])[\w#]*(?:wrong|fail\w*|errors?|faults?)\w*\"?\s*[:=]\s*\"?(?P<n>\d+(?:\.\d+)?)", re.IGNORECASE
)
OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<ok>\w+)", re.IGNORECASE)
OUT_OF_BOUND_FIELD = re.compile(r"\bNcclOutOfBoundError\s*:\s*(?P<v>[^,\s]*)", re.IGNORECASE)
XID = re.compile(r"\bXID\b\s*[:=]?\s*\d+", re.IGNORECASE)
NVLINK_DOWN = re.compile(r"\bNVLink\b[^.;]*?\b(?:down|inactive|errors?|fail\w*|lost)\b", re.IGNORECASE)
TEST_WORDS = (
    (Test.DCGM, re.compile(r"\bdcgm\w*|\bXID\b|\bNVLink\b", re.IGNORECASE)),
    (Test.EFA, re.compile(r"\befa\b|\brdmap\w*", re.IGNORECASE)),
    (Test.NCCL, re.compile(r"\bnccl\w*|#wrong|\bOut of bounds\b", re.IGNORECASE)),
    (Test.STRESS, re.compile(r"\bstress-ng\b", re.IGNORECASE)),
    (Test.GPU_PCI, re.compile(r"\bgpu ?pci\b", re.IGNORECASE)),
)
# Words that state an outcome: a record with one that no rule placed is unrecognised, never neutral.
OUTCOME_WORDS = re.compile(
    r"\b(?:pass(?:ed|es|ing)?|succe\w*|ok|okay|fail\w*|errors?|faults?|faulty|warn\w*|unhealthy|healthy|abort\w*|"
    r"time[d ]?out|timeouts?|crash\w*|panic\w*|exceptions?|traceback|degraded|mismatch\w*|corrupt\w*|invalid|unable|"
    r"cannot|denied|refused|killed|lost|missing|broken|skip\w*|results?|verdict|required|xid|nvlink|complete\w*|"
    r"incomplete|finish\w*|done|hang\w*|hung|stuck|retr(?:y|ied|ies)|(?:did|does|do|could|can|was|is|were|has|have)"
    r"\s+not)\b|n't\b",
    re.IGNORECASE,
)


# -- operator patterns ---------------------------------------------------------------------------------------------
PATTERN_MAX_CHARS = 300
PATTERNS_MAX = 50  # per kind (per test for pass), after the layers are merged
PatternKind = Literal["pass", "neutral", "failure"]
# Lines a pass or neutral pattern must not take: the documented failure line and the failures the built-in rules
# catch. An operator may only make the rules stricter about them (a pattern that would pass one is refused).
FAILURE_EXAMPLES = (
    "Encountered FaultyInstance. Replace the Instance. Region: us-west-2, InstanceType: ml.g5.8xlarge. ERROR: "
    "Bandwidth has less than threshold: Expected minimum threshold: 80, NCCL Test output Bw: 30",
    "DCGM diagnostic health summary: dcgmCheckLevel: 4 dcgmVersion: 3.3.7 gpuDriverVersion: 535.183.01 "
    "gpuDeviceIds: [2237] replacementRequired: true rebootRequired: false",
    "DCGM diagnostic health summary: dcgmCheckLevel: 4 dcgmVersion: 3.3.7 gpuDriverVersion: 535.183.01 "
    "gpuDeviceIds: [2237] replacementRequired: false rebootRequired: true",
    "EFA Loopback check failed for device: rdmap0s29",
    "stress-ng failed",
    "GpuPci Count check failed",
    "Nccl test failed. Summary: NcclMaxAlgoBw: 1.19, NcclOutOfBoundError: FAIL, wrong: 12",
    "Deep health check failed",
)


class PatternError(ValueError):
    """Operator result patterns that cannot be used; the message names each one and why."""


class _Compiled(Protocol):
    def fullmatch(self, text: str) -> Any: ...
    def search(self, text: str) -> Any: ...


@dataclass(frozen=True, eq=False)
class OperatorRules:
    """Operators' patterns, compiled: pass rules per test, neutral rules, failure rules (`raw` as configured).
    Equal only to itself: a classification is cached per record text and set of rules (`classify.classified`)."""

    passes: tuple[Rule, ...] = ()
    neutral: tuple[Rule, ...] = ()
    failure: tuple[Rule, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.passes or self.neutral or self.failure)


NO_OPERATOR_RULES = OperatorRules()


def merge_patterns(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Layers of `result_patterns` (defaults, cluster, group, cluster/group) as one: lists are concatenated, each
    pattern once, in layer order. A layer adds patterns; it never removes another layer's."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for kind, value in (layer or {}).items():
            if kind == "pass" and isinstance(value, Mapping):
                tests = merged.setdefault("pass", {})
                for test, patterns in value.items():
                    tests[test] = list(dict.fromkeys([*tests.get(test, []), *_as_list(patterns)]))
            else:
                merged[kind] = list(dict.fromkeys([*merged.get(kind, []), *_as_list(value)]))
    return merged


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def compile_patterns(raw: Mapping[str, Any] | None) -> OperatorRules:
    """`result_patterns` checked and compiled, or PatternError naming every problem: unknown keys, a test that does
    not exist, a pattern that is not a string of 1..300 characters anchored with ^...$, does not compile under RE2,
    matches the empty string, or (pass and neutral) takes one of the documented failure lines."""
    if not raw:
        return NO_OPERATOR_RULES
    problems: list[str] = []
    if not isinstance(raw, Mapping):
        raise PatternError("result_patterns must be an object with keys pass, neutral, failure")
    for key in raw:
        if key not in ("pass", "neutral", "failure"):
            problems.append(f"result_patterns.{key}: unknown key (pass, neutral, failure)")
    passes = _pass_rules(raw.get("pass") or {}, problems)
    others: dict[str, list[Rule]] = {"neutral": [], "failure": []}
    for kind_name, rules in others.items():
        kind = Kind.NEUTRAL if kind_name == "neutral" else Kind.FAILURE
        for i, pattern in enumerate(_as_list(raw.get(kind_name) or [])):
            where = f"result_patterns.{kind_name}[{i}]"
            compiled = _compile(pattern, where, problems, kind)
            if compiled is not None:
                rules.append(Rule(f"policy:{kind_name}#{i}", kind, compiled, source=pattern))
    for name, count in (("pass", len(passes)), *((k, len(v)) for k, v in others.items())):
        if count > PATTERNS_MAX:
            problems.append(f"result_patterns.{name}: {count} patterns, at most {PATTERNS_MAX}")
    if problems:
        raise PatternError("; ".join(problems))
    return OperatorRules(tuple(passes), tuple(others["neutral"]), tuple(others["failure"]), raw=dict(raw))


def _pass_rules(raw_pass: Any, problems: list[str]) -> list[Rule]:
    if not isinstance(raw_pass, Mapping):
        problems.append("result_patterns.pass: must map a test name to its patterns")
        return []
    passes: list[Rule] = []
    for test_name, patterns in raw_pass.items():
        if test_name not in TEST_NAMES:
            problems.append(f"result_patterns.pass.{test_name}: not a test ({', '.join(TEST_NAMES)})")
            continue
        for i, pattern in enumerate(_as_list(patterns)):
            compiled = _compile(pattern, f"result_patterns.pass.{test_name}[{i}]", problems, Kind.PASS)
            if compiled is not None:
                rule = Rule(f"policy:pass:{test_name}#{i}", Kind.PASS, compiled, frozenset({Test(test_name)}), pattern)
                passes.append(rule)
    return passes


def _compile(pattern: Any, where: str, problems: list[str], kind: Kind) -> _Compiled | None:
    if not isinstance(pattern, str) or not 1 <= len(pattern) <= PATTERN_MAX_CHARS:
        problems.append(f"{where}: must be a string of 1 to {PATTERN_MAX_CHARS} characters")
        return None
    if not (pattern.startswith("^") and pattern.endswith("$")):
        problems.append(f"{where}: must be anchored: start with ^ and end with $ (it matches a whole message)")
        return None
    try:
        compiled = re2_compile(pattern)
    except PatternError as err:
        problems.append(f"{where}: {err}")
        return None
    if compiled.fullmatch("") is not None:
        problems.append(f"{where}: matches an empty message")
        return None
    if kind != Kind.FAILURE:
        taken = [example for example in FAILURE_EXAMPLES if compiled.fullmatch(single_spaced(example)) is not None]
        if taken:
            problems.append(f"{where}: would make a failure line {kind.value}: {taken[0][:80]!r}")
            return None
    return compiled


def re2_compile(pattern: str) -> _Compiled:
    """An RE2 pattern (linear-time matching), or PatternError saying why it cannot be one."""
    try:
        import re2  # google-re2: imported only where operator patterns are used
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise PatternError("operator result patterns need the google-re2 package (pip install google-re2)") from err
    options = re2.Options()
    options.log_errors = False
    try:
        compiled: _Compiled = re2.compile(pattern, options=options)
    except re2.error as err:
        raise PatternError(f"not an RE2 pattern ({_decoded(err)}; RE2 has no backreferences or look-around)") from None
    return compiled


def _decoded(err: Exception) -> str:
    text = err.args[0] if err.args else str(err)
    return text.decode(errors="replace") if isinstance(text, bytes) else str(text)
