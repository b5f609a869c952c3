import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperpod_dhc.deephealth.domain.nodes import IN_PROGRESS, NodeRecord, NodeSnapshot, NodeState, Verdict, failure_like
from hyperpod_dhc.deephealth.domain.rounds import SKIP_GRACE_S
from hyperpod_dhc.deephealth.domain.verdicts import Look, judge_check, judge_late, left_check
from hyperpod_dhc.deephealth.evidence.attribute import NodeEvidence
from hyperpod_dhc.deephealth.evidence.classify import Finding, classify
from hyperpod_dhc.deephealth.evidence.judge import Requirements
from hyperpod_dhc.deephealth.evidence.records import Event, assemble
from hyperpod_dhc.deephealth.evidence.rules import ALL_TESTS, Kind
from hyperpod_dhc.deephealth.evidence.rules import Test as Probe

T0 = 1_000_000.0
TIMEOUT = 3 * 3600
SETTLE = 300


def finding(message: str, stream: str = "i-0000000000000000a") -> Finding:
    (record,) = assemble([Event(stream, int(T0 * 1000), message, int(T0 * 1000))])
    return classify(record)


FAIL_LINE = finding('{"level": "error", "msg": "ERROR: DCGM level 4 failed"}')
ODD_LINE = finding("2026-03-29T18:04:20Z  warn  GPU 3 at 87 C")
PASS_LINE = finding("2026-03-29T18:04:20Z  info  Deep health check passed")
STRESS_LINE = finding("2026-03-29T18:04:20Z  info  stress-ng success")
FOREIGN_FAIL = finding('{"level": "error", "msg": "x"}', stream="my-own-stream")
ERROR = NodeEvidence(own=(FAIL_LINE,))
PASS = NodeEvidence(own=(PASS_LINE,))
SOME = NodeEvidence(own=(STRESS_LINE,))
NOTHING = NodeEvidence()
ANON_ERROR = NodeEvidence(own=(PASS_LINE,), anonymous_failures=(FOREIGN_FAIL,))
ANON_ONLY = NodeEvidence(anonymous_failures=(FOREIGN_FAIL,))


def test_the_findings_are_what_the_table_assumes():
    assert [f.kind for f in (FAIL_LINE, ODD_LINE, PASS_LINE, STRESS_LINE, FOREIGN_FAIL)] == [
        Kind.FAILURE, Kind.UNRECOGNISED, Kind.PASS, Kind.PASS, Kind.FAILURE
    ]  # fmt: skip


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
REVISIT = 1000 + 3600  # ... and at which missing records are no longer waited for


