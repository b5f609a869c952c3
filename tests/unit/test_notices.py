"""domain.notices: which saved decision sends which metrics and notifications, in the order they go out."""

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState, Verdict, transition
from hyperpod_dhc.deephealth.domain.notices import Metric, Notice, notices

T = 1_000.0


def rec(state=NodeState.CHECKING, **kw):
    base = {
        "cluster": "c1",
        "key": "node-1",
        "group": "gpu",
        "logical_id": "node-1",
        "instance_id": "i-0123456789abcdef0",
        "state": state,
        "version": 3,
    }
    return NodeRecord(**{**base, **kw})


def judged(record, state, verdict, **changes):
    return transition(record, T, state, f"judged {verdict}", "round-1", verdict=verdict, verdict_at=T, **changes)


def kinds(found):
    return [n.kind for n in found]


def test_a_first_pass_counts_the_verdict_and_its_latency_and_tells_nobody():
    record, decision = judged(rec(ready_at=T - 600), NodeState.PASSED, Verdict.PASSED)
    assert notices(record, decision) == [
        Notice("c1", "gpu", (Metric("Verdict_passed"), Metric("ReadyToVerdictSeconds", 600.0, "Seconds")))
    ]


def test_no_latency_metric_without_a_ready_time():
    record, decision = judged(rec(), NodeState.PASSED, Verdict.PASSED)
    assert notices(record, decision) == [Notice("c1", "gpu", (Metric("Verdict_passed"),))]


def test_a_pass_after_a_recovery_is_a_recovered_node():
    record, decision = judged(rec(attempts=1), NodeState.PASSED, Verdict.PASSED)
    found = notices(record, decision)
    assert kinds(found) == [None, "node-recovered"]
    recovered = found[1]
    assert recovered.metrics == (Metric("NodesRecovered"),)
    assert recovered.subject == "hyperpod-dhc: node-1 (i-0123456789abcdef0) on c1 recovered"
    assert recovered.detail == {
        "node": "node-1",
        "instance_id": "i-0123456789abcdef0",
        "reason": "judged passed",
        "verdict": Verdict.PASSED,
        "evidence": [],
        "attempts": 1,
        "hostname": None,
        "checks": [],
        "failed_test": None,
        "from_state": NodeState.CHECKING,
    }


def test_a_failure_names_the_host_the_checks_and_the_failed_test_for_the_message():
    checked = rec(hostname="ip-10-1-2-3.ec2.internal", check_types=("InstanceStress", "InstanceConnectivity"))
    record, decision = judged(
        checked, NodeState.RECOVERY_DUE, Verdict.FAILED, evidence=["result log: dcgm diag failed"]
    )
    detail = notices(record, decision)[1].detail
    assert detail["hostname"] == "ip-10-1-2-3"
    assert detail["checks"] == ["InstanceStress", "InstanceConnectivity"]
    assert detail["failed_test"] == "dcgm"
    assert detail["from_state"] == NodeState.CHECKING


@pytest.mark.parametrize("verdict", [Verdict.FAILED, Verdict.REPLACED_BY_HYPERPOD])
def test_a_failed_check_tells_the_group_without_a_metric_of_its_own(verdict):
    record, decision = judged(rec(), NodeState.RECOVERY_DUE, verdict, evidence=["GPU 3: XID 79"])
    found = notices(record, decision)
    assert kinds(found) == [None, "node-failed"]
    assert found[0].metrics == (Metric(f"Verdict_{verdict.value}"),)
    assert found[1].metrics == ()
    assert found[1].subject == "hyperpod-dhc: node-1 (i-0123456789abcdef0) on c1 failed its deep health check"
    assert found[1].detail["evidence"] == ["GPU 3: XID 79"]


def test_a_failure_that_quarantines_sends_the_failure_then_the_quarantine():
    record, decision = judged(rec(attempts=3), NodeState.QUARANTINED, Verdict.FAILED)
    found = notices(record, decision)
    assert kinds(found) == [None, "node-failed", "node-quarantined"]
    assert found[2].metrics == (Metric("NodesQuarantined"),)
    assert found[2].subject == "hyperpod-dhc: node-1 (i-0123456789abcdef0) on c1 quarantined"
    assert all(n.cluster == "c1" and n.group == "gpu" for n in found)


def test_an_inconclusive_node_needs_an_operator():
    record, decision = judged(rec(), NodeState.INCONCLUSIVE, Verdict.INCONCLUSIVE)
    found = notices(record, decision)
    assert kinds(found) == [None, "node-inconclusive"]
    assert found[0].metrics == (Metric("Verdict_inconclusive"),)
    assert found[1].metrics == (Metric("NodesInconclusive"),)
    assert found[1].subject == "hyperpod-dhc: node-1 (i-0123456789abcdef0) on c1 inconclusive, needs an operator"


def test_entering_quarantine_without_a_verdict_is_announced():
    record, decision = transition(rec(NodeState.RECOVERING), T, NodeState.QUARANTINED, "out of attempts", "round-1")
    assert kinds(notices(record, decision)) == ["node-quarantined"]


@pytest.mark.parametrize(
    "before, after",
    [
        (NodeState.PENDING, NodeState.CHECKING),  # claimed for a round
        (NodeState.QUARANTINED, NodeState.QUARANTINED),  # already there: no second message
        (NodeState.INCONCLUSIVE, NodeState.INCONCLUSIVE),
    ],
)
def test_a_decision_without_a_verdict_or_a_state_to_announce_sends_nothing(before, after):
    record, decision = transition(rec(before), T, after, "no news", "round-1")
    assert notices(record, decision) == []
