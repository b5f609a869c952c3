import pytest

from deephealth.domain.nodes import Action, NodeRecord, NodeState, Verdict
from deephealth.domain.policy import GroupPolicy, Recovery
from deephealth.domain.recovery import (
    MAX_ACTION_RETRIES,
    action_refused,
    action_started,
    apply_verdict,
    due_action,
    ladder_step,
)

NOW = 5_000.0


def rec(**kw) -> NodeRecord:
    return NodeRecord(
        **{
            "cluster": "c",
            "key": "n1",
            "group": "g",
            "instance_id": "i-0000000000000000a",
            "logical_id": "n1",
            "state": NodeState.CHECKING,
            "version": 3,
            **kw,
        }
    )


@pytest.mark.parametrize(
    ("recovery", "attempts", "max_attempts", "expected"),
    [
        (Recovery.REBOOT_THEN_REPLACE, 0, 2, Action.REBOOT),
        (Recovery.REBOOT_THEN_REPLACE, 1, 2, Action.REPLACE),
        (Recovery.REBOOT_THEN_REPLACE, 2, 2, None),
        (Recovery.AUTO, 0, 2, Action.REBOOT),
        (Recovery.REPLACE, 0, 2, Action.REPLACE),
        (Recovery.REPLACE, 1, 1, None),
    ],
)
def test_ladder(recovery, attempts, max_attempts, expected):
    assert ladder_step(GroupPolicy(recovery=recovery, max_attempts=max_attempts), attempts) == expected


def test_failed_with_node_recovery_none_schedules_reboot_now():
    record, decision = apply_verdict(rec(), Verdict.FAILED, ("log error",), GroupPolicy(), "None", NOW, "r1")
    assert record.state == NodeState.RECOVERY_DUE and record.action == Action.REBOOT and record.not_before == NOW
    assert decision.verdict == Verdict.FAILED and decision.evidence == ["log error"]


def test_failed_with_automatic_recovery_waits_for_hyperpod_first():
    policy = GroupPolicy(recovery_grace_s=900)
    record, _ = apply_verdict(rec(), Verdict.FAILED, ("x",), policy, "Automatic", NOW, "r1")
    assert record.action == Action.AWAIT_HYPERPOD and record.not_before == NOW + 900
    assert due_action(record, policy, NOW + 899) is None
    assert due_action(record, policy, NOW + 900) == Action.REBOOT  # fallback after grace


def test_recovery_none_records_only():
    record, _ = apply_verdict(rec(), Verdict.FAILED, ("x",), GroupPolicy(recovery=Recovery.NONE), "None", NOW, None)
    assert record.state == NodeState.FAILED


def test_out_of_attempts_quarantines():
    record, decision = apply_verdict(
        rec(attempts=2), Verdict.FAILED, ("x",), GroupPolicy(max_attempts=2), "None", NOW, None
    )
    assert record.state == NodeState.QUARANTINED and "quarantined" in decision.reason


def test_skipped_is_rechecked_then_inconclusive_never_failed():
    policy = GroupPolicy(max_inconclusive=1)
    once, _ = apply_verdict(rec(), Verdict.SKIPPED, ("busy",), policy, "None", NOW, None)
    assert once.state == NodeState.PENDING and once.inconclusive_count == 1
    twice, _ = apply_verdict(once, Verdict.SKIPPED, ("busy",), policy, "None", NOW, None)
    assert twice.state == NodeState.INCONCLUSIVE


def test_replaced_by_hyperpod_rechecks_the_new_instance_and_counts_an_attempt():
    record, _ = apply_verdict(
        rec(instance_ids=["i-0000000000000000a"]),
        Verdict.REPLACED_BY_HYPERPOD,
        ("id",),
        GroupPolicy(),
        "Automatic",
        NOW,
        None,
        new_instance_id="i-0000000000000000b",
    )
    assert record.state == NodeState.PENDING and record.attempts == 1
    assert record.instance_id == "i-0000000000000000b"
    assert record.instance_ids == ["i-0000000000000000a", "i-0000000000000000b"]


def test_action_started_counts_and_refusals_back_off_then_give_up():
    due = rec(state=NodeState.RECOVERY_DUE, action=Action.REBOOT)
    started, _ = action_started(due, Action.REBOOT, NOW, None)
    assert started.state == NodeState.RECOVERING and started.attempts == 1
    refused, _ = action_refused(due, Action.REBOOT, "InstanceIdInUse", "busy", NOW, None)
    assert refused.state == NodeState.RECOVERY_DUE and refused.not_before > NOW
    gone, _ = action_refused(due, Action.REBOOT, "InstanceIdNotFound", "", NOW, None)
    assert gone.state == NodeState.GONE
    worn = rec(state=NodeState.RECOVERY_DUE, action=Action.REBOOT, action_retries=MAX_ACTION_RETRIES)
    assert (
        action_refused(worn, Action.REBOOT, "InvalidInstanceStatus", "", NOW, None)[0].state == NodeState.INCONCLUSIVE
    )


def test_an_action_whose_answer_was_lost_stays_counted_and_in_flight():
    """Defect 6: a replacement HyperPod carried out but answered 5xx was re-sent, refused as InstanceIdInUse,
    taken back from the budget and credited to HyperPod."""
    from deephealth.domain.recovery import action_started, action_unconfirmed

    due = NodeRecord(cluster="c", key="n", group="g", logical_id="n", instance_id="i-1", state=NodeState.RECOVERY_DUE,
                     version=1)  # fmt: skip
    started, _ = action_started(due, Action.REPLACE, 100.0, "r")
    lost, decision = action_unconfirmed(started, Action.REPLACE, "TransientError: 500", 101.0, "r")
    assert lost.state == NodeState.RECOVERING and lost.attempts == started.attempts == 1
    assert [(a.action, a.actor) for a in lost.actions] == [(Action.REPLACE, "controller")]
    assert "answer lost" in decision.reason
