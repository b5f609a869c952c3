"""The controller end to end under readings of what HyperPod does not document (tests/fakes/readings.py): a group
HyperPod will not check (V8), a node left isolated in its check (V4), a busy answer in other words (V5) and a
quick HyperPod reboot between our listings (V7)."""

from collections import Counter

import pytest

from deephealth.domain.nodes import FINAL_STATES, NodeState, Verdict
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
        assert r.inconclusive_count == 1, "a refusal is not re-checked: it would be refused again"
        assert "does not support deep health checks" in r.evidence[0]
    assert all(r.state == NodeState.PASSED for g in ("b-p5", "c-p4d") for r in by_group[g])
    # The whole request, then one group at a time until one is accepted; the group not tried waits its turn.
    assert _requested_groups(fake) == [("a-trn", "b-p5", "c-p4d"), ("a-trn",), ("b-p5",), ("c-p4d",)]
    inconclusive = [n for n in harness.notifications() if n["attributes"]["kind"] == "node-inconclusive"]
    assert sorted(n["message"]["node"] for n in inconclusive) == sorted(r.key for r in by_group["a-trn"])
    assert all(e["status"] == "SUCCEEDED" for e in harness.executions()), "no round is abandoned"


@pytest.mark.controller_config(CONFIG)
def test_a_lone_group_refused_ends_inconclusive_without_a_retry(harness, fake):
    fake.create_cluster("demo", [GroupSpec("g5", "ml.g5.8xlarge", count=2)])
    message = "Deep health checks are not supported for instance type ml.g5.8xlarge"
    fake.inject_error("StartClusterHealthCheck", code="ValidationException", message=message)
    harness.run_until(lambda: _final(harness, "demo", 2), horizon_s=6 * 3600)
    records = harness.records("demo").values()
    assert {r.state for r in records} == {NodeState.INCONCLUSIVE}
    assert all(r.evidence == [f"StartClusterHealthCheck refused: ValidationException: {message}"] for r in records)
    assert fake.calls["StartClusterHealthCheck"] == 1
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
