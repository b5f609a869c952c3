import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState, Verdict, failure_like
from deephealth.domain.result_lines import ALL_TESTS, Finding, ResultLine
from deephealth.domain.result_lines import Test as Probe
from deephealth.domain.results import NodeEvidence
from deephealth.domain.rounds import SKIP_GRACE_S
from deephealth.domain.verdicts import Look, judge_check, left_check

T0 = 1_000_000.0
TIMEOUT = 3 * 3600
SETTLE = 300
FAIL_LINE = ResultLine(T0, T0, "x", Finding.FAIL, "ERROR: DCGM level 4 failed", level="error")
ODD_LINE = ResultLine(T0, T0, "x", Finding.UNRECOGNISED, "GPU 3 at 87 C", level="warn")
ERROR = NodeEvidence(failures=(FAIL_LINE,), own_lines=1)
PASS = NodeEvidence(proven=ALL_TESTS, own_lines=1)
NOTHING = NodeEvidence()
ANON_ERROR = NodeEvidence(anonymous_failures=(FAIL_LINE,), anonymous_passes=3, anonymous_proven=ALL_TESTS)
ANON_PASS = NodeEvidence(anonymous_passes=4, anonymous_proven=ALL_TESTS)


def checking(**kw) -> NodeRecord:
    base = dict(
        cluster="c",
        key="lid-1",
        group="g",
        logical_id="lid-1",
        instance_id="i-0000000000000000a",
        state=NodeState.CHECKING,
        check_started_at=T0,
        round_id="c-r000000",
    )
    return NodeRecord(**{**base, **kw})


def left(**kw) -> NodeRecord:
    """Seen in the check, then done with it 1000 s after it started."""
    return checking(seen_in_progress=True, check_left_at=T0 + 1000, **kw)


def snap(status="Running", instance_id="i-0000000000000000a") -> NodeSnapshot:
    return NodeSnapshot(group="g", instance_id=instance_id, logical_id="lid-1", status=status)


def look(elapsed, results=None, active=None, timeout=TIMEOUT) -> Look:
    return Look(T0 + elapsed, results, active, timeout, SETTLE)


AFTER = 1000 + SETTLE  # elapsed at which a node that left at 1000 s has settled


@pytest.mark.parametrize(
    ("record", "snapshot", "results", "elapsed", "active", "expected"),
    [
        (left(), snap(), PASS, AFTER, None, Verdict.PASSED),
        (left(), snap(), PASS, AFTER - 1, None, None),  # its line may still be on its way
        (left(), snap(), None, AFTER, None, None),  # logs not read in this look
        (left(), snap(), ERROR, AFTER, None, Verdict.FAILED),
        (left(), snap(), NOTHING, AFTER, None, Verdict.SKIPPED),  # queued behind a job, or superseded
        (left(), snap(), ANON_ERROR, AFTER, None, Verdict.INCONCLUSIVE),
        (left(), snap(), ANON_PASS, AFTER, None, Verdict.INCONCLUSIVE),
        (left(), snap("DeepHealthCheckInProgress"), NOTHING, AFTER, False, Verdict.INCONCLUSIVE),  # isolated
        (left(), snap("DeepHealthCheckInProgress"), ERROR, AFTER, False, Verdict.FAILED),
        (left(), snap("DetachInProgress"), NOTHING, AFTER, None, None),  # moving: its listing will say more
        (checking(seen_in_progress=True), snap("ShuttingDown"), None, 3000, None, None),  # a replacement in flight
        (checking(seen_in_progress=True), snap("ShuttingDown"), None, TIMEOUT + 1, None, Verdict.INCONCLUSIVE),
        (checking(seen_in_progress=True), snap("Failure"), None, 3000, None, Verdict.FAILED),
        (checking(seen_in_progress=True), snap("Pending"), None, 3000, None, Verdict.FAILED),
        (checking(), snap(instance_id="i-0000000000000000b"), None, 3000, None, Verdict.REPLACED_BY_HYPERPOD),
        (checking(), None, None, 3000, None, Verdict.GONE),
        (checking(), snap(), None, SKIP_GRACE_S, False, Verdict.SKIPPED),
        (checking(), snap(), None, SKIP_GRACE_S, True, None),  # the operation still runs: a slow start
        (checking(), snap(), None, SKIP_GRACE_S, None, None),  # not asked: wait for a look that asks
        (checking(), snap(), None, SKIP_GRACE_S - 1, False, None),  # may still start: wait
        (checking(seen_in_progress=True), snap("DeepHealthCheckInProgress"), None, 3000, None, None),
        (checking(seen_in_progress=True), snap("DeepHealthCheckInProgress"), None, TIMEOUT + 1, None,
         Verdict.INCONCLUSIVE),
        (checking(), snap("SystemUpdating"), None, TIMEOUT + 1, None, Verdict.INCONCLUSIVE),
        (checking(), snap("SystemUpdating"), None, 100, None, None),
        (left(observe_only=True), snap(), NOTHING, AFTER, None, Verdict.PASSED),  # HyperPod's on-start pass
        # First seen already Running: nothing says it had its on-start checks. Checked again, never passed.
        (checking(observe_only=True, check_left_at=T0 + 1000), snap(), NOTHING, AFTER, None, Verdict.SKIPPED),
        (left(observe_only=True), snap(), ANON_ERROR, AFTER, None, Verdict.INCONCLUSIVE),
        (left(observe_only=True), snap(), ERROR, AFTER, None, Verdict.FAILED),
    ],
)  # fmt: skip
def test_decision_table(record, snapshot, results, elapsed, active, expected):
    judgement = judge_check(record, snapshot, look(elapsed, results, active))
    assert (judgement.verdict if judgement else None) == expected
    if judgement:
        assert judgement.evidence, "every verdict carries its evidence"


