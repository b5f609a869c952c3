import pytest

from deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState, Verdict
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
        (checking(seen_in_progress=True), snap("ShuttingDown"), None, 3000, Verdict.FAILED),
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


def test_never_seen_in_progress_is_not_a_pass():
    judgement = judge_check(checking(), snap(), None, T0 + 4 * 3600, TIMEOUT)
    assert judgement.verdict == Verdict.SKIPPED
