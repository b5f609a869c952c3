import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deephealth.domain.nodes import FAILURE_STATUSES, NodeRecord, NodeSnapshot, NodeState, Verdict
from deephealth.domain.verdicts import SKIP_GRACE_S, judge_check

T0 = 1_000_000.0
TIMEOUT = 3 * 3600


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


def snap(status="Running", instance_id="i-0000000000000000a") -> NodeSnapshot:
    return NodeSnapshot(group="g", instance_id=instance_id, logical_id="lid-1", status=status)


@pytest.mark.parametrize(
    ("record", "snapshot", "log_error", "elapsed", "expected"),
    [
        (checking(seen_in_progress=True), snap(), None, 3000, Verdict.PASSED),
        (checking(seen_in_progress=True), snap(), "ERROR: DCGM level 4 failed", 3000, Verdict.FAILED),
        (checking(seen_in_progress=True), snap("ShuttingDown"), None, 3000, None),  # a replacement in flight
        (checking(seen_in_progress=True), snap("ShuttingDown"), None, TIMEOUT + 1, Verdict.INCONCLUSIVE),
        (checking(seen_in_progress=True), snap("Failure"), None, 3000, Verdict.FAILED),
        (checking(seen_in_progress=True), snap("Pending"), None, 3000, Verdict.FAILED),
        (checking(), snap(instance_id="i-0000000000000000b"), None, 3000, Verdict.REPLACED_BY_HYPERPOD),
        (checking(), None, None, 3000, Verdict.GONE),
        (checking(), snap(), None, SKIP_GRACE_S, Verdict.SKIPPED),
        (checking(), snap(), None, SKIP_GRACE_S - 1, None),  # may still start: wait
        (checking(seen_in_progress=True), snap("DeepHealthCheckInProgress"), None, 3000, None),
        (checking(seen_in_progress=True), snap("DeepHealthCheckInProgress"), None, TIMEOUT + 1, Verdict.INCONCLUSIVE),
        (checking(), snap("SystemUpdating"), None, TIMEOUT + 1, Verdict.INCONCLUSIVE),
        (checking(), snap("SystemUpdating"), None, 100, None),
        (checking(observe_only=True), snap(), None, 10, Verdict.PASSED),
        (checking(observe_only=True), snap(), "ERROR: bandwidth", 10, Verdict.FAILED),
    ],
)
def test_decision_table(record, snapshot, log_error, elapsed, expected):
    judgement = judge_check(record, snapshot, log_error, T0 + elapsed, TIMEOUT)
    assert (judgement.verdict if judgement else None) == expected
    if judgement:
        assert judgement.evidence, "every verdict carries its evidence"


@pytest.mark.parametrize("log_error", [None, "ERROR: DCGM level 4 failed"])
def test_a_claimed_node_whose_check_never_started_is_never_judged(log_error):
    """Even seen in DeepHealthCheckInProgress and back to Running (someone else's check), hours later."""
    record = checking(check_started_at=None, seen_in_progress=True)
    for elapsed in (0, SKIP_GRACE_S, 4 * TIMEOUT):
        assert judge_check(record, snap(), log_error, T0 + elapsed, TIMEOUT) is None


def test_never_seen_in_progress_is_not_a_pass():
    judgement = judge_check(checking(), snap(), None, T0 + 4 * 3600, TIMEOUT)
    assert judgement.verdict == Verdict.SKIPPED


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
)
SNAPSHOTS = st.none() | st.builds(snap, status=STATUSES, instance_id=IDS)
LOG_ERRORS = st.none() | st.just("") | st.text(max_size=400)


def failure_evidence(record: NodeRecord, snapshot: NodeSnapshot, log_error: str | None) -> bool:
    """What may make a node FAILED: an error line, ShuttingDown/Failure, or Pending after being seen in the check."""
    return (
        bool(log_error)
        or snapshot.status in FAILURE_STATUSES
        or (snapshot.status == "Pending" and record.seen_in_progress)
    )


@settings(max_examples=1000)
@given(
    record=RECORDS,
    snapshot=SNAPSHOTS,
    log_error=LOG_ERRORS,
    elapsed=st.floats(0, 30_000),
    timeout=st.floats(600, 21_600),
)
def test_decision_table_properties(record, snapshot, log_error, elapsed, timeout):
    judgement = judge_check(record, snapshot, log_error, T0 + elapsed, timeout)
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
    failing = failure_evidence(record, snapshot, log_error)
    assert (verdict == Verdict.FAILED) == failing, "FAILED exactly when there is failure evidence"
    if verdict == Verdict.PASSED:
        assert record.seen_in_progress or record.observe_only, "never seen in the check is not a pass"
        assert snapshot.status == "Running" and not log_error
    if verdict in (Verdict.SKIPPED, Verdict.INCONCLUSIVE):
        assert not failing, "missing evidence never comes with failure evidence"
    if verdict == Verdict.SKIPPED:
        assert not record.seen_in_progress and not record.observe_only


@given(record=RECORDS, log_error=LOG_ERRORS, elapsed=st.floats(0, 30_000))
def test_a_missing_snapshot_is_always_gone(record, log_error, elapsed):
    assert judge_check(record, None, log_error, T0 + elapsed, TIMEOUT).verdict == Verdict.GONE


@given(record=RECORDS, status=STATUSES, log_error=LOG_ERRORS, elapsed=st.floats(0, 30_000))
def test_a_changed_instance_id_is_always_replaced_by_hyperpod(record, status, log_error, elapsed):
    record = record.model_copy(update={"instance_id": "i-0000000000000000a"})
    judgement = judge_check(record, snap(status, "i-0000000000000000b"), log_error, T0 + elapsed, TIMEOUT)
    assert judgement.verdict == Verdict.REPLACED_BY_HYPERPOD
