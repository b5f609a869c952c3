import pytest

from hyperpod_dhc.deephealth.domain.actions import action_refused, action_started
from hyperpod_dhc.deephealth.domain.nodes import Action, ActionEntry, NodeRecord, NodeSnapshot, NodeState, Verdict
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy, NodeRecovery, Recovery
from hyperpod_dhc.deephealth.domain.recovery import (
    ACTION_RETRY_BASE_S,
    ACTION_TIMEOUT_S,
    MAX_ACTION_RETRIES,
    REBOOT_SETTLE_S,
    apply_verdict,
    due_action,
    give_up_or_retry,
    ladder_step,
    observe_recovering,
    observe_recovery_due,
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
    from hyperpod_dhc.deephealth.domain.actions import action_started, action_unconfirmed

    due = NodeRecord(cluster="c", key="n", group="g", logical_id="n", instance_id="i-1", state=NodeState.RECOVERY_DUE,
                     version=1)  # fmt: skip
    started, _ = action_started(due, Action.REPLACE, 100.0, "r")
    lost, decision = action_unconfirmed(started, Action.REPLACE, "TransientError: 500", 101.0, "r")
    assert lost.state == NodeState.RECOVERING and lost.attempts == started.attempts == 1
    assert [(a.action, a.actor) for a in lost.actions] == [(Action.REPLACE, "controller")]
    assert "answer lost" in decision.reason


# -- due_action owns the whole re-plan: the action to request, or the node's settled state ------------------------
def due(**kw) -> NodeRecord:
    return rec(**{"state": NodeState.RECOVERY_DUE, "not_before": NOW, "action": Action.REBOOT, **kw})


def test_a_due_node_gets_its_recorded_action_and_a_node_not_due_yet_gets_nothing():
    assert due_action(due(action=Action.REPLACE), GroupPolicy(), NOW) == Action.REPLACE
    assert due_action(due(not_before=NOW + 1), GroupPolicy(), NOW) is None
    assert due_action(rec(state=NodeState.RECOVERING, action=Action.REBOOT), GroupPolicy(), NOW) is None


def test_after_hyperpods_grace_the_ladder_step_counts_only_attempts_in_the_window():
    policy = GroupPolicy(attempt_window_h=1)
    old = [ActionEntry(at=NOW - 7200, action=Action.REBOOT, actor="hyperpod")]
    assert due_action(due(action=Action.AWAIT_HYPERPOD, attempts=1, actions=old), policy, NOW) == Action.REBOOT
    lifetime = GroupPolicy()  # the same attempt counts for ever: the ladder's next step is a replacement
    assert due_action(due(action=Action.AWAIT_HYPERPOD, attempts=1, actions=old), lifetime, NOW) == Action.REPLACE


def test_a_node_out_of_ladder_steps_when_hyperpods_grace_ends_is_quarantined_by_due_action():
    record, decision = due_action(due(action=Action.AWAIT_HYPERPOD, attempts=2), GroupPolicy(max_attempts=2), NOW, "r")
    assert record.state == NodeState.QUARANTINED and decision.reason.startswith("failed again after 2 recovery")
    assert decision.trigger == "r" and record.held_by is None


def test_a_due_node_without_an_action_is_planned_again_without_waiting_for_hyperpod_again():
    policy = GroupPolicy(recovery_grace_s=900)
    record, _ = due_action(due(action=None), policy, NOW, "r")
    assert record.state == NodeState.RECOVERY_DUE and record.action == Action.REBOOT and record.not_before == NOW
    record, _ = due_action(due(action=None), GroupPolicy(recovery=Recovery.NONE), NOW, "r")
    assert record.state == NodeState.FAILED


# -- the give-up-or-retry rule, written once --------------------------------------------------------------------
def test_give_up_or_retry_retries_up_to_the_limit_then_needs_an_operator():
    last = rec(state=NodeState.RECOVERING, action=Action.REPLACE, action_retries=MAX_ACTION_RETRIES - 1)
    retried, decision = give_up_or_retry(last, NOW, "r", "replace showed no effect", cause=" after 1 s")
    assert retried.state == NodeState.RECOVERY_DUE and retried.action_retries == MAX_ACTION_RETRIES
    assert retried.not_before == NOW and decision.reason == "replace showed no effect after 1 s; retry"
    assert decision.action is None, "no new action was decided"
    worn = last.model_copy(update={"action_retries": MAX_ACTION_RETRIES})
    gave_up, decision = give_up_or_retry(worn, NOW, "r", "replace showed no effect", detail=" (why)")
    assert gave_up.state == NodeState.INCONCLUSIVE and gave_up.action_retries == MAX_ACTION_RETRIES + 1
    assert decision.reason == f"replace showed no effect {MAX_ACTION_RETRIES + 1} times (why): needs an operator"


def test_give_up_or_retry_backs_off_doubling_and_names_the_retried_action():
    first, decision = give_up_or_retry(rec(), NOW, None, "reboot refused", backoff=True, retry=Action.REBOOT)
    assert first.not_before == NOW + ACTION_RETRY_BASE_S and decision.action == Action.REBOOT
    assert decision.reason == f"reboot refused; retry in {ACTION_RETRY_BASE_S} s"
    third, _ = give_up_or_retry(rec(action_retries=2), NOW, None, "reboot refused", backoff=True)
    assert third.not_before == NOW + 4 * ACTION_RETRY_BASE_S


def test_a_refusal_at_the_retry_limit_backs_off_and_one_more_needs_an_operator():
    started, _ = action_started(due(action_retries=MAX_ACTION_RETRIES - 1), Action.REBOOT, NOW, "r")
    last, decision = action_refused(started, Action.REBOOT, "InstanceIdInUse", "busy", NOW, "r")
    assert last.state == NodeState.RECOVERY_DUE and last.attempts == 0 and last.actions == []
    assert last.not_before == NOW + ACTION_RETRY_BASE_S * 2 ** (MAX_ACTION_RETRIES - 1)
    assert decision.reason == f"reboot refused (InstanceIdInUse); retry in {ACTION_RETRY_BASE_S * 16} s"
    again, _ = action_started(last, Action.REBOOT, NOW, "r")
    worn, decision = action_refused(again, Action.REBOOT, "InstanceIdInUse", "busy", NOW, "r")
    assert worn.state == NodeState.INCONCLUSIVE and worn.attempts == 0
    assert decision.reason == "reboot refused 6 times (InstanceIdInUse: busy): needs an operator"


# -- the observed recovery: RECOVERY_DUE and RECOVERING as HyperPod lists the node ---------------------------------
A, B = "i-0000000000000000a", "i-0000000000000000b"


def listed(status="Running", iid=A) -> NodeSnapshot:
    return NodeSnapshot(group="g", instance_id=iid, logical_id="n1", status=status)


def test_hyperpod_replacing_a_node_due_for_recovery_is_credited_to_hyperpod_and_rechecked():
    waiting = due(action=Action.AWAIT_HYPERPOD, attempts=1, instance_ids=[A], held_by="breaker", round_id="r")
    record, decision = observe_recovery_due(waiting, listed("Pending", iid=B), NOW, "t")
    assert record.state == NodeState.PENDING and record.instance_id == B and record.instance_ids == [A, B]
    assert record.attempts == 2 and record.action == Action.HYPERPOD and record.action_at == NOW
    assert [(a.action, a.actor, a.instance_id) for a in record.actions] == [(Action.REPLACE, "hyperpod", A)]
    assert record.ready_at is None and record.held_by is None and record.round_id is None  # ready once Running
    assert decision.action == Action.HYPERPOD and decision.reason == "HyperPod replaced the instance"


def test_hyperpod_taking_a_due_node_down_owns_the_recovery_and_a_node_left_alone_stays_due():
    waiting = due(action=Action.REPLACE, held_by="replace-budget:group", not_before=NOW + 600)
    record, _ = observe_recovery_due(waiting, listed("ShuttingDown"), NOW, "t")
    assert record.state == NodeState.RECOVERING and record.action == Action.HYPERPOD and record.seen_down
    assert record.attempts == 1 and record.not_before is None and record.held_by is None
    for status in ("Running", "Failure", "SystemUpdating"):
        assert observe_recovery_due(waiting, listed(status), NOW, "t") is None


def recovering(action=Action.REBOOT, **kw) -> NodeRecord:
    return rec(state=NodeState.RECOVERING, action=action, action_at=NOW, instance_ids=[A], **kw)


def test_a_reboot_settles_once_seen_down_and_back_or_after_the_settle_time_running():
    down, _ = observe_recovering(recovering(), listed("ShuttingDown"), NOW + 60, "t")
    assert down.state == NodeState.RECOVERING and down.seen_down
    assert observe_recovering(down, listed("Pending"), NOW + 120, "t") is None  # already seen down
    back, decision = observe_recovering(down, listed(), NOW + 180, "t")
    assert back.state == NodeState.PENDING and back.ready_at == NOW + 180 and not back.seen_down
    assert decision.reason == "reboot done: Running again"
    assert observe_recovering(recovering(), listed(), NOW + REBOOT_SETTLE_S - 1, "t") is None
    settled, _ = observe_recovering(recovering(), listed(), NOW + REBOOT_SETTLE_S, "t")
    assert settled.state == NodeState.PENDING


def test_a_replacement_never_settles_by_time_and_is_retried_once_it_shows_no_effect():
    assert observe_recovering(recovering(Action.REPLACE), listed(), NOW + REBOOT_SETTLE_S, "t") is None
    assert observe_recovering(recovering(Action.REPLACE), listed(), NOW + ACTION_TIMEOUT_S - 1, "t") is None
    retry, decision = observe_recovering(recovering(Action.REPLACE), listed(), NOW + ACTION_TIMEOUT_S, "t")
    assert retry.state == NodeState.RECOVERY_DUE and retry.action == Action.REPLACE and retry.action_retries == 1
    assert retry.not_before == NOW + ACTION_TIMEOUT_S
    assert decision.reason == f"replace showed no effect after {ACTION_TIMEOUT_S} s; retry"
    worn = recovering(Action.REPLACE, action_retries=MAX_ACTION_RETRIES)
    gave_up, _ = observe_recovering(worn, listed(), NOW + ACTION_TIMEOUT_S, "t")
    assert gave_up.state == NodeState.INCONCLUSIVE
    new, _ = observe_recovering(recovering(Action.REPLACE), listed(iid=B), NOW + 60, "t")
    assert new.state == NodeState.PENDING and new.instance_ids == [A, B] and new.attempts == 0  # counted at request


def test_a_node_seen_down_that_never_comes_back_is_retried_after_the_action_timeout():
    """A reboot whose answer was lost and that never ran, or one stuck in Failure: down, and never Running again
    (found by the fidelity matrix: 3 nodes waited in `recovering` to the horizon)."""
    down, _ = observe_recovering(recovering(), listed("Failure"), NOW + 300, "t")
    assert down.seen_down and observe_recovering(down, listed("Failure"), NOW + ACTION_TIMEOUT_S - 1, "t") is None
    retry, decision = observe_recovering(down, listed("Failure"), NOW + ACTION_TIMEOUT_S, "t")
    assert retry.state == NodeState.RECOVERY_DUE and retry.action == Action.REBOOT and retry.action_retries == 1
    assert decision.reason == f"reboot showed no effect: still Failure after {ACTION_TIMEOUT_S} s; retry"
    worn = down.model_copy(update={"action_retries": MAX_ACTION_RETRIES})
    gave_up, _ = observe_recovering(worn, listed("Failure"), NOW + ACTION_TIMEOUT_S, "t")
    assert gave_up.state == NodeState.INCONCLUSIVE  # an operator decides; never recovering for good


def test_plan_recovery_takes_the_clusters_node_recovery_as_the_enum_or_its_string():
    for automatic in (NodeRecovery.AUTOMATIC, "Automatic"):
        record, _ = apply_verdict(rec(), Verdict.FAILED, ("x",), GroupPolicy(), automatic, NOW, None)
        assert record.action == Action.AWAIT_HYPERPOD
    record, _ = apply_verdict(rec(), Verdict.FAILED, ("x",), GroupPolicy(), NodeRecovery.NONE, NOW, None)
    assert record.action == Action.REBOOT


@pytest.mark.parametrize(
    ("ladder", "attempts", "expected"),
    [
        (("reboot", "replace"), 0, Action.REPLACE),  # a DCGM summary says replacementRequired: no reboot first
        (("reboot", "replace"), 1, Action.REPLACE),
        (("reboot", "reboot", "replace"), 0, Action.REPLACE),
        (("reboot",), 0, Action.REBOOT),  # the policy allows no replacement: the hint cannot add one
        (("reboot", "replace"), 2, None),  # out of steps: quarantine, hint or not
    ],
)
def test_a_replacement_hint_skips_the_reboots_the_ladder_allows_it_to(ladder, attempts, expected):
    policy = GroupPolicy(ladder=ladder, max_attempts=len(ladder))
    assert ladder_step(policy, attempts, Action.REPLACE) == expected
    assert ladder_step(policy, attempts, Action.REBOOT) == ladder_step(policy, attempts)


def test_a_failed_verdict_with_a_replacement_hint_goes_straight_to_replacement_and_a_recheck_forgets_it():
    record, _ = apply_verdict(rec(), Verdict.FAILED, ("dcgm",), GroupPolicy(), "None", NOW, "r1", hint=Action.REPLACE)
    assert record.action == Action.REPLACE and record.recovery_hint == Action.REPLACE
    grace, _ = apply_verdict(
        rec(), Verdict.FAILED, ("dcgm",), GroupPolicy(), "Automatic", NOW, "r1", hint=Action.REPLACE
    )
    assert grace.action == Action.AWAIT_HYPERPOD and due_action(grace, GroupPolicy(), NOW + 3600) == Action.REPLACE
    snapshot = NodeSnapshot(group="g", instance_id="i-0000000000000000b", logical_id="n1", status="Running")
    back, _ = observe_recovering(record.model_copy(update={"state": NodeState.RECOVERING}), snapshot, NOW, "t")
    assert back is not None and back.recovery_hint is None
