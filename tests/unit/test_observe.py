from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.late_evidence import SCAN_S
from hyperpod_dhc.deephealth.domain.nodes import Action, NodeRecord, NodeSnapshot, NodeState, Outcome, Verdict
from hyperpod_dhc.deephealth.domain.observe import GONE_AFTER_S, Observation, observe
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy, Mode, NodeRecovery
from hyperpod_dhc.deephealth.domain.recovery import REBOOT_SETTLE_S
from hyperpod_dhc.deephealth.domain.result_log import ResultLog
from tests.unit.result_logs import error, event, info, owners, read

A, B = "i-0000000000000000a", "i-0000000000000000b"
GROUPS = {
    "gpu": GroupContext(GroupPolicy()),
    "native": GroupContext(GroupPolicy(), on_start_checks=("InstanceStress",)),
    "off": GroupContext(GroupPolicy(mode=Mode.OFF)),
    "controller": GroupContext(GroupPolicy(), worker=False),
}


OWNERS = {A: "lid", B: "lid-b"}


def lines(logs: dict[str, str] | None, passed: tuple[str, ...] = ()) -> ResultLog | None:
    """Result records as read: an error record per instance in `logs`, a summary pass per instance in `passed`, each
    in the instance's own stream (the record `lid` holds instance A)."""
    if logs is None:
        return None
    found = [event(iid, 950.0, error(msg)) for iid, msg in logs.items()]
    found += [event(iid, 950.0, info("Deep health check passed")) for iid in passed]
    return read(found, owners(**OWNERS))


def obs(now=1000.0, logs=None, recovery=NodeRecovery.NONE, judge=True, passed=()) -> Observation:
    return Observation(
        now=now, node_recovery=recovery, trigger="t", results=lines(logs, passed), may_judge=judge, groups=GROUPS
    )


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
    # Left the check: noted, and no verdict until its result line has had time to arrive and was read ...
    left, _ = observe("c", record, snap(group="native"), obs(now=4000.0))
    assert left.check_left_at == 4000.0 and left.state == NodeState.CHECKING
    assert observe("c", left, snap(group="native"), obs(now=4100.0, logs={})) is None
    assert observe("c", left, snap(group="native"), obs(now=4400.0)) is None
    # ... then a pass (HyperPod only lets a node reach Running after its on-start checks pass).
    passed, decision = observe("c", left, snap(group="native"), obs(now=4400.0, logs={}))
    assert passed.state == NodeState.PASSED and decision.verdict == Verdict.PASSED


def test_a_node_that_failed_its_on_start_check_before_any_look_is_watched_then_failed():
    """Seen first in Failure (its on-start check failed between two looks): recorded and failed on its status,
    never left unrecorded. A node of an on-demand group first seen so (its launch failed) is recorded too, and waits
    HyperPod's grace for a retry before the ladder acts: a launch HyperPod never retries is not left unseen."""
    record, _ = observe("c", None, snap("Failure", group="native"), obs())
    assert record.state == NodeState.CHECKING and record.observe_only and not record.seen_in_progress
    left, _ = observe("c", record, snap("Failure", group="native"), obs(now=1060.0))  # done with its check
    failed, decision = observe("c", left, snap("Failure", group="native"), obs(now=1120.0))
    assert decision.verdict == Verdict.FAILED and failed.state != NodeState.PASSED
    launch, decision = observe("c", None, snap("Failure"), obs())
    assert launch.state == NodeState.RECOVERY_DUE and launch.action == Action.AWAIT_HYPERPOD
    assert launch.not_before == 1000.0 + GroupPolicy().recovery_grace_s and launch.history[0].reason.startswith(
        "first seen in Failure"
    )


def test_checking_node_records_in_progress_then_fails_on_log_error():
    record = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0)
    seen, _ = observe("c", record, snap("DeepHealthCheckInProgress"), obs(judge=False))
    assert seen.seen_in_progress
    left, _ = observe("c", seen, snap(), obs(now=5000.0, logs={A: "ERROR: NCCL bandwidth"}))
    assert left.check_left_at == 5000.0 and left.state == NodeState.CHECKING
    failed, decision = observe("c", left, snap(), obs(now=5300.0, logs={A: "ERROR: NCCL bandwidth"}))
    assert failed.state == NodeState.RECOVERY_DUE and failed.action == Action.REBOOT
    assert decision.verdict == Verdict.FAILED and "NCCL" in decision.evidence[0]


def test_event_driven_observation_never_judges():
    record = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, seen_in_progress=True, check_left_at=1.0)
    assert observe("c", record, snap(), obs(now=5000.0, logs={}, passed=(A,), judge=False)) is None


def test_a_node_that_left_its_check_passes_only_on_a_line_naming_it():
    record = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, seen_in_progress=True, check_left_at=1000.0)
    skipped, decision = observe("c", record, snap(), obs(now=5000.0, logs={}))
    assert skipped.state == NodeState.PENDING and decision.verdict == Verdict.SKIPPED  # re-checked, never passed
    passed, decision = observe("c", record, snap(), obs(now=5000.0, logs={}, passed=(A,)))
    assert passed.state == NodeState.PASSED and decision.verdict == Verdict.PASSED


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


