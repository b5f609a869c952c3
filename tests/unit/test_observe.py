from deephealth.domain.nodes import Action, NodeRecord, NodeSnapshot, NodeState, Verdict
from deephealth.domain.observe import Observation, observe
from deephealth.domain.policy import GroupContext, GroupPolicy, Mode, NodeRecovery
from deephealth.domain.recovery import REBOOT_SETTLE_S

A, B = "i-0000000000000000a", "i-0000000000000000b"
GROUPS = {
    "gpu": GroupContext(GroupPolicy()),
    "native": GroupContext(GroupPolicy(), on_start_checks=("InstanceStress",)),
    "off": GroupContext(GroupPolicy(mode=Mode.OFF)),
    "controller": GroupContext(GroupPolicy(), worker=False),
}


def obs(now=1000.0, logs=None, recovery=NodeRecovery.NONE, judge=True) -> Observation:
    return Observation(now=now, node_recovery=recovery, trigger="t", log_errors=logs, may_judge=judge, groups=GROUPS)


def snap(status="Running", iid=A, group="gpu") -> NodeSnapshot:
    return NodeSnapshot(group=group, instance_id=iid, logical_id="lid", status=status)


def rec(state, **kw) -> NodeRecord:
    return NodeRecord(
        **{
            "cluster": "c",
            "key": "lid",
            "group": "gpu",
            "logical_id": "lid",
            "instance_id": A,
            "instance_ids": [A],
            "state": state,
            "version": 1,
            **kw,
        }
    )


def test_new_running_worker_is_queued_once():
    record, decision = observe("c", None, snap(), obs())
    assert record.state == NodeState.PENDING and record.ready_at == 1000.0 and decision.from_state is None
    assert observe("c", record, snap(), obs(now=1100.0)) is None  # the same event again changes nothing


def test_nodes_still_provisioning_or_not_watched_are_not_recorded():
    assert observe("c", None, snap("Pending", iid=None), obs()) is None
    assert observe("c", None, snap(group="off"), obs()) is None
    assert observe("c", None, snap(group="controller"), obs()) is None
    assert observe("c", None, snap(group="unknown-group"), obs()) is None


def test_on_start_group_is_observed_not_rechecked():
    record, _ = observe("c", None, snap("DeepHealthCheckInProgress", group="native"), obs())
    assert record.state == NodeState.CHECKING and record.observe_only and record.seen_in_progress
    # Left the check: no verdict until the result logs were read ...
    assert observe("c", record, snap(group="native"), obs(now=4000.0)) is None
    # ... then a pass.
    passed, decision = observe("c", record, snap(group="native"), obs(now=4000.0, logs={}))
    assert passed.state == NodeState.PASSED and decision.verdict == Verdict.PASSED


def test_checking_node_records_in_progress_then_fails_on_log_error():
    record = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0)
    seen, _ = observe("c", record, snap("DeepHealthCheckInProgress"), obs(judge=False))
    assert seen.seen_in_progress
    failed, decision = observe("c", seen, snap(), obs(now=5000.0, logs={A: "ERROR: NCCL bandwidth"}))
    assert failed.state == NodeState.RECOVERY_DUE and failed.action == Action.REBOOT
    assert decision.verdict == Verdict.FAILED and "NCCL" in decision.evidence[0]


def test_event_driven_observation_never_judges():
    record = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, seen_in_progress=True)
    assert observe("c", record, snap(), obs(now=5000.0, logs={}, judge=False)) is None


def test_reboot_completes_after_node_was_seen_down():
    record = rec(NodeState.RECOVERING, action=Action.REBOOT, action_at=1000.0)
    down, _ = observe("c", record, snap("Pending"), obs(now=1100.0))
    assert down.seen_down and down.state == NodeState.RECOVERING
    back, _ = observe("c", down, snap(), obs(now=1700.0))
    assert back.state == NodeState.PENDING and back.ready_at == 1700.0