def test_result_lines_that_name_nobody_are_final_a_missing_line_is_rechecked():
    assert not judge_check(left(), snap(), look(AFTER, ANON_PASS)).recheck
    assert not judge_check(left(), snap(), look(AFTER, ANON_ERROR)).recheck
    assert judge_check(left(), snap(), look(AFTER, NOTHING)).recheck


@pytest.mark.parametrize(
    ("record", "status", "active", "expected"),
    [
        (checking(seen_in_progress=True), "Running", None, True),
        (checking(seen_in_progress=True), "DeepHealthCheckInProgress", None, False),
        (checking(seen_in_progress=True), "DeepHealthCheckInProgress", True, False),
        (checking(seen_in_progress=True), "DeepHealthCheckInProgress", False, True),  # isolated after a failure
        (checking(observe_only=True, seen_in_progress=True), "DeepHealthCheckInProgress", False, False),
        (checking(), "Running", False, False),  # never seen in it: not "done" with it
    ],
)
def test_left_check(record, status, active, expected):
    assert left_check(record, snap(status), active) == expected


@pytest.mark.parametrize("results", [None, ERROR, PASS])
def test_a_claimed_node_whose_check_never_started_is_never_judged(results):
    """Even seen in DeepHealthCheckInProgress and back to Running (someone else's check), hours later."""
    record = checking(check_started_at=None, seen_in_progress=True, check_left_at=T0)
    for elapsed in (0, SKIP_GRACE_S, 4 * TIMEOUT):
        assert judge_check(record, snap(), look(elapsed, results, False)) is None


# ---------------------------------------------------------------- properties of the decision table

IDS = st.sampled_from([None, "i-0000000000000000a", "i-0000000000000000b"])
STATUSES = st.sampled_from(
    ["Running", "DeepHealthCheckInProgress", "Pending", "ShuttingDown", "Failure", "SystemUpdating", "NotFound"]
) | st.text(max_size=20)
RECORDS = st.builds(
    checking,
    instance_id=IDS,
    seen_in_progress=st.booleans(),
    observe_only=st.booleans(),
    check_started_at=st.none() | st.floats(T0 - 30_000, T0),
    check_left_at=st.none() | st.floats(T0 - 30_000, T0 + 30_000),
)
SNAPSHOTS = st.none() | st.builds(snap, status=STATUSES, instance_id=IDS)
TESTS = st.frozensets(st.sampled_from(list(Probe)))
LINES = st.lists(st.sampled_from([FAIL_LINE]), max_size=2).map(tuple)
ODD = st.lists(st.sampled_from([ODD_LINE]), max_size=2).map(tuple)
RESULTS = st.none() | st.builds(
    NodeEvidence,
    proven=TESTS,
    failures=LINES,
    unrecognised=ODD,
    own_lines=st.integers(0, 6),
    anonymous_failures=LINES,
    anonymous_unrecognised=ODD,
    anonymous_proven=TESTS,
    anonymous_passes=st.integers(0, 3),
)
REQUIRED = st.sampled_from(
    [frozenset({Probe.STRESS, Probe.GPU_PCI, Probe.DCGM, Probe.EFA}), frozenset({Probe.NCCL}), ALL_TESTS]
)


