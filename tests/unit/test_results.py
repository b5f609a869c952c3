"""Result lines: what a line says and whom it names, under every stream and line layout the docs allow."""

import json

import pytest

from deephealth.domain.results import Level, ResultLine, ResultLog, parse_line

IID, OTHER = "i-0123456789abcdef0", "i-0fedcba9876543210"
FAULT = (
    "Encountered FaultyInstance. Replace the Instance. Region: us-east-1, InstanceType: ml.p5.48xlarge. "
    "ERROR: DCGM diagnostic level 4 failed on GPU 3"
)


def line(level, msg, **fields) -> str:
    return json.dumps({"level": level, "ts": "2026-12-03T10:00:00Z", "msg": msg, **fields})


@pytest.mark.parametrize(
    ("stream", "message", "level", "names"),
    [
        (f"DeepHealthCheckResults/{IID}", line("error", FAULT), Level.ERROR, {IID}),  # the fake's default layout
        ("DeepHealthCheckResults/3f2a9c", line("error", FAULT), Level.ERROR, set()),  # the documented example
        ("DeepHealthCheckResults/3f2a9c", line("error", FAULT, instance_id=IID), Level.ERROR, {IID}),
        ("DeepHealthCheckResults/3f2a9c", line("error", f"{FAULT} Instance: {IID}"), Level.ERROR, {IID}),
        ("DeepHealthCheckResults/ip-10-1-2-3", line("info", "Deep health check passed"), Level.PASS, {"ip-10-1-2-3"}),
        ("DeepHealthCheckResults/x", line("info", f"Deep health check passed on instance {IID}"), Level.PASS, {IID}),
        ("DeepHealthCheckResults/x", "2026-03-29T18:04:20Z  info  stress-ng success", Level.PASS, set()),
        ("DeepHealthCheckResults/x", "2026-03-29T18:04:20Z  dcgm level 4 failed on GPU 2", Level.ERROR, set()),
        ("DeepHealthCheckResults/x", line("info", "running DCGM diagnostic level 4"), Level.OTHER, set()),
        ("DeepHealthCheckResults/x", line("info", "check failed to pass"), Level.OTHER, set()),  # both words: no pass
    ],
)
def test_parse_line(stream, message, level, names):
    parsed = parse_line(stream, message, 1_000_000)
    assert parsed is not None and parsed.level == level and parsed.names == names and parsed.at == 1000.0


def test_other_streams_are_not_results():
    assert parse_line("SageMaker/instance-log", line("error", FAULT), 0) is None


def log(*lines: ResultLine) -> ResultLog:
    return ResultLog(lines=lines, since=0.0, read_at=10_000.0)


def at(t, level, *names) -> ResultLine:
    return ResultLine(at=t, level=level, names=frozenset(names), text=f"{level} line")


def test_a_node_is_judged_by_lines_naming_it_since_its_check_started():
    results = log(
        at(100, Level.ERROR, IID),  # an earlier check of the same instance: not this one
        at(600, Level.PASS, IID),
        at(650, Level.ERROR, OTHER),  # another node's failure
    ).for_node(IID, None, since=500)
    assert results.passed and results.error is None and results.unattributed_errors == 0


def test_an_error_naming_the_node_wins_over_a_pass():
    results = log(at(600, Level.PASS, IID), at(610, Level.ERROR, IID)).for_node(IID, None, since=500)
    assert results.error and not results.passed


def test_a_node_is_found_by_its_hostname():
    results = log(at(600, Level.ERROR, "ip-10-1-2-3")).for_node(IID, "ip-10-1-2-3.ec2.internal", since=500)
    assert results.error


def test_lines_naming_nobody_are_counted_not_attributed():
    results = log(at(600, Level.ERROR), at(610, Level.PASS), at(620, Level.PASS)).for_node(IID, None, since=500)
    assert not results.passed and results.error is None
    assert (results.unattributed_errors, results.unattributed_passes) == (1, 2)