def test_reboot_counts_as_done_after_settle_time_even_if_never_seen_down():
    record = rec(NodeState.RECOVERING, action=Action.REBOOT, action_at=1000.0)
    assert observe("c", record, snap(), obs(now=1000.0 + REBOOT_SETTLE_S - 1)) is None
    assert observe("c", record, snap(), obs(now=1000.0 + REBOOT_SETTLE_S))[0].state == NodeState.PENDING


def test_replacement_keeps_the_logical_id_and_the_instance_trail():
    record = rec(NodeState.RECOVERING, action=Action.REPLACE, action_at=1000.0)
    new, decision = observe("c", record, snap(iid=B), obs(now=3000.0))
    assert new.state == NodeState.PENDING and new.key == "lid"
    assert new.instance_id == B and new.instance_ids == [A, B] and decision.instance_id == B


def test_hyperpod_recovery_within_grace_is_recorded_not_duplicated():
    record = rec(NodeState.RECOVERY_DUE, action=Action.AWAIT_HYPERPOD, not_before=5000.0)
    acting, _ = observe("c", record, snap("ShuttingDown"), obs(recovery=NodeRecovery.AUTOMATIC))
    assert acting.state == NodeState.RECOVERING and acting.action == Action.HYPERPOD and acting.attempts == 1
    replaced, _ = observe("c", record, snap(iid=B), obs(recovery=NodeRecovery.AUTOMATIC))
    assert replaced.state == NodeState.PENDING and replaced.attempts == 1


def test_new_instance_under_a_passed_node_is_checked_but_quarantine_sticks():
    assert observe("c", rec(NodeState.PASSED), snap(iid=B), obs())[0].state == NodeState.PENDING
    kept, _ = observe("c", rec(NodeState.QUARANTINED), snap(iid=B), obs())
    assert kept.state == NodeState.QUARANTINED and kept.instance_ids == [A, B]


def test_unlisted_node_is_gone_and_comes_back_if_listed_again():
    gone, _ = observe("c", rec(NodeState.PENDING), None, obs())
    assert gone.state == NodeState.GONE
    assert observe("c", gone, None, obs()) is None
    assert observe("c", gone, snap(), obs())[0].state == NodeState.PENDING


# -- issue 11: nodes a round claimed but never started, nodes in Failure --------------------------------------
def claimed(round_id="c-r000004", **kw) -> NodeRecord:
    return rec(NodeState.CHECKING, round_id=round_id, check_started_at=None, ready_at=500.0, **kw)


def test_a_claimed_node_whose_round_ended_before_its_check_started_is_owned_again_by_the_next_look():
    """Defect 1: a round stopped (or failed to hand back) after claiming left its nodes `checking` forever."""
    later = Observation(now=90_000.0, node_recovery="None", trigger="reconcile", groups=GROUPS, orphaned_before=5)
    record, decision = observe("c", claimed(), snap(), later)
    assert record.state == NodeState.PENDING and record.round_id is None and record.ready_at == 500.0
    assert "c-r000004 ended before the check started" in decision.reason


def test_a_claimed_node_of_the_live_round_or_of_an_unknown_owner_is_left_alone():
    live = Observation(now=90_000.0, node_recovery="None", trigger="c-r000004", groups=GROUPS, orphaned_before=4)
    assert observe("c", claimed(), snap(), live) is None
    unknown = Observation(now=90_000.0, node_recovery="None", trigger="evt", groups=GROUPS)  # intake: cannot tell
    assert observe("c", claimed(), snap(), unknown) is None


def test_a_claimed_node_is_never_judged_before_its_check_started_even_with_errors_in_the_log():
    """Its clock does not start at every look, and evidence about someone else's check is not a verdict."""
    for now in (1_000.0, 100_000.0):
        o = Observation(now=now, node_recovery="None", trigger="t", log_errors={A: "DCGM failed"}, groups=GROUPS)
        assert observe("c", claimed(seen_in_progress=True), snap(), o) is None


