"""What one record says, and which rule said so. The precedence, written once:

1. a failure, whatever else it says: a level of the error family; a DCGM flag (`replacementRequired`,
   `rebootRequired`) that is not `false` (its recovery hint); figures that say something went wrong (`#wrong` or
   a failed count above 0, out-of-bounds values not `0 OK`, an XID or an NVLink error); a failure word on its own
   (`error`, `failed`, `faulty`, ... but not `0 errors`); then an operator's failure pattern. Nothing lifts these.
   NCCL's own `NCCL INFO` debug lines are the one exception to the failure word: they are neutral.
2. a pass: a pass rule (built-in or an operator's) matches the whole message, at level info, debug or none;
3. neutral: a neutral rule (built-in or an operator's) matches the whole message (progress lines, the tools'
   tables, figures and debug output), or the message states no outcome (no outcome word) at a level that states
   nothing by itself;
4. unrecognised: everything else (an outcome no rule places, a `warn`, a level the code does not know).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

from hyperpod_dhc.deephealth.evidence.records import (
    FAILURE_LEVELS,
    PASS_LEVELS,
    QUIET_LEVELS,
    UNKNOWN_LEVEL,
    WARN_LEVELS,
    Record,
    head_of,
)
from hyperpod_dhc.deephealth.evidence.rules import (
    BUILTIN_NEUTRAL,
    BUILTIN_PASS,
    DCGM_FLAG,
    FAILED_COUNT,
    FAILURE_WORDS,
    HOSTNAME,
    INSTANCE_ID,
    NCCL_DEBUG,
    NCCL_ROW,
    NCCL_TABLE_LINES,
    NEGATED,
    NO_OPERATOR_RULES,
    NODE,
    NODE_MENTION,
    NVLINK_DOWN,
    OUT_OF_BOUND_FIELD,
    OUT_OF_BOUNDS,
    OUTCOME_WORDS,
    TEST_WORDS,
    XID,
    Hint,
    Kind,
    OperatorRules,
    Test,
)
from hyperpod_dhc.deephealth.evidence.text import single_spaced

QUOTE = 300  # characters of a record quoted in evidence
DCGM_FLAG_FIELDS = ("replacementrequired", "rebootrequired")


@dataclass(frozen=True)
class Finding:
    """A classified record: its kind, the rule that decided (`builtin:efa-loopback`, `policy:neutral#0`, ...),
    the tests a pass proves, the test it is about, the EFA device a pass names, a failure's recovery hint."""

    record: Record
    kind: Kind
    rule: str
    proves: frozenset[Test] = frozenset()
    test: Test | None = None
    device: str | None = None
    hint: Hint | None = None
    why: str = ""

    @property
    def shape(self) -> str:
        """ "<level> <rule>": what kind of record this is, for the cluster's readings; an unrecognised one also
        shows the start of its message, numbers and names blanked (`info unrecognised: Starting DCGM on # GPUs`)."""
        level = self.record.level or "-"
        if self.kind != Kind.UNRECOGNISED:
            return f"{level} {self.rule}"
        return f"{level} {self.rule}: {skeleton(self.record.message or self.record.text)}"

    def quoted(self) -> str:
        text = single_spaced(self.record.message or self.record.text)
        return f"[{self.record.level or 'no level'}] {text[:QUOTE]}"

    def as_json(self) -> dict[str, object]:
        return {
            "finding": self.kind.value,
            "rule": self.rule,
            "test": self.test.value if self.test else None,
            "proves": sorted(t.value for t in self.proves),
            "device": self.device,
            "hint": self.hint,
            "why": self.why,
            "stream": self.record.stream,
            "timestamp": self.record.events[0].timestamp_ms,
            "text": self.record.text[:2000],
        }


SKELETON_CHARS = 48
CLASSIFIED_KEPT = 16384  # record texts whose finding is remembered (each at most records.RECORD_MAX_CHARS)
_DIGITS = re.compile(r"\d+(?:\.\d+)?")


