"""The controller end to end under readings of what HyperPod does not document (tests/fakes/readings.py): a group
HyperPod will not check (V8), a node left isolated in its check (V4), a busy answer in other words (V5) and a
quick HyperPod reboot between our listings (V7)."""

from collections import Counter

import pytest

from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES, NodeState, Verdict
from tests.fakes.hyperpod import GroupSpec
from tests.fakes.readings import AutoRecovery, BusyError, Readings, UnsupportedTypes

CONFIG = {"clusters": ["demo"], "defaults": {"gather_window_s": 0}}


def _final(harness, cluster, expected):
    records = harness.records(cluster)
    return len(records) == expected and all(r.state in FINAL_STATES for r in records.values())


def _requested_groups(fake):
    return [
        tuple(sorted({c["InstanceGroupName"] for c in p["DeepHealthCheckConfigurations"]}))
        for _, op, p in fake.requests
        if op == "StartClusterHealthCheck"
    ]


@pytest.mark.controller_config(CONFIG)
def test_a_group_hyperpod_will_not_check_is_refused_alone_and_holds_back_no_other_group(harness, fake):
    fake.readings = Readings(unsupported_types=UnsupportedTypes(patterns=("ml.trn*",), behaviour="reject"))
    fake.create_cluster(
        "demo",
        [
            GroupSpec("a-trn", "ml.trn1.32xlarge", count=2),
            GroupSpec("b-p5", count=2),
            GroupSpec("c-p4d", "ml.p4d.24xlarge", count=2),
        ],
    )
    harness.run_until(lambda: _final(harness, "demo", 6), horizon_s=12 * 3600)

    records = harness.records("demo").values()
    by_group = {g: [r for r in records if r.group == g] for g in ("a-trn", "b-p5", "c-p4d")}
    for r in by_group["a-trn"]:
        assert r.state == NodeState.INCONCLUSIVE and r.verdict == Verdict.INCONCLUSIVE
        # Asked again in later rounds (a refusal may be a race), max_inconclusive (2) times, then an operator's.
        assert r.inconclusive_count == 3
        assert "does not support deep health checks" in r.evidence[0]
    assert all(r.state == NodeState.PASSED for g in ("b-p5", "c-p4d") for r in by_group[g])
    # The whole request, then one group at a time until one is accepted; the group not tried waits its turn.
    asked = _requested_groups(fake)
    assert asked[:3] == [("a-trn", "b-p5", "c-p4d"), ("a-trn",), ("b-p5",)]
    assert asked.count(("a-trn",)) == 3 and asked.count(("b-p5",)) == 1 and asked.count(("c-p4d",)) == 1
    inconclusive = [n for n in harness.notifications() if n["attributes"]["kind"] == "node-inconclusive"]
    assert sorted(n["message"]["node"] for n in inconclusive) == sorted(r.key for r in by_group["a-trn"])
    assert all(e["status"] == "SUCCEEDED" for e in harness.executions()), "no round is abandoned"


@pytest.mark.controller_config(CONFIG)
def test_a_lone_group_refused_is_asked_again_then_ends_inconclusive(harness, fake):
    fake.create_cluster("demo", [GroupSpec("g5", "ml.g5.8xlarge", count=2)])
    message = "Deep health checks are not supported for instance type ml.g5.8xlarge"
    fake.inject_error("StartClusterHealthCheck", code="ValidationException", message=message, times=3)
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=6 * 3600)
    records = harness.records("demo").values()
    assert {r.state for r in records} == {NodeState.INCONCLUSIVE}
    assert all(r.evidence == [f"StartClusterHealthCheck refused: ValidationException: {message}"] for r in records)
    assert fake.calls["StartClusterHealthCheck"] == 3, "one refusal never settles a round: 1 + max_inconclusive"


@pytest.mark.controller_config(CONFIG)
def test_one_refusal_that_was_a_race_is_asked_again_and_the_nodes_pass(harness, fake):
    """A busy refusal in words nobody wrote down, with the operation it met gone by the time anyone looks."""
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    fake.inject_error("StartClusterHealthCheck", code="ValidationException", message="Request cannot be processed")
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=6 * 3600)
    assert {r.state for r in harness.records("demo").values()} == {NodeState.PASSED}
    assert fake.calls["StartClusterHealthCheck"] == 2
    assert all(e["status"] == "SUCCEEDED" for e in harness.executions())