def test_a_waiting_node_that_falls_into_failure_has_failed_and_its_recovery_follows():
    """Defect 5 (general form): `Failure` is HyperPod's own verdict; no check is needed to act on it."""
    record, decision = observe("c", rec(NodeState.PENDING, ready_at=500.0), snap("Failure"), obs())
    assert record.state == NodeState.RECOVERY_DUE and record.verdict == Verdict.FAILED
    assert record.status == "Failure" and "while waiting for a check" in decision.evidence[0]
    record, _ = observe("c", rec(NodeState.PASSED), snap("Failure"), obs(recovery=NodeRecovery.AUTOMATIC))
    assert record.state == NodeState.RECOVERY_DUE and record.action == Action.AWAIT_HYPERPOD  # HyperPod first


def test_an_unhealthy_report_about_a_node_in_failure_fails_it_and_one_still_running_rechecks_it():
    """Defect 5: an Unhealthy Node Health Event about a node left in Failure moved it to pending with no ready
    time (never checked, recovered or alerted) and kept its stale status."""
    from deephealth.domain.observe import mark_unhealthy

    o = obs(judge=False)
    record, decision = mark_unhealthy(rec(NodeState.PASSED, status="Running"), snap("Failure"), "HMA: Xid 79", o)
    assert record.state == NodeState.RECOVERY_DUE and record.verdict == Verdict.FAILED and record.status == "Failure"
    assert decision.verdict == Verdict.FAILED  # so the node-failed notification goes out
    record, _ = mark_unhealthy(rec(NodeState.PASSED), snap("Running"), "HMA: Xid 79", o)
    assert record.state == NodeState.PENDING and record.ready_at == 1000.0  # claimable at once
    record, _ = mark_unhealthy(rec(NodeState.PASSED), snap("ShuttingDown"), "HMA", o)
    assert record.state == NodeState.PENDING and record.ready_at is None  # back when Running


# -- observe() dispatches by state; the cluster's NodeRecovery as DescribeCluster spells it --------------------
def test_the_cluster_node_recovery_as_a_plain_string_still_decides_who_acts_first():
    """ClusterInfo carries DescribeCluster's string: "Automatic" must still give HyperPod its grace."""
    failing = rec(NodeState.PENDING, ready_at=500.0)
    auto, _ = observe("c", failing, snap("Failure"), obs(recovery="Automatic"))
    assert auto.action == Action.AWAIT_HYPERPOD and auto.not_before == 1000.0 + GroupPolicy().recovery_grace_s
    none, _ = observe("c", failing, snap("Failure"), obs(recovery="None"))
    assert none.action == Action.REBOOT and none.not_before == 1000.0


def test_a_node_in_its_check_that_is_no_longer_listed_gets_the_checks_verdict_only_when_judging():
    checking = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0)
    gone, decision = observe("c", checking, None, obs())
    assert gone.state == NodeState.GONE and decision.verdict == Verdict.GONE and gone.round_id is None
    unjudged, decision = observe("c", checking, None, obs(judge=False))
    assert unjudged.state == NodeState.GONE and decision.verdict is None  # closed out, no verdict recorded


def test_a_recovering_node_that_gets_a_new_instance_is_rechecked_without_judging_anything():
    record = rec(NodeState.RECOVERING, action=Action.REPLACE, action_at=1000.0, round_id="r", held_by="x")
    new, decision = observe("c", record, snap("Pending", iid=B), obs(now=3000.0, judge=False))
    assert new.state == NodeState.PENDING and new.instance_id == B and new.ready_at is None  # ready once Running
    assert new.round_id is None and new.held_by is None and decision.verdict is None


def test_a_dry_run_record_stays_shadowed_while_the_group_observes_hyperpods_own_checks():
    shadowed = rec(NodeState.SHADOWED, group="native")
    assert observe("c", shadowed, snap(group="native"), obs()) is None