def skeleton(message: str) -> str:
    """The start of a message with instance ids, hostnames and numbers blanked: records of one kind share it."""
    text = HOSTNAME.sub("<host>", INSTANCE_ID.sub("<id>", single_spaced(message)))
    return _DIGITS.sub("#", text)[:SKELETON_CHARS]


def classified(record: Record, operator: OperatorRules = NO_OPERATOR_RULES) -> Finding:
    """`classify`, remembered by the record's text: a look reads again what the look before it read (a check's
    window, each poll), and what a record is depends on its text alone."""
    return dataclasses.replace(_by_text(record.text, operator), record=record)


@functools.lru_cache(maxsize=CLASSIFIED_KEPT)
def _by_text(text: str, operator: OperatorRules) -> Finding:
    return classify(Record(stream="", events=(), text=text, head=head_of(text)), operator)


def classify(record: Record, operator: OperatorRules = NO_OPERATOR_RULES) -> Finding:
    """The record's finding under the built-in rules and the operator's patterns."""
    head = record.head
    level = head.level
    message = single_spaced(head.message)
    whole = single_spaced(record.text)
    test = _test_of(whole)
    if head.time_only:
        return Finding(record, Kind.NEUTRAL, "builtin:time-column", why="a timestamp alone")
    if (failure := _failure(record, level, message, whole, test, operator)) is not None:
        return failure
    if NCCL_DEBUG.match(message):
        return Finding(record, Kind.NEUTRAL, "builtin:nccl-debug", why="NCCL's own debug output")
    if level in PASS_LEVELS and (found := _pass(record, message, operator)) is not None:
        return found
    if level not in (UNKNOWN_LEVEL, *WARN_LEVELS) and _neutral_table(record):
        return Finding(record, Kind.NEUTRAL, "builtin:nccl-table", test=Test.NCCL, why="an NCCL table, #wrong 0")
    for rule in (*BUILTIN_NEUTRAL, *operator.neutral):
        # Built-in neutral rules place quiet levels only; an operator may also place a warn.
        placed = level in PASS_LEVELS or level in QUIET_LEVELS or (rule.source != "builtin" and level != UNKNOWN_LEVEL)
        if placed and rule.regex.fullmatch(message) is not None:
            name = f"builtin:{rule.name}" if rule.source == "builtin" else rule.name
            return Finding(record, Kind.NEUTRAL, name, test=test, why="states no outcome")
    if level == UNKNOWN_LEVEL:
        return Finding(record, Kind.UNRECOGNISED, "unrecognised", test=test, why="a level the code does not know")
    if level in WARN_LEVELS:
        return Finding(record, Kind.UNRECOGNISED, "unrecognised", test=test, why=f"level {level}, no rule places it")
    if (said := OUTCOME_WORDS.search(message)) is not None:
        return Finding(
            record, Kind.UNRECOGNISED, "unrecognised", test=test, why=f"says {said.group(0)!r}; no rule places it"
        )
    return Finding(record, Kind.NEUTRAL, "builtin:no-outcome", why="states no outcome")


def _failure(
    record: Record, level: str, message: str, whole: str, test: Test | None, operator: OperatorRules
) -> Finding | None:
    """The record's failure, when it is one (rule 1 of the precedence), else None."""
    if level in FAILURE_LEVELS:
        return Finding(record, Kind.FAILURE, "builtin:failure-level", test=test, why=f"level {level}")
    flagged = _dcgm_flags(record, whole)
    if flagged is not None:
        return Finding(record, Kind.FAILURE, "builtin:dcgm-flag", test=Test.DCGM, hint=flagged[0], why=flagged[1])
    if NCCL_DEBUG.match(message):
        return None  # NCCL's own debug output: neutral (`classify`)
    if (figures := _failed_figures(record, whole)) is not None:
        return Finding(record, Kind.FAILURE, "builtin:failure-figures", test=figures[0] or test, why=figures[1])
    if (word := FAILURE_WORDS.search(NEGATED.sub("", whole))) is not None:
        return Finding(record, Kind.FAILURE, "builtin:failure-word", test=test, why=f"says {word.group(0)!r}")
    for rule in operator.failure:
        if rule.regex.fullmatch(message) is not None:
            return Finding(record, Kind.FAILURE, rule.name, test=test, why=f"operator pattern {rule.source}")
    return None


