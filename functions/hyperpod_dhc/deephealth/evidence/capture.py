"""A captured check: one node's check as the controller read it, as a JSON document, and its judgement.

`hpdhc readings capture CLUSTER NODE --out FILE` writes one (the API builds it with the controller's own read);
`hpdhc readings classify FILE [--policy FILE] --json` judges it offline with `judge_capture`, the code the
controller judges with (records, rules, attribution, proof). `tests/corpus/` holds captured checks built from the
lines AWS documents. The document:

    {"events": [{"logStreamName": "DeepHealthCheckResults/...", "timestamp": ms, "ingestionTime": ms,
                 "message": "..."}],                       # as `aws logs filter-log-events` prints them
     "node": {"instance_id": "i-...", "hostname": "ip-10-1-0-2", "instance_type": "ml.p5.48xlarge",
              "logical_id": "..."},                        # logical_id optional
     "checks": ["InstanceStress"], "check_started_at": ms, "check_left_at": ms, "nccl_set_size": 2,
     "result_patterns": {...}, "efa_devices": n,           # optional: the group's operator patterns, an override
     "previous_verdict_at": ms, "revisit_until": ms,       # optional: the window's other edges
     "anonymous_rechecks": 0}                              # optional: re-checks an anonymous failure already cost

Events of streams that are not the node's are judged as the controller judges them: foreign.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperpod_dhc.deephealth.evidence.attribute import Named, NodeEvidence, StreamIndex, node_evidence
from hyperpod_dhc.deephealth.evidence.classify import Finding, classify
from hyperpod_dhc.deephealth.evidence.efa import efa_devices
from hyperpod_dhc.deephealth.evidence.judge import Proof, Requirements, prove
from hyperpod_dhc.deephealth.evidence.records import Event, assemble
from hyperpod_dhc.deephealth.evidence.rules import OperatorRules, compile_patterns, required_tests

VERDICTS = ("passed", "failed", "inconclusive")


class CaptureError(ValueError):
    """A document that is not a captured check; the message says what is wrong."""


@dataclass(frozen=True)
class Capture:
    events: tuple[Event, ...]
    instance_id: str
    checks: tuple[str, ...]
    check_started_at: float
    check_left_at: float | None
    hostname: str | None = None
    instance_type: str | None = None
    logical_id: str | None = None
    nccl_set_size: int | None = None
    result_patterns: Mapping[str, Any] = field(default_factory=dict)
    efa_devices: int | None = None
    previous_verdict_at: float | None = None
    revisit_until: float | None = None
    anonymous_rechecks: int = 0

    @property
    def key(self) -> str:
        return self.logical_id or self.instance_id

    @classmethod
    def of(cls, doc: Any) -> Capture:
        """A captured check from its JSON document, or CaptureError."""
        if not isinstance(doc, Mapping):
            raise CaptureError("a captured check is a JSON object")
        node = doc.get("node")
        if not isinstance(node, Mapping) or not isinstance(node.get("instance_id"), str):
            raise CaptureError("node.instance_id is missing")
        raw_events = doc.get("events")
        if not isinstance(raw_events, list):
            raise CaptureError("events must be a list of log events")
        events: list[Event] = []
        for i, raw in enumerate(raw_events):
            try:
                event = Event.of(raw)
            except (KeyError, TypeError, ValueError) as err:
                raise CaptureError(f"events[{i}] is not a log event: {err}") from None
            if event is not None:
                events.append(event)
        checks = doc.get("checks") or []
        if not isinstance(checks, list) or not all(isinstance(c, str) for c in checks) or not checks:
            raise CaptureError("checks must list the check types the node ran")
        started = doc.get("check_started_at")
        if not isinstance(started, (int, float)):
            raise CaptureError("check_started_at (epoch ms) is missing")
        return cls(
            events=tuple(events),
            instance_id=node["instance_id"],
            checks=tuple(checks),
            check_started_at=started / 1000,
            check_left_at=_seconds(doc.get("check_left_at")),
            hostname=_short(node.get("hostname")),
            instance_type=node.get("instance_type"),
            logical_id=node.get("logical_id"),
            nccl_set_size=doc.get("nccl_set_size"),
            result_patterns=doc.get("result_patterns") or {},
            efa_devices=doc.get("efa_devices"),
            previous_verdict_at=_seconds(doc.get("previous_verdict_at")),
            revisit_until=_seconds(doc.get("revisit_until")),
            anonymous_rechecks=int(doc.get("anonymous_rechecks") or 0),
        )

    def as_json(self) -> dict[str, Any]:
        node = {"instance_id": self.instance_id, "hostname": self.hostname, "instance_type": self.instance_type}
        if self.logical_id:
            node["logical_id"] = self.logical_id
        doc: dict[str, Any] = {
            "events": [e.as_json() for e in self.events],
            "node": node,
            "checks": list(self.checks),
            "check_started_at": _ms(self.check_started_at),
            "check_left_at": _ms(self.check_left_at),
            "nccl_set_size": self.nccl_set_size,
        }
        optional = {
            "result_patterns": dict(self.result_patterns) or None,
            "efa_devices": self.efa_devices,
            "previous_verdict_at": _ms(self.previous_verdict_at),
            "revisit_until": _ms(self.revisit_until),
            "anonymous_rechecks": self.anonymous_rechecks or None,
        }
        doc.update({k: v for k, v in optional.items() if v is not None})
        return doc


@dataclass(frozen=True)
class Judged:
    """A captured check judged: every record's finding, the node's evidence, the proof, and the verdict."""

    findings: tuple[Finding, ...]
    evidence: NodeEvidence
    proof: Proof
    verdict: str
    requirements: Requirements

    def as_json(self) -> dict[str, Any]:
        deciding = {id(f) for f in self.proof.deciding}
        return {
            "verdict": self.verdict,
            "hint": self.proof.hint if self.verdict == "failed" else None,
            "why": self.proof.why,
            "outcome": self.proof.outcome,
            "proven": sorted(t.value for t in self.proof.proven),
            "missing": sorted(t.value for t in self.proof.missing),
            "required": sorted(t.value for t in self.requirements.needed),
            "efa_devices": self.requirements.efa_devices,
            "lines": [{**f.as_json(), "decided": id(f) in deciding} for f in self.findings],
        }


def judge_capture(capture: Capture, patterns: Mapping[str, Any] | None = None) -> Judged:
    """Judge a captured check as the controller would, on its lines alone (as if the node came back `Running`
    from its check): `patterns` replaces the capture's operator patterns (PatternError if they are invalid)."""
    rules: OperatorRules = compile_patterns(capture.result_patterns if patterns is None else patterns)
    index = StreamIndex.of([Named(capture.key, capture.instance_id, capture.logical_id, capture.hostname)])
    findings = tuple(classify(record, rules) for record in assemble(capture.events))
    placed = [(f, *index.owner(f.record.stream)) for f in findings]
    evidence = node_evidence(
        placed,
        capture.key,
        capture.check_started_at,
        capture.check_left_at,
        not_before=capture.previous_verdict_at,
        fail_edge=capture.revisit_until,
    )
    requirements = Requirements(required_tests(capture.checks), efa_devices(capture.instance_type, capture.efa_devices))
    proof = prove(evidence, requirements)
    return Judged(findings, evidence, proof, verdict_of(proof, capture.anonymous_rechecks), requirements)


def verdict_of(proof: Proof, anonymous_rechecks: int = 0) -> str:
    """passed, failed or inconclusive, as a node whose lines are all in would get: an anonymous failure costs one
    re-check (inconclusive), after which it no longer keeps the node from passing."""
    if proof.outcome == "passed" or (proof.outcome == "anonymous-failure" and anonymous_rechecks >= 1):
        return "passed"
    return "failed" if proof.outcome == "failed" else "inconclusive"


def _seconds(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def _short(hostname: Any) -> str | None:
    return hostname.split(".", 1)[0] if isinstance(hostname, str) and hostname else None