def test_unlisted_node_is_gone_only_when_missing_for_a_while_and_comes_back_if_listed_again():
    missing, decision = observe("c", rec(NodeState.PENDING), None, obs())
    assert missing.state == NodeState.PENDING and missing.missing_since == 1000.0  # HyperPod may be retrying it
    assert observe("c", missing, None, obs(now=1000.0 + GONE_AFTER_S - 1)) is None
    back, decision = observe("c", missing, snap(), obs(now=1100.0))
    assert back.state == NodeState.PENDING and back.missing_since is None and decision.reason == "listed again"
    gone, _ = observe("c", missing, None, obs(now=1000.0 + GONE_AFTER_S))
    assert gone.state == NodeState.GONE
    assert observe("c", gone, None, obs()) is None
    assert observe("c", gone.model_copy(update={"missing_since": None}), snap(), obs())[0].state == NodeState.PENDING


def test_a_moved_node_is_checked_again_under_its_new_group():
    """MoveClusterNodes keeps the ids and re-images the node in another group."""
    moved, decision = observe("c", rec(NodeState.PASSED), snap(group="native"), obs())
    assert moved.state == NodeState.PENDING and moved.group == "native" and moved.ready_at == 1000.0
    assert "moved from group gpu to native" in decision.reason
    away, _ = observe("c", rec(NodeState.PASSED), snap(group="off"), obs())
    assert away.state == NodeState.GONE and away.group == "off"


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
        o = Observation(now=now, node_recovery="None", trigger="t", results=lines({A: "DCGM failed"}), groups=GROUPS)
        assert observe("c", claimed(seen_in_progress=True), snap(), o) is None


def test_a_waiting_node_that_falls_into_failure_is_hyperpods_to_retry_first():
    """`Failure` on an instance nobody checked is a launch HyperPod retries with a new instance: no verdict on
    the hardware, and HyperPod's grace before the ladder acts, whatever NodeRecovery says."""
    for recovery in (NodeRecovery.NONE, NodeRecovery.AUTOMATIC):
        record, _ = observe("c", rec(NodeState.PENDING, ready_at=500.0), snap("Failure"), obs(recovery=recovery))
        assert record.state == NodeState.RECOVERY_DUE and record.action == Action.AWAIT_HYPERPOD
        assert record.verdict is None and record.status == "Failure"
        assert "while waiting for a check" in record.evidence[0]
    record, _ = observe("c", rec(NodeState.PASSED), snap("Failure"), obs(recovery=NodeRecovery.NONE))
    assert record.state == NodeState.RECOVERY_DUE and record.action == Action.AWAIT_HYPERPOD  # HyperPod first
    assert record.verdict == Verdict.FAILED


def test_an_unhealthy_report_about_a_node_in_failure_fails_it_and_one_still_running_rechecks_it():
    """Defect 5: an Unhealthy Node Health Event about a node left in Failure moved it to pending with no ready
    time (never checked, recovered or alerted) and kept its stale status."""
    from hyperpod_dhc.deephealth.domain.observe import mark_unhealthy

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
    failing = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, seen_in_progress=True, check_left_at=950.0)
    auto, _ = observe("c", failing, snap(), obs(now=2000.0, logs={A: "ERROR: DCGM"}, recovery="Automatic"))
    assert auto.action == Action.AWAIT_HYPERPOD and auto.not_before == 2000.0 + GroupPolicy().recovery_grace_s
    none, _ = observe("c", failing, snap(), obs(now=2000.0, logs={A: "ERROR: DCGM"}, recovery="None"))
    assert none.action == Action.REBOOT and none.not_before == 2000.0


def test_a_node_in_its_check_that_is_no_longer_listed_gets_the_checks_verdict_only_when_judging():
    checking = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, missing_since=1000.0)
    later = 1000.0 + GONE_AFTER_S
    gone, decision = observe("c", checking, None, obs(now=later))
    assert gone.state == NodeState.GONE and decision.verdict == Verdict.GONE and gone.round_id is None
    unjudged, decision = observe("c", checking, None, obs(now=later, judge=False))
    assert unjudged.state == NodeState.GONE and decision.verdict is None  # closed out, no verdict recorded


def test_a_recovering_node_that_gets_a_new_instance_is_rechecked_without_judging_anything():
    record = rec(NodeState.RECOVERING, action=Action.REPLACE, action_at=1000.0, round_id="r", held_by="x")
    new, decision = observe("c", record, snap("Pending", iid=B), obs(now=3000.0, judge=False))
    assert new.state == NodeState.PENDING and new.instance_id == B and new.ready_at is None  # ready once Running
    assert new.round_id is None and new.held_by is None and decision.verdict is None


def test_a_dry_run_record_stays_shadowed_while_the_group_observes_hyperpods_own_checks():
    shadowed = rec(NodeState.SHADOWED, group="native")
    assert observe("c", shadowed, snap(group="native"), obs()) is None