@pytest.mark.controller_config(CONFIG)
def test_a_busy_answer_in_other_words_is_read_from_the_operation_and_waited_out(harness, fake):
    import boto3

    fake.readings = Readings(
        busy_error=BusyError(code="ConflictException", message="There is an existing DeepHealthCheck operation")
    )
    fake.create_cluster("demo", [GroupSpec("workers", count=3)])
    ids = [n.instance_id for n in fake.cluster("demo").nodes.values()]
    boto3.client("sagemaker", region_name="us-east-1").start_cluster_health_check(
        ClusterName="demo",
        DeepHealthCheckConfigurations=[
            {"InstanceGroupName": "workers", "InstanceIds": ids[:1], "DeepHealthChecks": ["InstanceStress"]}
        ],
    )
    harness.run_until(lambda: _final(harness, "demo", 3), horizon_s=8 * 3600)
    assert {r.state for r in harness.records("demo").values()} == {NodeState.PASSED}
    assert not fake.rejected_while_active, "the operation said busy before the controller asked"
    assert all(e["status"] == "SUCCEEDED" for e in harness.executions())


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0, "recovery": "none"}})
def test_a_node_left_isolated_in_its_check_does_not_keep_the_cluster_busy(harness, fake):
    fake.readings = Readings(failed_status="DeepHealthCheckInProgress")
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    stuck = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", stuck, "fail")
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=8 * 3600)
    assert fake.node("demo", stuck).status == "DeepHealthCheckInProgress"
    assert harness.records("demo")[stuck].state != NodeState.PASSED

    late = [fake.add_node("demo", "workers", ready_after_s=600) for _ in range(2)]
    harness.run_until(lambda: _final(harness, "demo", 4), horizon_s=8 * 3600)
    records = harness.records("demo")
    assert all(records[lid].state == NodeState.PASSED for lid in late), "the next round's check started"
    assert fake.calls["StartClusterHealthCheck"] == 2 and not fake.rejected_while_active


