"""What a cluster was seen to do (domain/readings.py): records counted once, the settle time the measured lateness
gives (decaying, a quantile, not one outlier's), the revisit time, foreign streams and costly shapes, and the same
as the twin's `fidelity` block."""

import json

import pytest

from hyperpod_dhc.deephealth.domain.policy import GroupPolicy
from hyperpod_dhc.deephealth.domain.readings import LATENESS_HALF_LIFE_S, MIN_LAG_WEIGHT, ClusterReadings, SeenRecord
from hyperpod_dhc.deephealth.evidence.classify import classify
from hyperpod_dhc.deephealth.evidence.records import Event, assemble

T0 = 1_790_000_000.0
POLICY = GroupPolicy()  # start 300 s, floor 30 s, max 3600 s, revisit 3600 s
IID = "i-0aaaaaaaaaaaaaaaa"


def record(msg: str, late: float, at: float = T0, level: str = "info", stream: str = IID, left: float | None = None):
    """A record stamped `at`, readable `late` s after its node left its check (`left`, default: `at`)."""
    left = at if left is None else left
    body = json.dumps({"level": level, "msg": msg})
    (rec,) = assemble([Event(stream, int(at * 1000), body, int((max(at, left) + late) * 1000))])
    return SeenRecord(classify(rec), "instance-id", left_at=left)


def seen(*records: SeenRecord, settle: float = 300.0, now: float = T0) -> ClusterReadings:
    readings, _, _ = ClusterReadings(cluster="c").with_records(records, settle, now)
    return readings


PASSED = "Deep health check passed"


def test_a_cluster_with_no_history_uses_the_policys_conservative_settle_time():
    assert ClusterReadings(cluster="c").settle_s(POLICY, T0) == 300
    few = seen(*(record(PASSED, 2, T0 + i) for i in range(int(MIN_LAG_WEIGHT) - 1)))
    assert few.settle_s(POLICY, T0 + 100) == 300, "too little measured to come down"


def test_the_settle_time_comes_down_as_far_as_the_lateness_allows_never_below_the_floor():
    fast = seen(*(record(PASSED, 2, T0 + i) for i in range(20)))
    assert fast.settle_s(POLICY, T0 + 100) == 30  # 2 s * 1.5 + 10 s is under the floor
    slower = seen(*(record(PASSED, 40 + i, T0 + i) for i in range(20)))
    assert slower.settle_s(POLICY, T0 + 100) == 99  # 59 s (the 99th percentile's bucket) * 1.5 + 10 s, rounded up
    assert slower.settle_s(POLICY.model_copy(update={"log_settle_max_s": 60}), T0 + 100) == 60


def test_lateness_is_after_the_node_left_its_check_not_a_records_age():
    """Stamped when the test ran (90 min into the check) and shipped when the check ended: not late at all."""
    shipped = seen(*(record(PASSED, 3, at=T0 + i, left=T0 + 5400 + i) for i in range(20)))
    assert shipped.settle_s(POLICY, T0 + 6000) == 30 and shipped.lag_max_s == 3


def test_one_outlier_does_not_hold_the_settle_time_and_weighs_less_every_hour():
    lines = [record(PASSED, 40, T0 + i) for i in range(200)] + [record(PASSED, 3000, T0 + 300)]
    readings = seen(*lines)
    assert readings.settle_s(POLICY, T0 + 400) == 70, "the 99th percentile (40 s * 1.5 + 10), not the day's maximum"
    assert readings.revisit_s(POLICY, T0 + 400) == 6000, "a late record is revisited for: twice its lateness"
    assert readings.revisit_s(POLICY, T0 + 400 + 5 * LATENESS_HALF_LIFE_S) == 3600, "until it no longer weighs"


def test_a_record_later_than_the_settle_time_in_force_is_counted_and_raises_the_start():
    readings = seen(record(PASSED, 500), settle=300)
    assert readings.late_lines == 1 and readings.settle_s(POLICY, T0 + 600) == 760
    assert seen(record(PASSED, 5 * 86400), now=T0 + 5 * 86400).revisit_s(POLICY, T0 + 5 * 86400) == 86400, "a day"


def test_a_record_is_counted_once_however_many_looks_read_it():
    first = record(PASSED, 5)
    readings, new, _ = ClusterReadings(cluster="c").with_records([first], 300, T0)
    assert new == ["info builtin:summary"] and readings.lines == 1
    odd = record("GPU 3 temperature 87 C", 7, level="warn")
    again, new, _ = readings.with_records([first, odd], 300, T0)
    assert new == ["warn unrecognised: GPU # temperature # C"]
    assert again.lines == 2 and again.shapes["info builtin:summary"].count == 1


def test_streams_that_are_no_nodes_are_kept_once_each():
    foreign = record("x", 0, level="error", stream="3f2a9c")
    foreign = SeenRecord(foreign.finding, "opaque", foreign=True)
    readings, _, streams = ClusterReadings(cluster="c").with_records([foreign], 300, T0)
    assert streams == ["3f2a9c"] and readings.foreign_streams["3f2a9c"].count == 1


def test_a_shape_that_makes_a_share_of_the_verdicts_inconclusive_is_costly():
    shape = "info unrecognised: Starting DCGM diag"
    readings = ClusterReadings(cluster="c").with_counts(verdicts=10, inconclusive_shapes=[shape] * 2)
    assert readings.costly_shapes() == [], "fewer than three"
    readings = readings.with_counts(verdicts=2, inconclusive_shapes=[shape])
    assert readings.costly_shapes() == [shape]
    assert readings.with_counts(verdicts=100).costly_shapes() == [], "a small share of many verdicts"


@pytest.mark.parametrize(
    ("records", "kind", "expected"),
    [
        ([record(PASSED, 0)], "instance-id", {}),
        ([record(PASSED, 0)], "hostname", {"result_stream": "hostname"}),
        ([record(PASSED, 0)], "logical-id", {"result_stream": "logical-id"}),
        ([record(PASSED, 0)], "unknown-host", {"result_stream": "hostname", "foreign_hostnames": True}),
        ([record("stress-ng passed", 3), record(PASSED, 60)], "instance-id",
         {"result_lines": "per-test", "log_lag_s": [3, 60]}),
        ([record(PASSED, 0), record("DCGM failed", 0, level="warn")], "instance-id", {"failure_line": "warn"}),
        ([record(PASSED, 0), record("Starting the burn-in", 0, level="warn")], "instance-id",
         {"extra_lines": ['{"level": "warn", "msg": "Starting the burn-in"}']}),
    ],
)  # fmt: skip
def test_as_fidelity_names_what_was_seen(records, kind, expected):
    records = [SeenRecord(r.finding, kind, left_at=r.left_at) for r in records]
    assert seen(*records).as_fidelity() == expected


def test_statuses_busy_errors_and_silence_reach_the_fidelity_block():
    readings = ClusterReadings(cluster="prod").with_counts(
        statuses_after_failure=["Failed", "Failed", "Running"],
        busy_error=("ConflictException", 'A check is already in progress for cluster prod: {"op": "prod-2"}.'),
        silent_nodes=3,
    )
    assert readings.no_pass_lines()
    assert readings.as_fidelity() == {
        "failed_status": "Failed",
        "busy_error": {
            "code": "ConflictException",
            "message": 'A check is already in progress for cluster {cluster}: {"op": "prod-2"}.',
        },
        "pass_line": "none",
    }
    assert not readings.model_copy(update={"pass_lines": 1}).no_pass_lines()