@pytest.mark.parametrize(
    ("record", "snapshot", "results", "elapsed", "active", "expected"),
    [
        (left(), snap(), PASS, AFTER, None, Verdict.PASSED),
        (left(), snap(), PASS, AFTER - 1, None, None),  # its records may still be on their way
        (left(), snap(), None, AFTER, None, None),  # logs not read in this look
        (left(), snap(), ERROR, AFTER, None, Verdict.FAILED),
        (left(), snap(), NOTHING, AFTER, None, Verdict.SKIPPED),  # queued behind a job, or superseded
        (left(), snap(), SOME, AFTER, None, None),  # the other tests' records are late: wait
        (left(), snap(), SOME, REVISIT, None, Verdict.INCONCLUSIVE),  # ... for revisit_s, then checked again
        (left(), snap(), NodeEvidence(own=(ODD_LINE,)), AFTER, None, Verdict.INCONCLUSIVE),
        (left(), snap(), ANON_ERROR, AFTER, None, Verdict.SKIPPED),  # an anonymous failure: one re-check
        (left(anonymous_rechecks=1), snap(), ANON_ERROR, AFTER, None, Verdict.PASSED),  # then no longer
        (left(), snap(), ANON_ONLY, AFTER, None, Verdict.SKIPPED),
        (left(), snap(IN_PROGRESS), NOTHING, AFTER, False, Verdict.FAILED),  # isolated, the operation over
        (left(), snap(IN_PROGRESS), ERROR, AFTER, False, Verdict.FAILED),
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
        (checking(seen_in_progress=True), snap(IN_PROGRESS), None, 3000, None, None),
        # Past its timeout in the check while HyperPod's operation stays open: isolated; waiting wedges the cluster.
        (checking(seen_in_progress=True), snap(IN_PROGRESS), None, TIMEOUT + 1, True, Verdict.FAILED),
        (checking(seen_in_progress=True), snap(IN_PROGRESS), None, TIMEOUT + 1, None, None),  # ask first
        (checking(seen_in_progress=True, observe_only=True), snap(IN_PROGRESS), None, TIMEOUT + 1, None,
         Verdict.FAILED),
        (checking(), snap("SystemUpdating"), None, TIMEOUT + 1, None, Verdict.INCONCLUSIVE),
        (checking(), snap("SystemUpdating"), None, 100, None, None),
        (left(observe_only=True), snap(), NOTHING, AFTER, None, Verdict.PASSED),  # HyperPod's on-start pass
        # First seen already Running: nothing says it had its on-start checks. Checked again, never passed.
        (checking(observe_only=True, check_left_at=T0 + 1000), snap(), NOTHING, AFTER, None, Verdict.SKIPPED),
        (left(observe_only=True), snap(), ANON_ONLY, AFTER, None, Verdict.SKIPPED),
        (left(observe_only=True), snap(), ERROR, AFTER, None, Verdict.FAILED),
    ],
)  # fmt: skip
def test_decision_table(record, snapshot, results, elapsed, active, expected):
    judgement = judge_check(record, snapshot, look(elapsed, results, active))
    assert (judgement.verdict if judgement else None) == expected
    if judgement:
        assert judgement.evidence, "every verdict carries its evidence"


def test_an_unrecognised_record_is_final_a_missing_one_and_an_anonymous_failure_are_checked_again():
    assert not judge_check(left(), snap(), look(AFTER, NodeEvidence(own=(ODD_LINE,)))).recheck
    assert judge_check(left(), snap(), look(AFTER, NOTHING)).recheck
    anonymous = judge_check(left(), snap(), look(AFTER, ANON_ERROR))
    assert anonymous.recheck and anonymous.anonymous and "my-own-stream" in anonymous.evidence[0]
    passed = judge_check(left(anonymous_rechecks=1), snap(), look(AFTER, ANON_ERROR))
    assert "ignored after its re-check" in passed.evidence[-1]


def test_a_passed_nodes_late_records():
    passed = left(state=NodeState.PASSED, verdict=Verdict.PASSED, verdict_at=T0 + 1300)
    assert judge_late(passed, PASS) is None
    assert judge_late(passed, ERROR).verdict == Verdict.FAILED
    assert not judge_late(passed, NodeEvidence(own=(ODD_LINE,))).recheck
    assert judge_late(passed, ANON_ERROR).anonymous
    assert judge_late(passed.model_copy(update={"anonymous_rechecks": 1}), ANON_ERROR) is None