@pytest.mark.controller_config(
    {
        "clusters": ["demo"],
        "defaults": {"gather_window_s": 0, "recovery": "reboot-then-replace", "recovery_grace_s": 900},
    }
)
def test_a_quick_hyperpod_reboot_between_listings_is_not_followed_by_a_second_reboot(harness, fake):
    fake.readings = Readings(
        auto_recovery=AutoRecovery(reboot_fraction=1.0, delay_s=(300.0, 300.0), reboot_s=(5.0, 5.0))
    )
    fake.create_cluster("demo", [GroupSpec("workers", count=2)], node_recovery="Automatic")
    bad = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", bad, "fail", cured_by="reboot")
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=12 * 3600)

    record = harness.records("demo")[bad]
    assert record.state == NodeState.PASSED and len(record.instance_ids) == 1
    actions = Counter((kind, actor) for _, kind, lid, actor in fake.actions if lid == bad)
    assert actions == {("reboot", "hyperpod"): 1}, "one action on one piece of evidence: HyperPod's"
    assert any(h.reason.startswith("HyperPod acted on the node during its grace: Reboot") for h in record.history)
    asked = [p for _, op, p in fake.requests if op == "ListClusterEvents"]
    assert len(asked) == 1 and asked[0]["NodeId"] == record.instance_id, "one look, at the grace's end"


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_a_failure_line_that_arrives_after_the_pass_reverses_it(harness, fake):
    """CloudWatch Logs accepts an event up to 14 days late: a failure line stamped inside a passed node's check
    window, ingested after its verdict, turns the pass into a failure (and its recovery follows)."""
    import json as _json

    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    late = next(iter(fake.cluster("demo").nodes))
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=8 * 3600)
    passed = harness.records("demo")[late]
    assert passed.state == NodeState.PASSED and passed.check_left_at is not None
    iid = passed.instance_id
    c = fake.cluster("demo")
    failure = _json.dumps({"level": "error", "msg": "ERROR: DCGM diagnostic level 4 failed on GPU 5"})
    fake._append_log(f"/aws/sagemaker/Clusters/demo/{c.cluster_id}", f"DeepHealthCheckResults/{iid}",
                     passed.check_left_at - 60, failure)  # fmt: skip
    fake.set_truth("demo", late, "fail", cured_by="reboot")  # what the line says, for the rest of the run
    harness.run_until(lambda: harness.records("demo")[late].reversals == 1, horizon_s=3600)

    record = harness.records("demo")[late]
    reversal = next(h for h in record.history if h.reason.startswith("verdict reversed"))
    assert reversal.state == NodeState.RECOVERY_DUE and record.verdict == Verdict.FAILED
    assert "DCGM diagnostic level 4 failed on GPU 5" in record.evidence[0]
    assert [o.verdict for o in record.outcomes] == [Verdict.FAILED], "the pass is taken back, not a flap"
    failed = [n for n in harness.notifications() if n["attributes"]["kind"] == "node-failed"]
    host = record.hostname.split(".")[0]
    assert [n["subject"] for n in failed] == [f"hyperpod-dhc: {host} ({iid}) on demo failed (its pass is reversed)"]
    harness.run_until(lambda: harness.records("demo")[late].state == NodeState.PASSED, horizon_s=6 * 3600)
    assert harness.records("demo")[late].attempts == 1, "rebooted once, then checked again and passed"


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0, "recovery": "none"}})
def test_an_operation_held_open_by_an_isolated_node_is_said_once_and_asked_past(harness, fake):
    """NodeRecovery None, recovery "none": a failed node stays isolated and its operation InProgress for good. The
    controller says so once (`check-overdue`) and asks past it for new nodes; this HyperPod merges the request."""
    fake.readings = Readings(
        failed_status="DeepHealthCheckInProgress", isolated_holds_operation=True, second_check_request="merge"
    )
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    stuck = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", stuck, "fail")
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=8 * 3600)
    assert harness.records("demo")[stuck].state == NodeState.FAILED
    assert fake.cluster("demo").check is not None, "HyperPod's operation is still in progress"

    late = [fake.add_node("demo", "workers", ready_after_s=600) for _ in range(2)]
    harness.run_until(lambda: _final(harness, "demo", 4), horizon_s=12 * 3600)
    records = harness.records("demo")
    assert all(records[lid].state == NodeState.PASSED for lid in late), "asked past the stuck operation: merged"
    assert len(fake.asked_past_held) == 1 and fake.started_while_active == 0
    overdue = [n for n in harness.notifications() if n["attributes"]["kind"] == "check-overdue"]
    assert len(overdue) == 1 and overdue[0]["message"]["in_progress_s"] > 2 * 45 * 60


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0, "recovery": "none"}})
def test_an_operation_held_open_that_refuses_is_asked_past_once_and_the_rounds_wait_for_it(harness, fake):
    """As above, but this HyperPod refuses a second request: the one request past the held operation is refused, and
    the rounds waiting for the operation to close (a ClusterBusy retry every 3 minutes) never send another."""
    fake.readings = Readings(failed_status="DeepHealthCheckInProgress", isolated_holds_operation=True)
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    stuck = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", stuck, "fail")
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=8 * 3600)
    held = fake.cluster("demo").check
    assert held is not None and fake.asked_past_held == []

    late = [fake.add_node("demo", "workers", ready_after_s=600) for _ in range(2)]
    harness.run_until(lambda: False, horizon_s=6 * 3600)
    assert fake.asked_past_held == [held.operation_id], "asked past once, refused, and never again"
    assert fake.started_while_active == 0 and len(fake.rejected_while_active) == 1
    records = harness.records("demo")
    assert all(records[lid].state == NodeState.PENDING for lid in late), "they wait for the operation to close"
    overdue = [n for n in harness.notifications() if n["attributes"]["kind"] == "check-overdue"]
    assert len(overdue) == 1, "said once"


