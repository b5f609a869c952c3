"""Operators' result patterns (`result_patterns`): validated where the configuration is loaded (so `cdk synth` and
`make plan` refuse a bad one), layered (defaults, a cluster's, a group's), RE2 (linear time: no pattern stalls a
Lambda), and what they may change: make a line a pass of one test, neutral, or a failure, never lift a failure."""

from __future__ import annotations

import time

import pytest

from hyperpod_dhc.deephealth.domain.policy import ConfigError, parse_config
from hyperpod_dhc.deephealth.evidence.classify import classify
from hyperpod_dhc.deephealth.evidence.records import Event, assemble
from hyperpod_dhc.deephealth.evidence.rules import PATTERN_MAX_CHARS, Kind, PatternError, compile_patterns
from hyperpod_dhc.deephealth.evidence.rules import Test as Probe

BURN_IN = "^GPU burn-in \\d+/\\d+ complete \\(gpu_burn \\d+ s\\)$"


def record(message: str):
    (found,) = assemble([Event("i-0bbbbbbbbbbbbbbbb", 1_790_000_000_000, message, 1_790_000_001_000)])
    return found


@pytest.mark.parametrize(
    ("patterns", "problem"),
    [
        ({"neutral": ["GPU burn-in"]}, "must be anchored"),
        ({"neutral": ["^(a)\\1$"]}, "not an RE2 pattern"),
        ({"neutral": ["^(?=a)a$"]}, "not an RE2 pattern"),
        ({"neutral": ["^.*$"]}, "matches an empty message"),
        ({"neutral": ["^" + "a" * PATTERN_MAX_CHARS + "$"]}, "1 to 300 characters"),
        ({"neutral": ["^.*failed.*$"]}, "would make a failure line neutral"),
        ({"pass": {"efa-loopback": ["^EFA Loopback check (passed|failed) for device: \\w+$"]}}, "would make a failure"),
        ({"pass": {"dcgm-level-9": ["^x$"]}}, "not a test"),
        ({"ignore": ["^x$"]}, "unknown key"),
        ({"neutral": [42]}, "must be a string"),
    ],
)
def test_a_bad_pattern_is_refused_with_its_place_and_why(patterns, problem):
    with pytest.raises(PatternError, match=problem):
        compile_patterns(patterns)
    with pytest.raises(ConfigError, match=problem):
        parse_config({"defaults": {"result_patterns": patterns}})


def test_a_pathological_pattern_cannot_stall_a_lambda():
    """Catastrophic backtracking in Python's `re` (exponential: it would not finish); RE2 matches in linear time."""
    rules = compile_patterns({"neutral": ["^(a+)+$", "^(a|aa)+$", "^(.*a){20}$"]})
    evil = record("a" * 100_000 + "!")
    started = time.monotonic()
    finding = classify(evil, rules)
    assert time.monotonic() - started < 5.0
    assert finding.kind == Kind.UNRECOGNISED or finding.kind == Kind.NEUTRAL


def test_operators_place_a_line_the_rules_do_not_know():
    line = record("2026-03-29T18:40:00Z  info  GPU burn-in 8/8 complete (gpu_burn 60 s)")
    assert classify(line).kind == Kind.UNRECOGNISED
    assert classify(line, compile_patterns({"neutral": [BURN_IN]})).kind == Kind.NEUTRAL
    passed = classify(line, compile_patterns({"pass": {"dcgm": [BURN_IN]}}))
    assert passed.kind == Kind.PASS and passed.proves == {Probe.DCGM} and passed.rule == "policy:pass:dcgm#0"
    failed = classify(line, compile_patterns({"failure": [BURN_IN]}))
    assert failed.kind == Kind.FAILURE and failed.rule == "policy:failure#0"


def test_a_pattern_never_lifts_a_failure():
    """A broad operator pattern that passed validation still cannot make a failure a pass or neutral."""
    broad = "^DCGM .*\\[9999\\].*$"  # no documented failure line has device 9999: validation lets it through
    rules = compile_patterns({"neutral": [broad], "pass": {"dcgm": [broad]}})
    flagged = record(
        "2026-03-29T18:35:02Z  info  DCGM diagnostic health summary: dcgmCheckLevel: 4 dcgmVersion: 3.3.7 "
        "gpuDriverVersion: 535.183.01 gpuDeviceIds: [9999] replacementRequired: true rebootRequired: false"
    )
    assert classify(flagged, rules).kind == Kind.FAILURE
    assert classify(record("2026-03-29T18:35:02Z  error  DCGM [9999] ok"), rules).kind == Kind.FAILURE


def test_an_efa_pass_pattern_may_name_its_device():
    rules = compile_patterns({"pass": {"efa-loopback": ["^efa_test (?P<device>rdmap\\w+) ok$"]}})
    finding = classify(record("efa_test rdmap0s31 ok"), rules)
    assert finding.kind == Kind.PASS and finding.device == "rdmap0s31"


def test_layers_add_patterns_and_a_cluster_has_its_own():
    config = parse_config(
        {
            "defaults": {"result_patterns": {"neutral": ["^a$"]}},
            "groups": {"gpu": {"result_patterns": {"neutral": ["^b$"]}},
                       "prod/gpu": {"result_patterns": {"failure": ["^c$"]}}},
            "cluster_overrides": {"prod": {"result_patterns": {"neutral": ["^d$"]}}},
        }
    )  # fmt: skip
    assert config.policy_for("prod", "gpu").result_patterns == {"neutral": ["^a$", "^b$"], "failure": ["^c$"]}
    assert config.policy_for("dev", "gpu").result_patterns == {"neutral": ["^a$", "^b$"]}
    rules = config.result_rules("prod", "gpu")
    assert [r.source for r in rules.neutral] == ["^d$", "^a$", "^b$"] and [r.source for r in rules.failure] == ["^c$"]
    foreign = config.result_rules("prod", None)
    assert [r.source for r in foreign.neutral] == ["^d$", "^a$"], "a stream that is no node's: cluster and defaults"
    assert config.result_rules("dev", "cpu") is config.result_rules("dev", "cpu"), "compiled once"
