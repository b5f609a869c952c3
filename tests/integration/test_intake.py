"""Intake through the deployed rule patterns and the real handler: bad input, duplicates, disorder."""

import copy

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeState
from tests.conftest import load_event
from tests.corpus import localize
from tests.fakes.hyperpod import GroupSpec

CONFIG = {"clusters": ["demo"], "defaults": {"gather_window_s": 600}}


def _lifecycle_event(fake, lid, eid, state="Succeeded"):
    node = fake.node("demo", lid)
    event = localize(copy.deepcopy(load_event("cluster_event_lifecycle_started.json")))
    d = event["detail"]["EventDetails"]
    d.update(
        ClusterName="demo",
        ClusterArn=fake.cluster("demo").arn,
        InstanceGroupName=node.group,
        InstanceId=node.instance_id,
        EventId=eid,
        Description=f"Instance lifecycle script execution for EC2InstanceId {node.instance_id} has {state}",
    )
    d["EventDetails"]["EventMetadata"]["Instance"] = {"LcsExecutionState": state, "NodeLogicalId": lid}
    event["id"] = eid
    return event


@pytest.mark.controller_config(CONFIG)
@pytest.mark.parametrize(
    "event",
    [
        {},
        {"detail-type": "SageMaker HyperPod Cluster Event"},
        {**load_event("cluster_event_lifecycle_started.json"), "detail": {"EventDetails": {"ClusterName": 7}}},
        {**load_event("node_health_unhealthy.json"), "detail": {"ClusterName": "demo"}},
        {**load_event("cluster_event_instance_provisioned.json"), "time": "yesterday"},
        "not even an object",
    ],
    ids=["empty", "no-envelope", "wrong-type", "missing-instance", "bad-time", "string"],
)
def test_malformed_events_are_dropped_with_a_reason_not_retried(harness, event):
    result = harness.invoke(harness.intake_arn, event)  # raises if the function errored (would be retried)
    assert result["outcome"] == "malformed" and result["reason"]


@pytest.mark.controller_config(CONFIG)
def test_unknown_cluster_and_detail_type_are_ignored(harness):
    other = localize(load_event("cluster_event_instance_provisioned.json"))  # "sample-cluster" is not configured
    assert harness.invoke(harness.intake_arn, other)["outcome"].startswith("ignored")
    odd = {**other, "detail-type": "SageMaker HyperPod Something New"}
    assert harness.invoke(harness.intake_arn, odd)["outcome"].startswith("ignored")


@pytest.mark.controller_config({"clusters": "all"})
def test_events_of_another_account_or_region_are_never_acted_on(harness, fake):
    fake.create_cluster("sample-cluster", [GroupSpec("p5-workers")])
    sample = load_event("cluster_event_instance_provisioned.json")  # account 111122223333, us-west-2
    assert harness.invoke(harness.intake_arn, sample)["outcome"] == "foreign"
    assert harness.invoke(harness.intake_arn, localize(sample, region="eu-west-1"))["outcome"] == "foreign"
    local = localize(sample)
    local["detail"]["EventDetails"]["ClusterArn"] = "arn:aws:sagemaker:us-east-1:999999999999:cluster/abcdef123456"
    assert harness.invoke(harness.intake_arn, local)["outcome"] == "foreign"
    assert not harness.records("sample-cluster") and fake.calls["DescribeClusterNode"] == 0


@pytest.mark.controller_config(CONFIG)
def test_duplicate_and_out_of_order_events_change_nothing_twice(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers")])
    lid = fake.add_node("demo", "workers", status="Running")
    late_started = _lifecycle_event(fake, lid, "11111111-1111-4111-8111-111111111111", state="Started")
    succeeded = _lifecycle_event(fake, lid, "22222222-2222-4222-8222-222222222222")
    harness.hold(60)  # the round's Claim lists the cluster, then gathers arrivals: read it 60 s into the gathering
    for event in (succeeded, succeeded, late_started, succeeded):  # at least once, out of order
        harness.deliver(event)
    assert [e["name"] for e in harness.executions()] == ["demo-r000000"], "one round, however many events"
    assert not fake.calls["DescribeClusterNode"], "an event wakes the round; it is not a call per node"
    harness.settle()
    record = harness.records("demo")[lid]
    assert record.state == NodeState.PENDING and record.version == 1, record.history


@pytest.mark.controller_config(CONFIG)
def test_events_hyperpod_sends_match_the_deployed_rules(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers")], node_recovery="Automatic")
    fake.add_node("demo", "workers", ready_after_s=300)
    fake.advance(900)
    events = fake.drain_events()
    assert {e["detail-type"] for e in events} >= {
        "SageMaker HyperPod Cluster Event",
        "SageMaker HyperPod Cluster State Change",
    }
    for event in events:
        harness.deliver(event)
    assert not harness.unmatched
    assert harness.records("demo"), "the node reached the table through the intake"


def test_an_unhealthy_report_about_a_node_waiting_for_its_lines_is_saved_and_its_round_looks_again(harness, fake):
    """Review of issue 31: the report changed nothing of a checking node, so a poll judged it, without listing, on
    the status its last look saw. Now what HyperPod describes goes on its record, and the round is told (changed_at),
    so its next poll lists rather than judges on that look."""
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])

    def settling():
        return [r for r in harness.records("demo").values() if r.state == NodeState.CHECKING and r.check_left_at]

    seen: dict = {}

    def report() -> None:  # the moment a look finds a node out of its check: its agent reports it
        node = seen["node"] = settling()[0]
        fake.node("demo", node.key).status = "ShuttingDown"  # HyperPod's agent took it down after its check
        event = localize(copy.deepcopy(load_event("node_health_unhealthy.json")))
        event["resources"] = [fake.cluster("demo").arn]
        event["detail"].update(ClusterName="demo", ClusterArn=fake.cluster("demo").arn, InstanceId=node.instance_id)
        seen["outcome"], seen["at"] = harness.invoke(harness.intake_arn, event)["outcome"], fake.clock.now()

    harness.when(lambda: bool(settling()), report)
    harness.run_until(lambda: "outcome" in seen, horizon_s=6 * 3600)
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
    from tests.harness.engine import TABLE_NAME

    assert seen["outcome"] == "checking: its round looks again"
    assert harness.records("demo")[seen["node"].key].status == "ShuttingDown"
    assert NodeTable(TABLE_NAME).round_meta("demo").changed_at == seen["at"]