def _held_by_a_refused_reboot(harness, fake):
    """A failed node left isolated holds HyperPod's operation open (this HyperPod refuses a second request), and its
    reboots are refused: it is due again later. Returns it once no round runs; the refusals are still armed."""
    fake.readings = Readings(failed_status="DeepHealthCheckInProgress", isolated_holds_operation=True)
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    stuck = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", stuck, "fail", cured_by="reboot")
    fake.inject_error("BatchRebootClusterNodes", code="ValidationException", status=400, times=10_000)
    harness.run_until(lambda: harness.records("demo").get(stuck) is not None
                      and harness.records("demo")[stuck].state == NodeState.RECOVERY_DUE and not harness.running(),
                      horizon_s=8 * 3600)  # fmt: skip
    assert fake.cluster("demo").check is not None, "its operation is held open"
    return stuck


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 120}})
def test_a_node_holding_the_operation_open_is_recovered_before_the_next_check_starts(harness, fake):
    """A failed node left isolated holds HyperPod's operation open (this HyperPod refuses a second request) while its
    reboot is refused and retried later; new nodes arrive, and the round that claims them finds the node due again
    at Start check: it recovers it first (RecoveryFirst, Recover before check), which ends the operation, and the new
    nodes' check starts. Checking first, the round waited at Start check for an operation only its own recovery
    would end."""
    stuck = _held_by_a_refused_reboot(harness, fake)

    # The new nodes are claimed (after the 120 s gather window) a minute after the refused reboot is due again.
    last = harness.records("demo")[stuck].history[-1]
    retry_at = last.at + float(last.reason.rsplit("retry in ", 1)[1].split()[0])
    fake._faults["BatchRebootClusterNodes"].clear()
    late = [fake.add_node("demo", "workers", ready_after_s=retry_at - fake.clock.now() - 60) for _ in range(2)]
    harness.run_until(lambda: _final(harness, "demo", 4), horizon_s=3 * 3600)
    records = harness.records("demo")
    assert all(records[lid].state == NodeState.PASSED for lid in late), [records[lid].state for lid in late]
    assert records[stuck].state == NodeState.PASSED and records[stuck].attempts == 1, "rebooted, checked again"
    assert fake.asked_past_held == [] and fake.started_while_active == 0, "no request while the operation was held"


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_a_round_waiting_at_start_check_recovers_the_node_holding_the_operation_once_it_is_due(harness, fake):
    """As above, but the new nodes are claimed while the refused reboot is not due again yet: Start check waits
    (ClusterBusy, every 3 minutes), and the try that finds the node due goes to Recover before check (RecoveryFirst)
    instead of waiting out its 5 hours."""
    stuck = _held_by_a_refused_reboot(harness, fake)
    fake._faults["BatchRebootClusterNodes"].clear()
    late = [fake.add_node("demo", "workers", ready_after_s=1) for _ in range(2)]
    harness.run_until(lambda: _final(harness, "demo", 4), horizon_s=3 * 3600)
    records = harness.records("demo")
    assert all(records[lid].state == NodeState.PASSED for lid in late), [records[lid].state for lid in late]
    assert records[stuck].state == NodeState.PASSED and records[stuck].attempts == 1, "rebooted, checked again"
    assert fake.asked_past_held == [] and fake.started_while_active == 0, "no request while the operation was held"


@pytest.mark.controller_config(
    {
        "clusters": ["demo"],
        "defaults": {"gather_window_s": 0, "recovery": "replace", "replace_budget": {"max_nodes": 0}},
    }
)
def test_a_node_holding_the_operation_whose_recovery_the_gate_holds_is_not_recovered_first(harness, fake):
    """The node holding the operation open is due for a replacement a budget of 0 holds: recovering it first would
    change nothing, so the round waits at Start check (ClusterBusy) instead of going round Recover before check."""
    fake.readings = Readings(failed_status="DeepHealthCheckInProgress", isolated_holds_operation=True)
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    stuck = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", stuck, "fail")
    harness.run_until(lambda: _final(harness, "demo", 2) and not harness.running(), horizon_s=8 * 3600)
    assert harness.records("demo")[stuck].state == NodeState.RECOVERY_DUE and fake.cluster("demo").check is not None

    late = [fake.add_node("demo", "workers", ready_after_s=1) for _ in range(2)]
    harness.run_until(lambda: False, horizon_s=2 * 3600)
    entered = [
        event["stateEnteredEventDetails"]["name"]
        for execution in harness.executions()
        for event in harness.history(execution["executionArn"])
        if event["type"].endswith("StateEntered")
    ]
    assert "Start check" in entered and "Recover before check" not in entered
    records = harness.records("demo")
    assert records[stuck].state == NodeState.RECOVERY_DUE and records[stuck].held_by is not None
    assert all(records[lid].state == NodeState.PENDING for lid in late), "they wait for the operation to close"


PAIRS = {"pairs": {"checks": ["InstanceStress", "InstanceConnectivity"]}}


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}, "groups": PAIRS})
def test_records_read_in_the_look_that_sees_their_node_leave_its_check_are_measured(harness, fake):
    """Records are measured once, in the first look that reads them. Here one look reads the lines of the `workers`
    (due: left 300 s before, the conservative settle time) and sees the `pairs` leave their longer check, lines
    shipped as it ends: the pairs' lines are measured then too, so the settle time leaves its conservative start
    after the first round."""
    fake.check_duration_s["InstanceConnectivity"] = 300.0  # the pairs leave as the workers' lines fall due
    fake.create_cluster("demo", [GroupSpec("workers", count=6), GroupSpec("pairs", count=6)])
    harness.run_until(lambda: _final(harness, "demo", 12), horizon_s=8 * 3600)
    records = harness.records("demo").values()
    assert {r.verdict for r in records} == {Verdict.PASSED}
    readings = harness.readings("demo")
    assert sum(b.weight for b in readings.lateness.values()) >= 11.5, readings.lateness
    assert readings.lag_max_s == 0, "lines readable before their node was seen leaving are not late"
