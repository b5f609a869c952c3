"""A check HyperPod refused for the request itself (an inconclusive verdict no re-check can settle), and the end
of HyperPod's grace on a failed node (domain.grace): fidelity readings V7 and V8."""

from hyperpod_dhc.deephealth.domain.grace import after_grace, grace_expired, grace_start, hyperpod_action
from hyperpod_dhc.deephealth.domain.nodes import Action, NodeRecord, NodeState, Verdict
from hyperpod_dhc.deephealth.domain.notices import notices
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy, Recovery
from hyperpod_dhc.deephealth.domain.recovery import apply_verdict

NOW = 50_000.0
MESSAGE = "Deep health checks are not supported for instance type ml.trn1.32xlarge"


def check_refused(record, code, message, now, trigger):
    """What Start check records for a member of a group HyperPod refused to check."""
    evidence = (f"StartClusterHealthCheck refused: {code}: {message}",)
    return apply_verdict(record, Verdict.INCONCLUSIVE, evidence, GroupPolicy(), "None", now, trigger, recheck=False)


def rec(**kw) -> NodeRecord:
    return NodeRecord(
        **{
            "cluster": "c",
            "key": "n1",
            "group": "trn",
            "instance_id": "i-0000000000000000a",
            "logical_id": "n1",
            "state": NodeState.CHECKING,
            "round_id": "c-r000001",
            "status": "Running",
            "ready_at": NOW - 600,
            "version": 3,
            **kw,
        }
    )


def test_a_refused_member_is_inconclusive_at_once_with_hyperpods_message_and_alerts():
    record, decision = check_refused(rec(), "ValidationException", MESSAGE, NOW, "c-r000001")
    assert record.state == NodeState.INCONCLUSIVE and record.verdict == Verdict.INCONCLUSIVE
    assert record.round_id is None and record.verdict_at == NOW and record.inconclusive_count == 1
    assert record.evidence == [f"StartClusterHealthCheck refused: ValidationException: {MESSAGE}"]
    assert record.outcomes[-1].verdict == Verdict.INCONCLUSIVE
    assert decision.from_state == NodeState.CHECKING and decision.to_state == NodeState.INCONCLUSIVE
    assert [n.kind for n in notices(record, decision) if n.kind] == ["node-inconclusive"]


def test_a_refusal_skips_the_re_check_ladder_that_missing_evidence_gets():
    policy = GroupPolicy(max_inconclusive=2)
    laddered, _ = apply_verdict(rec(), Verdict.INCONCLUSIVE, ("x",), policy, "None", NOW, "r")
    assert laddered.state == NodeState.PENDING, "missing evidence is re-checked first"
    refused, _ = check_refused(rec(), "ValidationException", MESSAGE, NOW, "r")
    assert refused.state == NodeState.INCONCLUSIVE, "a refusal would only be refused again"


def test_hyperpods_action_is_any_instance_event_but_a_lifecycle_scripts():
    assert hyperpod_action([]) is None
    lcs = "Instance lifecycle script execution for EC2InstanceId i-0000000000000000a has Succeeded"
    assert hyperpod_action([lcs]) is None
    reboot = "Instance i-0000000000000000a reboot in progress"
    assert hyperpod_action([lcs, reboot, "later"]) == reboot


def grace_due(**kw) -> NodeRecord:
    return rec(
        **{
            "state": NodeState.RECOVERY_DUE,
            "round_id": None,
            "verdict": Verdict.FAILED,
            "verdict_at": NOW - 900,
            "action": Action.AWAIT_HYPERPOD,
            "not_before": NOW,
            "evidence": ["DCGM level 4 failed"],
            **kw,
        }
    )


def test_only_nodes_waiting_for_hyperpod_are_asked_about():
    waiting, ours = grace_due(), grace_due(key="n2", logical_id="n2", action=Action.REBOOT)
    no_instance = grace_due(key="n3", logical_id="n3", instance_id=None)
    assert grace_expired([waiting, ours, no_instance]) == [waiting]


def test_the_grace_starts_at_the_checks_start_not_at_the_verdict_that_waited_for_the_log():
    """HyperPod may act the moment the check ends, before the controller even sees the node leave it."""
    policy = GroupPolicy(recovery_grace_s=900, poll_interval_s=60)
    began = NOW - 900  # grace_due: the failing verdict at NOW - 900, due at NOW
    started = began - 3000
    assert grace_start(grace_due(check_started_at=started), policy) == started
    assert grace_start(grace_due(), policy) == began  # no check: the verdict
    # Waiting for HyperPod on a Failure status, not on a check: an old verdict and check never widen the look.
    stale = grace_due(verdict=Verdict.PASSED, verdict_at=began - 86400, check_started_at=began - 90000)
    assert grace_start(stale, policy) == began


def test_hyperpod_acting_during_the_grace_means_a_re_check_not_a_second_action():
    reason = "Instance i-0000000000000000a reboot in progress"
    record, decision = after_grace(grace_due(), reason, GroupPolicy(), NOW, "c-r000002")
    assert record.state == NodeState.PENDING and record.ready_at == NOW  # Running: ready for a fresh check
    assert record.attempts == 1 and record.actions[-1].actor == "hyperpod"
    assert record.action == Action.HYPERPOD and record.not_before is None
    assert decision.reason == f"HyperPod acted on the node during its grace: {reason}"
    assert record.evidence[-1] == decision.reason
    assert record.instance_id == "i-0000000000000000a"


def test_no_action_during_the_grace_records_the_ladder_step_so_events_are_read_once():
    record, _ = after_grace(grace_due(), None, GroupPolicy(recovery=Recovery.REBOOT_THEN_REPLACE), NOW, "r")
    assert record.state == NodeState.RECOVERY_DUE and record.action == Action.REBOOT and record.not_before == NOW
    assert grace_expired([record]) == []
    spent = grace_due(attempts=2)
    assert after_grace(spent, None, GroupPolicy(max_attempts=2), NOW, "r") is None  # due_action settles it