@pytest.mark.parametrize(
    ("record", "status", "active", "expected"),
    [
        (checking(seen_in_progress=True), "Running", None, True),
        (checking(seen_in_progress=True), IN_PROGRESS, None, False),
        (checking(seen_in_progress=True), IN_PROGRESS, True, False),
        (checking(seen_in_progress=True), IN_PROGRESS, False, True),  # isolated after a failure
        (checking(observe_only=True, seen_in_progress=True), IN_PROGRESS, False, False),
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
    ["Running", IN_PROGRESS, "Pending", "ShuttingDown", "Failure", "SystemUpdating", "NotFound"]
) | st.text(max_size=20)
RECORDS = st.builds(
    checking,
    instance_id=IDS,
    seen_in_progress=st.booleans(),
    observe_only=st.booleans(),
    check_started_at=st.none() | st.floats(T0 - 30_000, T0),
    check_left_at=st.none() | st.floats(T0 - 30_000, T0 + 30_000),
    anonymous_rechecks=st.integers(0, 1),
)
SNAPSHOTS = st.none() | st.builds(snap, status=STATUSES, instance_id=IDS)
OWN = st.lists(st.sampled_from([FAIL_LINE, ODD_LINE, PASS_LINE, STRESS_LINE]), max_size=4).map(tuple)
RESULTS = st.none() | st.builds(
    NodeEvidence, own=OWN, anonymous_failures=st.lists(st.just(FOREIGN_FAIL), max_size=2).map(tuple)
)
REQUIRED = st.sampled_from(
    [frozenset({Probe.STRESS, Probe.GPU_PCI, Probe.DCGM, Probe.EFA}), frozenset({Probe.NCCL}), ALL_TESTS]
)


def failure_evidence(record: NodeRecord, snapshot: NodeSnapshot, results: NodeEvidence | None, look: Look) -> bool:
    """What may make a node FAILED: a failure of its own, Failure or a status the API does not document, Pending
    after being seen in the check, or still in the check past its timeout (the operation open) or after it."""
    isolated = (
        snapshot.status == IN_PROGRESS
        and record.check_started_at is not None
        and (
            (record.check_left_at is None and look.now - record.check_started_at > look.check_timeout_s
             and record.seen_in_progress and (look.check_active or record.observe_only))
            or (record.check_left_at is not None and results is not None and not results.unrecognised
                and look.now - record.check_left_at >= SETTLE and not record.observe_only)
        )
    )  # fmt: skip
    return (
        bool(results and results.failures)
        or failure_like(snapshot.status)
        or (snapshot.status == "Pending" and record.seen_in_progress)
        or isolated
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
    view = Look(now, results, active, timeout, SETTLE, Requirements(required), silence)
    judgement = judge_check(record, snapshot, view)
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
    if verdict == Verdict.FAILED:
        assert failure_evidence(record, snapshot, results, view), "FAILED only on failure evidence"
    if results is not None and results.failures:
        assert verdict == Verdict.FAILED, "a failure of its own always fails it"
    if verdict == Verdict.PASSED:
        # Positive evidence only: seen in the check, done with it, settled, Running, and a pass for every test it
        # ran (or HyperPod's on-start pass, or silence that lasted where the policy accepts it), with nothing of its
        # own that is not a pass, and no anonymous failure before its one re-check.
        assert record.seen_in_progress or record.observe_only, "never seen in the check is not a pass"
        assert record.check_left_at is not None and now - record.check_left_at >= SETTLE, "read before settling"
        assert snapshot.status == "Running" and results is not None
        assert not results.failures and not results.unrecognised, "a failure or an unknown record is never a pass"
        assert not results.anonymous_failures or record.anonymous_rechecks >= 1, "an anonymous failure: a re-check"
        proven = required - {Probe.EFA} <= {t for f in results.passes for t in f.proves}
        silent = silence is not None and results.silent and active is False and now - record.check_left_at >= silence
        assert proven or record.observe_only or silent, "every test it ran proven passed"
    if verdict in (Verdict.SKIPPED, Verdict.INCONCLUSIVE):
        assert not (results and results.failures), "missing evidence never comes with a failure of its own"


@given(record=RECORDS, results=RESULTS, elapsed=st.floats(0, 30_000))
def test_a_missing_snapshot_is_always_gone(record, results, elapsed):
    assert judge_check(record, None, look(elapsed, results)).verdict == Verdict.GONE


@given(record=RECORDS, status=STATUSES, results=RESULTS, elapsed=st.floats(0, 30_000))
def test_a_changed_instance_id_is_always_replaced_by_hyperpod(record, status, results, elapsed):
    record = record.model_copy(update={"instance_id": "i-0000000000000000a"})
    judgement = judge_check(record, snap(status, "i-0000000000000000b"), look(elapsed, results))
    assert judgement.verdict == Verdict.REPLACED_BY_HYPERPOD
