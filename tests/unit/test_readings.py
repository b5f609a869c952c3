"""What a cluster was seen to do (domain/readings.py): lines counted once, the settle time the measured lag gives,
the revisit time, and the same as the twin's `fidelity` block."""

import json

import pytest

from deephealth.domain.policy import GroupPolicy
from deephealth.domain.readings import MIN_LAG_SAMPLES, ClusterReadings, SeenLine
from deephealth.domain.result_lines import ResultLine, parse_line

T0 = 1_790_000_000.0
POLICY = GroupPolicy()  # start 300 s, floor 30 s, max 3600 s, revisit 3600 s
IID = "i-0aaaaaaaaaaaaaaaa"


def line(msg: str, lag: float, at: float = T0, level: str = "info", stream: str = IID) -> ResultLine:
    body = json.dumps({"level": level, "msg": msg})
    parsed = parse_line(f"DeepHealthCheckResults/{stream}", body, int(at * 1000), int((at + lag) * 1000))
    assert parsed is not None
    return parsed


def seen(*lines: ResultLine, settle: float = 300.0, kind: str = "instance-id") -> ClusterReadings:
    readings, _ = ClusterReadings(cluster="c").with_lines([SeenLine(x, kind, "node") for x in lines], settle)
    return readings


def test_a_cluster_with_no_history_uses_the_policys_conservative_settle_time():
    assert ClusterReadings(cluster="c").settle_s(POLICY, T0) == 300
    few = seen(*(line("Deep health check passed", 2, T0 + i) for i in range(MIN_LAG_SAMPLES - 1)))
    assert few.settle_s(POLICY, T0 + 100) == 300, "too few lines measured to come down"


def test_the_settle_time_comes_down_as_far_as_the_measured_lag_allows_never_below_the_floor():
    fast = seen(*(line("Deep health check passed", 2, T0 + i) for i in range(MIN_LAG_SAMPLES)))
    assert fast.settle_s(POLICY, T0 + 100) == 30  # 2 s * 1.5 + 10 s is under the floor
    slower = seen(*(line("Deep health check passed", 40 + i, T0 + i) for i in range(MIN_LAG_SAMPLES)))
    assert slower.settle_s(POLICY, T0 + 100) == 99  # the largest lag, 59 s, * 1.5 + 10 s, rounded up
    assert slower.settle_s(POLICY.model_copy(update={"log_settle_max_s": 60}), T0 + 100) == 60


def test_a_line_later_than_the_settle_time_raises_it_and_is_counted():
    readings = seen(line("Deep health check passed", 500), settle=300)
    assert readings.late_lines == 1 and readings.settle_s(POLICY, T0 + 600) == 760
    assert readings.revisit_s(POLICY, T0 + 600) == 3600
    late = seen(line("x passed", 2400))
    assert late.revisit_s(POLICY, T0 + 3000) == 4800, "twice the largest lag of the last day"
    assert late.revisit_s(POLICY, T0 + 3 * 86400) == 3600, "a lag older than a day no longer counts"
    assert seen(line("x passed", 5 * 86400)).revisit_s(POLICY, T0 + 5 * 86400) == 86400, "at most a day"


def test_the_settle_time_follows_the_last_day_only():
    old = seen(*(line("Deep health check passed", 200, T0 + i) for i in range(MIN_LAG_SAMPLES)))
    assert old.settle_s(POLICY, T0 + 3600) == 310
    assert old.settle_s(POLICY, T0 + 30 * 3600) == 310, "no lag measured in the last day: the start, or more"


def test_a_line_is_counted_once_however_many_looks_read_it():
    first = line("Deep health check passed", 5)
    readings, new = ClusterReadings(cluster="c").with_lines([SeenLine(first, "instance-id", "n")], 300)
    assert new == ["info summary"] and readings.lines == 1
    again, new = readings.with_lines(
        [SeenLine(first, "instance-id", "n"), SeenLine(line("x failed", 7), "instance-id", "n")], 300
    )
    assert new == ["info failure"], "a failure word at level info is a failure"
    assert again.lines == 2 and again.shapes["info summary"].count == 1


@pytest.mark.parametrize(
    ("lines", "kind", "expected"),
    [
        ([line("Deep health check passed", 0)], "instance-id", {}),
        ([line("Deep health check passed", 0)], "hostname", {"result_stream": "hostname"}),
        ([line("Deep health check passed", 0)], "logical-id", {"result_stream": "logical-id"}),
        ([line("Deep health check passed", 0)], "unknown-host",
         {"result_stream": "hostname", "foreign_hostnames": True}),
        ([line("stress-ng passed", 3), line("Deep health check passed", 60)], "instance-id",
         {"result_lines": "per-test", "log_lag_s": [3, 60]}),
        ([line("Deep health check passed", 0), line("DCGM failed", 0, level="warn")], "instance-id",
         {"failure_line": "warn"}),
    ],
)  # fmt: skip
def test_as_fidelity_names_what_was_seen(lines, kind, expected):
    assert seen(*lines, kind=kind).as_fidelity() == expected


def test_statuses_busy_errors_and_silence_reach_the_fidelity_block():
    readings = ClusterReadings(cluster="prod").with_counts(
        statuses_after_failure=["Failed", "Failed", "Running"],
        busy_error=("ConflictException", "A check is already in progress for cluster prod."),
        silent_nodes=3,
    )
    assert readings.no_pass_lines()
    assert readings.as_fidelity() == {
        "failed_status": "Failed",
        "busy_error": {"code": "ConflictException", "message": "A check is already in progress for cluster {cluster}."},
        "pass_line": "none",
    }
    assert not readings.model_copy(update={"pass_lines": 1}).no_pass_lines()