def _pass(record: Record, message: str, operator: OperatorRules) -> Finding | None:
    bare = NODE_MENTION.sub("", INSTANCE_ID.sub(NODE, HOSTNAME.sub(NODE, message))).strip()
    proves: set[Test] = set()
    names: list[str] = []
    device: str | None = None
    for rule in BUILTIN_PASS:
        if (match := rule.regex.fullmatch(bare)) is not None:
            proves |= rule.proves
            names.append(f"builtin:{rule.name}")
            device = device or match.groupdict().get("device")
    for rule in operator.passes:
        if (match := rule.regex.fullmatch(message)) is not None:
            proves |= rule.proves
            names.append(rule.name)
            groups = match.groupdict() if hasattr(match, "groupdict") else {}
            device = device or groups.get("device")
    if not names:
        return None
    test = next(iter(proves)) if len(proves) == 1 else None
    return Finding(record, Kind.PASS, "+".join(names), frozenset(proves), test=test, device=device, why="a pass")


def _dcgm_flags(record: Record, whole: str) -> tuple[Hint, str] | None:
    """A DCGM flag that is not `false` (in the text or a JSON field): replacementRequired wins over rebootRequired."""
    flags = [(name.lower(), value) for name, value in DCGM_FLAG.findall(whole)]
    flags += [(k.lower(), str(v)) for k, v in (record.head.fields or {}).items() if k.lower() in DCGM_FLAG_FIELDS]
    raised: dict[str, str] = {}
    for name, value in flags:  # a summary may name several GPUs: any flag raised raises it
        if value.strip().lower() != "false":
            raised.setdefault(name, value)
    if "replacementrequired" in raised:
        return "replace", f"replacementRequired: {raised['replacementrequired']}"
    if "rebootrequired" in raised:
        return "reboot", f"rebootRequired: {raised['rebootrequired']}"
    return None


def _failed_figures(record: Record, whole: str) -> tuple[Test | None, str] | None:
    """Figures that say something went wrong."""
    for line in record.text.splitlines():
        row = NCCL_ROW.fullmatch(line)
        if row is not None:
            for wrong in (row.group("wrong1"), row.group("wrong2")):
                if wrong is not None and wrong not in ("0", "N/A"):
                    return Test.NCCL, f"#wrong {wrong}"
    if (oob := OUT_OF_BOUNDS.search(whole)) is not None and (oob.group("n") != "0" or oob.group("ok").upper() != "OK"):
        return Test.NCCL, f"out of bounds values: {oob.group('n')} {oob.group('ok')}"
    if (field := OUT_OF_BOUND_FIELD.search(whole)) is not None and field.group("v").upper() != "OK":
        return Test.NCCL, f"NcclOutOfBoundError: {field.group('v')}"
    for count in FAILED_COUNT.finditer(whole):
        if float(count.group("n")) > 0:
            return None, f"a failed count: {count.group(0)}"
    if XID.search(whole):
        return Test.DCGM, "an XID error"
    if NVLINK_DOWN.search(whole):
        return Test.DCGM, "an NVLink error"
    return None


def _neutral_table(record: Record) -> bool:
    """Every line a line of NCCL's test table (header, rows with #wrong 0, footer)."""
    lines = [line for line in record.head.message.splitlines() if line.strip()]
    return bool(lines) and all(any(p.fullmatch(line.strip()) for p in NCCL_TABLE_LINES) for line in lines)


def _test_of(text: str) -> Test | None:
    return next((t for t, words in TEST_WORDS if words.search(text)), None)
