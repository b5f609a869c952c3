"""What a node's evidence proves about its check: the evidence half of the verdict (`domain/verdicts.py` adds the
statuses and the clock).

- **failed**: a failure of its own (the first quoted; a DCGM flag's hint, `replace` over `reboot`);
- **unrecognised**: a record of its own that states an outcome no rule places: never a pass, and an operator's
  to read (a re-check would meet the same line);
- **passed**: for every test its check ran, a pass of its own (EFA: one per device the instance type has, or one
  for the EFA test as a whole; none on a type without EFA), and no failure in its window on a foreign stream;
- **anonymous failure**: it would pass, but a foreign stream wrote a failure inside its window;
- **incomplete**: records of its own, but not every test's pass (yet);
- **silent**: nothing of its own at all;
- **unplaced**: a failure on a stream this look could not place (the next look at the whole cluster can).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hyperpod_dhc.deephealth.evidence.attribute import NodeEvidence
from hyperpod_dhc.deephealth.evidence.classify import Finding
from hyperpod_dhc.deephealth.evidence.rules import Hint, Test

Outcome = Literal["passed", "failed", "unrecognised", "anonymous-failure", "incomplete", "silent", "unplaced"]


@dataclass(frozen=True)
class Requirements:
    """What a pass must prove: the tests its check types run, and the EFA devices its instance type has."""

    tests: frozenset[Test]
    efa_devices: int = 1

    @property
    def needed(self) -> frozenset[Test]:
        return self.tests - {Test.EFA} if self.efa_devices <= 0 else self.tests


@dataclass(frozen=True)
class Proof:
    outcome: Outcome
    why: str
    deciding: tuple[Finding, ...] = ()
    proven: frozenset[Test] = frozenset()
    missing: frozenset[Test] = frozenset()
    hint: Hint | None = None


def proven(passes: tuple[Finding, ...], efa_devices: int) -> tuple[frozenset[Test], int]:
    """The tests these passes prove, and how many distinct EFA devices they name."""
    tests: set[Test] = set()
    devices: set[str] = set()
    for finding in passes:
        if Test.EFA in finding.proves and finding.device and finding.proves == {Test.EFA}:
            devices.add(finding.device)
            continue
        tests |= finding.proves
    if devices and len(devices) >= max(1, efa_devices):
        tests.add(Test.EFA)
    return frozenset(tests), len(devices)


def prove(evidence: NodeEvidence, required: Requirements) -> Proof:
    """The evidence's proof (see the module's docstring)."""
    if evidence.failures:
        failures = evidence.failures
        hints = {f.hint for f in failures}
        hint: Hint | None = "replace" if "replace" in hints else "reboot" if "reboot" in hints else None
        return Proof("failed", f"a failure of its own: {failures[0].why}", failures[:3], hint=hint)
    if evidence.unrecognised:
        first = evidence.unrecognised[0]
        return Proof("unrecognised", f"a record of its own no rule places ({first.why})", evidence.unrecognised[:3])
    if evidence.unplaced:
        return Proof("unplaced", "a failure on a stream this look cannot place", evidence.unplaced[:1])
    tests, devices = proven(evidence.passes, required.efa_devices)
    needed = required.needed
    missing = needed - tests
    if not missing:
        if evidence.anonymous_failures:
            anonymous = evidence.anonymous_failures
            why = f"a failure in its window on a stream that is no node's ({anonymous[0].record.stream})"
            return Proof("anonymous-failure", why, anonymous[:3], proven=tests)
        why = "its own records prove " + (", ".join(sorted(t.value for t in needed)) or "what its check ran")
        return Proof("passed", why, evidence.passes, proven=tests)
    if evidence.own:
        efa = f" ({devices} of {required.efa_devices} EFA devices)" if Test.EFA in missing and devices else ""
        why = f"its own records prove {_names(tests) or 'nothing'}, none says {_names(missing)} passed{efa}"
        return Proof("incomplete", why, evidence.passes[:3], proven=tests, missing=missing)
    return Proof("silent", "no record of its own", proven=tests, missing=missing)


def _names(tests: frozenset[Test]) -> str:
    return ", ".join(sorted(t.value for t in tests))