def log_at(*lines: tuple[float, str, str]) -> ResultLog:
    """Error records (at, instance whose stream, text) as a look read them."""
    return read([event(iid, at, error(text)) for at, iid, text in lines], owners(**OWNERS))


def judged(now, results, **kw):
    return Observation(now=now, node_recovery=NodeRecovery.NONE, trigger="t", results=results, groups=GROUPS, **kw)


def test_a_failure_line_that_arrives_after_the_pass_reverses_it_and_its_recovery_follows():
    outcomes = [Outcome(at=1100.0, verdict=Verdict.PASSED, instance_id=A)]
    passed = rec(NodeState.PASSED, verdict=Verdict.PASSED, verdict_at=1100.0, check_started_at=500.0,
                 check_left_at=900.0, outcomes=outcomes, created_at=300.0)  # fmt: skip
    late = log_at((800.0, A, "ERROR: DCGM level 4 failed on GPU 2"))
    reversed_, decision = observe("c", passed, snap(), judged(1500.0, late))
    assert reversed_.state == NodeState.RECOVERY_DUE and reversed_.action == Action.REBOOT
    assert reversed_.reversals == 1 and [o.verdict for o in reversed_.outcomes] == [Verdict.FAILED]
    assert decision.reason.startswith("verdict reversed") and "GPU 2" in decision.evidence[0]
    # A failure counts on a later edge than a pass: stamped after the pass window (900 + 300), it still reverses.
    assert observe("c", passed, snap(), judged(1500.0, log_at((1250.0, A, "ERROR"))))[0].state != NodeState.PASSED
    # Stamped before the node was first seen, after the revisit's end, or on another node's stream: nothing.
    assert observe("c", passed, snap(), judged(1500.0, log_at((299.0, A, "ERROR")))) is None
    assert observe("c", passed, snap(), judged(4000.0, log_at((1100.0 + 3601, A, "ERROR")))) is None
    assert observe("c", passed, snap(), judged(1500.0, log_at((800.0, B, "ERROR")))) is None
    # After the revisit, the day's scan still takes the pass back; after the day, nothing does.
    assert observe("c", passed, snap(), judged(1100.0 + 3601, late))[0].state == NodeState.RECOVERY_DUE
    assert observe("c", passed, snap(), judged(1100.0 + SCAN_S + 1, late)) is None


def test_a_status_outside_the_enum_after_the_check_is_a_failure_handled_like_failure():
    record = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, seen_in_progress=True)
    left, _ = observe("c", record, snap("DeepHealthCheckFailed"), judged(2000.0, None))
    assert left.check_left_at == 2000.0
    failed, decision = observe("c", left, snap("DeepHealthCheckFailed"), judged(2060.0, None))
    assert decision.verdict == Verdict.FAILED and "DeepHealthCheckFailed" in decision.evidence[0]
    assert failed.state == NodeState.RECOVERY_DUE and failed.action == Action.AWAIT_HYPERPOD, "grace first"


def test_a_node_overdue_in_its_check_has_its_lines_read_and_a_failure_line_fails_it():
    record = rec(NodeState.CHECKING, round_id="r", check_started_at=0.0, seen_in_progress=True)
    lines = log_at((2000.0, A, "ERROR: NCCL bandwidth"))
    in_check = snap("DeepHealthCheckInProgress")
    assert observe("c", record, in_check, judged(2000.0, lines, check_active=True)) is None, "not overdue yet"
    failed, decision = observe("c", record, in_check, judged(2700.0 + 300.0, lines, check_active=True))
    assert decision.verdict == Verdict.FAILED and failed.state == NodeState.RECOVERY_DUE


def test_a_node_waiting_for_its_lines_is_saved_as_a_look_saw_it_so_a_judgement_without_a_listing_never_uses_less():
    """Review of issue 31: a look that saw a settling node `ShuttingDown` decided nothing and saved nothing, and a
    later poll judged it, without listing, on the `Running` its record still said: a pass on a stale status."""
    from hyperpod_dhc.deephealth.domain.observe import seen_while_settling

    settling = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, check_left_at=950.0, status="Running")
    seen = seen_while_settling(settling, snap("ShuttingDown"), 960.0)
    assert seen is not None and seen.status == "ShuttingDown" and seen.check_left_at == 950.0
    assert seen_while_settling(settling, snap("Running"), 960.0) is None  # nothing new: no write
    # Another instance under the logical id: back in its check as looks go, never judged on the old one's lines.
    replaced = seen_while_settling(settling, snap("Pending", iid=B), 960.0)
    assert replaced is not None and replaced.check_left_at is None and replaced.instance_id == A
    in_check = rec(NodeState.CHECKING, round_id="r", check_started_at=900.0, status="DeepHealthCheckInProgress")
    assert seen_while_settling(in_check, snap("ShuttingDown"), 960.0) is None  # its listing is not skipped
    assert seen_while_settling(rec(NodeState.PASSED, status="Running"), snap("ShuttingDown"), 960.0) is None