def failure_evidence(record: NodeRecord, snapshot: NodeSnapshot, results: NodeEvidence | None) -> bool:
    """What may make a node FAILED: a failure line of its own, Failure or a status the API does not document, or
    Pending after being seen in the check."""
    return (
        bool(results and results.failures)
        or failure_like(snapshot.status)
        or (snapshot.status == "Pending" and record.seen_in_progress)
    )


@settings(max_examples=1000)
@given(
    record=RECORDS,
    snapshot=SNAPSHOTS,
    results=RESULTS,
    elapsed=st.floats(0, 30_000),
    active=st.none() | st.booleans(),
    timeout=st.floats(600, 21_600),
    required=REQUIRED,
    silence=st.none() | st.floats(600, 7200),
)
def test_decision_table_properties(record, snapshot, results, elapsed, active, timeout, required, silence):
    now = T0 + elapsed
    judgement = judge_check(record, snapshot, Look(now, results, active, timeout, SETTLE, required, silence))
    verdict = judgement.verdict if judgement else None
    if judgement is not None:
        assert judgement.evidence and all(judgement.evidence), "every verdict carries its evidence"
    if snapshot is None:
        assert verdict == Verdict.GONE, "a node no longer listed is gone, whatever else is known"
        return
    replaced = bool(record.instance_id and snapshot.instance_id and snapshot.instance_id != record.instance_id)
    assert (verdict == Verdict.REPLACED_BY_HYPERPOD) == replaced, "a changed instance id is always a replacement"
    if replaced:
        return
    if record.check_started_at is None and not record.observe_only:
        assert verdict is None, "a claimed node whose check never started gets no check verdict"
        return
    failing = failure_evidence(record, snapshot, results)
    assert (verdict == Verdict.FAILED) == failing, "FAILED exactly when there is failure evidence"
    if verdict == Verdict.PASSED:
        # Positive evidence only: seen in the check, done with it, settled, Running, and a pass line for every test
        # it ran (or HyperPod's on-start pass, or silence that lasted where the policy accepts it), with no line
        # about it or naming nobody that is not a pass.
        assert record.seen_in_progress or record.observe_only, "never seen in the check is not a pass"
        assert record.check_left_at is not None and now - record.check_left_at >= SETTLE, "read before settling"
        assert snapshot.status == "Running" and results is not None
        assert not results.failures and not results.anonymous_failures, "a failure line is never a pass"
        assert not results.unrecognised and not results.anonymous_unrecognised, "an unknown line is never a pass"
        proven = required <= results.proven | (results.anonymous_proven & {Probe.NCCL})
        silent = silence is not None and results.silent and active is False and now - record.check_left_at >= silence
        assert proven or record.observe_only or silent, "every test it ran proven passed"
    if verdict in (Verdict.SKIPPED, Verdict.INCONCLUSIVE):
        assert not failing, "missing evidence never comes with failure evidence"


@given(record=RECORDS, results=RESULTS, elapsed=st.floats(0, 30_000))
def test_a_missing_snapshot_is_always_gone(record, results, elapsed):
    assert judge_check(record, None, look(elapsed, results)).verdict == Verdict.GONE


@given(record=RECORDS, status=STATUSES, results=RESULTS, elapsed=st.floats(0, 30_000))
def test_a_changed_instance_id_is_always_replaced_by_hyperpod(record, status, results, elapsed):
    record = record.model_copy(update={"instance_id": "i-0000000000000000a"})
    judgement = judge_check(record, snap(status, "i-0000000000000000b"), look(elapsed, results))
    assert judgement.verdict == Verdict.REPLACED_BY_HYPERPOD
