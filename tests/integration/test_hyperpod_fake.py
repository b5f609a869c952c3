"""The HyperPod fake, exercised only through real boto3 clients (so botocore validates every request against
the 1.44.8 service model and parses every response)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.fakes.hyperpod import Clock, FakeHyperPod, GroupSpec, install
from tests.fakes.readings import Readings

REGION = "us-east-1"
STRESS = [{"InstanceGroupName": "workers", "DeepHealthChecks": ["InstanceStress"]}]


@dataclass
class Env:
    fake: FakeHyperPod
    sm: BaseClient
    logs: BaseClient


@functools.cache
def _session() -> botocore.session.Session:
    # One botocore session for the module: each new session re-parses the multi-MB SageMaker model
    # (~0.15 s a client), which would dominate this file's run time.
    return botocore.session.Session()


@pytest.fixture
def env() -> Iterator[Env]:
    fake = FakeHyperPod(Clock())
    with mock_aws(), install(fake):
        # no retries: an injected error must surface on the first attempt, and backoff would sleep for real
        config = Config(retries={"total_max_attempts": 1})
        session = boto3.Session(botocore_session=_session())
        yield Env(
            fake,
            session.client("sagemaker", region_name=REGION, config=config),
            session.client("logs", region_name=REGION),
        )


def workers(fake: FakeHyperPod, count: int = 3, **kwargs: Any) -> list[str]:
    """A cluster "hp" with a controller and ``count`` Running workers; returns the workers' logical ids."""
    groups = [GroupSpec("controller", "ml.m5.xlarge", 1, "Controller"), GroupSpec("workers", count=count)]
    c = fake.create_cluster("hp", groups, **kwargs)
    return [n.logical_id for n in c.nodes.values() if n.group == "workers"]


def status(env: Env, logical_id: str) -> str:
    details = env.sm.describe_cluster_node(ClusterName="hp", NodeLogicalId=logical_id)["NodeDetails"]
    return details["InstanceStatus"]["Status"]


def iid(env: Env, logical_id: str) -> str:
    return env.fake.node("hp", logical_id).instance_id


def error_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


def test_paginator_returns_each_of_250_nodes_once(env: Env) -> None:
    env.fake.create_cluster("big", [GroupSpec("workers", count=250)])
    pages = list(env.sm.get_paginator("list_cluster_nodes").paginate(ClusterName="big"))
    ids = [s["InstanceId"] for page in pages for s in page["ClusterNodeSummaries"]]
    assert len(ids) == len(set(ids)) == 250
    assert len(pages) == 25  # default page size 10: a caller that ignores NextToken sees only 10
    assert env.fake.calls["ListClusterNodes"] == 25

    desc = env.sm.get_paginator("list_cluster_nodes").paginate(
        ClusterName="big", SortOrder="Descending", PaginationConfig={"PageSize": 100}
    )
    assert [s["InstanceId"] for page in desc for s in page["ClusterNodeSummaries"]] == ids[::-1]

    with pytest.raises(ClientError) as exc:  # botocore checks min client-side, not max
        env.sm.list_cluster_nodes(ClusterName="big", MaxResults=101)
    assert error_code(exc) == "ValidationException"


def test_listings_follow_nodes_added_replaced_and_moved_in_two_clusters(env: Env) -> None:
    """The fake's listing index moves the nodes whose sort keys change instead of sorting again: after nodes come,
    are replaced (a new instance and LaunchTime) and join another group (NAME's first key), in either of two
    clusters, each order still lists what a fresh sort of the cluster's nodes lists."""
    for name in ("hp", "other"):
        env.fake.create_cluster(name, [GroupSpec("a", count=3), GroupSpec("b", count=2)])

    def listed(cluster: str, **sort: str) -> list[str]:
        pages = env.sm.get_paginator("list_cluster_nodes").paginate(
            ClusterName=cluster, **sort, PaginationConfig={"PageSize": 2}
        )
        return [s["InstanceId"] for page in pages for s in page["ClusterNodeSummaries"]]

    def fresh(cluster: str, by_name: bool) -> list[str]:
        nodes = [n for n in env.fake.cluster(cluster).nodes.values() if n.instance_id]
        return [
            n.instance_id for n in sorted(nodes, key=lambda n: [n.group, n.instance_id] if by_name else [n.launched])
        ]

    def same_as_fresh() -> None:
        for cluster in ("hp", "other"):
            assert listed(cluster, SortBy="NAME") == fresh(cluster, by_name=True)
            assert listed(cluster) == fresh(cluster, by_name=False)
            assert listed(cluster, SortOrder="Descending") == fresh(cluster, by_name=False)[::-1]

    same_as_fresh()
    first, second, *_ = [n.logical_id for n in env.fake.cluster("hp").nodes.values() if n.group == "a"]
    env.fake.advance(60)
    env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[first])
    env.fake.add_node("other", "a")
    env.fake.advance(1800)
    env.fake.move_nodes("hp", [second], "b", attach_s=60)
    env.fake.advance(120)
    assert env.fake.cluster("hp").nodes[second].group == "b"
    same_as_fresh()


def test_include_node_logical_ids_shows_provisioning_nodes(env: Env) -> None:
    workers(env.fake, count=1)
    new = env.fake.add_node("hp", "workers", ready_after_s=600)

    plain = env.sm.list_cluster_nodes(ClusterName="hp")["ClusterNodeSummaries"]
    assert len(plain) == 2 and all("NodeLogicalId" not in s for s in plain)
    full = env.sm.list_cluster_nodes(ClusterName="hp", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]
    pending = next(s for s in full if s["NodeLogicalId"] == new)
    assert pending["InstanceId"] == "" and pending["InstanceStatus"]["Status"] == "Pending"

    env.fake.advance(60)  # EC2 launched it: it has an instance id, the lifecycle script is running
    details = env.sm.describe_cluster_node(ClusterName="hp", NodeLogicalId=new)["NodeDetails"]
    assert details["InstanceId"].startswith("i-") and details["InstanceStatus"]["Status"] == "Pending"
    assert details["Placement"]["AvailabilityZone"].startswith(REGION)
    by_id = env.sm.describe_cluster_node(ClusterName="hp", NodeId=details["InstanceId"])["NodeDetails"]
    assert by_id["NodeLogicalId"] == new
    env.fake.advance(540)
    assert status(env, new) == "Running"

    with pytest.raises(ClientError) as exc:
        env.sm.describe_cluster_node(ClusterName="hp", NodeId=details["InstanceId"], NodeLogicalId=new)
    assert error_code(exc) == "ValidationException"


def test_check_runs_and_failure_is_logged(env: Env) -> None:
    good, bad, _ = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    arn = env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)["ClusterArn"]
    assert arn == env.fake.cluster("hp").arn
    assert status(env, good) == "Running"  # the check starts ~30 s after the request
    env.fake.advance(30)
    assert status(env, good) == status(env, bad) == "DeepHealthCheckInProgress"
    env.fake.advance(3600)
    assert status(env, good) == status(env, bad) == "Running"  # NodeRecovery None: nobody acts
    assert env.fake.actions == []

    group = f"/aws/sagemaker/Clusters/hp/{env.fake.cluster('hp').cluster_id}"
    events = env.logs.get_log_events(
        logGroupName=group, logStreamName=f"DeepHealthCheckResults/{iid(env, bad)}", startFromHead=True
    )["events"]
    line = json.loads(events[0]["message"])
    assert line["level"] == "error" and line["msg"].startswith("Encountered FaultyInstance. Replace the Instance.")
    assert "Region: us-east-1, InstanceType: ml.p5.48xlarge" in line["msg"]
    assert events[0]["timestamp"] == round(env.fake.clock.now() * 1000)  # virtual time, in ms
    good_line = env.logs.get_log_events(logGroupName=group, logStreamName=f"DeepHealthCheckResults/{iid(env, good)}")
    assert json.loads(good_line["events"][0]["message"])["level"] == "info"


def test_second_request_is_rejected_while_a_check_is_active(env: Env) -> None:
    workers(env.fake)
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)
    with pytest.raises(ClientError) as exc:
        env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)
    assert error_code(exc) == "ValidationException"
    assert "Only one on-demand deep health check request can be active per cluster" in str(exc.value)
    assert env.fake.started_while_active == 1 and len(env.fake.rejected_while_active) == 1

    env.fake.advance(30 + 3600)  # finished: a new request is fine
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)
    assert env.fake.started_while_active == 1


def test_second_request_merges_in_merge_mode(env: Env) -> None:
    first, second, _ = workers(env.fake)
    env.fake.readings = Readings(second_check_request="merge")
    one = [{**STRESS[0], "InstanceIds": [iid(env, first)]}]
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=one)
    env.fake.advance(600)
    two = [{**STRESS[0], "InstanceIds": [iid(env, second)]}]
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=two)
    assert env.fake.started_while_active == 1 and env.fake.rejected_while_active == []
    env.fake.advance(30)
    assert status(env, first) == status(env, second) == "DeepHealthCheckInProgress"
    check = env.fake.cluster("hp").checks[0]
    env.fake.advance(3000)  # the first node is done; the merged one keeps the request active
    assert status(env, first) == "Running" and env.fake.cluster("hp").check is check
    env.fake.advance(600)
    assert check.results == {first: "pass", second: "pass"} and env.fake.cluster("hp").check is None


def test_busy_node_is_skipped_and_keeps_running(env: Env) -> None:
    busy, free, _ = workers(env.fake)
    env.fake.set_truth("hp", busy, "skip")
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)
    env.fake.advance(30)
    assert status(env, busy) == "Running" and status(env, free) == "DeepHealthCheckInProgress"
    env.fake.advance(3600)
    assert env.fake.cluster("hp").checks[0].results[busy] == "skip"


def test_reboot_keeps_instance_id_and_replace_changes_it(env: Env) -> None:
    rebooted, replaced, _ = workers(env.fake)
    old_reboot, old_replace = iid(env, rebooted), iid(env, replaced)
    r = env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeIds=[old_reboot])
    assert r["Successful"] == [old_reboot] and r["Failed"] == [] and "SuccessfulNodeLogicalIds" not in r
    r = env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[replaced])
    assert r["SuccessfulNodeLogicalIds"] == [replaced] and r["FailedNodeLogicalIds"] == []

    assert status(env, rebooted) == "Pending" and status(env, replaced) == "ShuttingDown"
    env.fake.advance(60)
    assert iid(env, replaced) != old_replace and status(env, replaced) == "Pending"
    env.fake.advance(540)
    assert status(env, rebooted) == "Running" and iid(env, rebooted) == old_reboot
    env.fake.advance(1200)
    assert status(env, replaced) == "Running"
    assert env.fake.node("hp", replaced).instance_ids == [old_replace, iid(env, replaced)]
    assert [(a[1], a[2], a[3]) for a in env.fake.actions] == [
        ("reboot", rebooted, "controller"),
        ("replace", replaced, "controller"),
    ]
    with pytest.raises(ClientError) as exc:  # the old instance is gone
        env.sm.describe_cluster_node(ClusterName="hp", NodeId=old_replace)
    assert error_code(exc) == "ResourceNotFound"


def test_batch_limits_and_per_node_errors(env: Env) -> None:
    a, b, c = workers(env.fake)
    too_many = [f"i-{n:017x}" for n in range(26)]
    for call in (env.sm.batch_reboot_cluster_nodes, env.sm.batch_replace_cluster_nodes):
        with pytest.raises(ClientError) as exc:
            call(ClusterName="hp", NodeIds=too_many)
        assert error_code(exc) == "ValidationException"
        with pytest.raises(ClientError) as exc:
            call(ClusterName="hp")
        assert error_code(exc) == "ValidationException"

    env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeIds=[iid(env, a)])
    r = env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeIds=[iid(env, a), "i-0123456789abcdef0"])
    assert [(f["NodeId"], f["ErrorCode"]) for f in r["Failed"]] == [
        (iid(env, a), "InstanceIdInUse"),
        ("i-0123456789abcdef0", "InstanceIdNotFound"),
    ]
    one_b = [{**STRESS[0], "InstanceIds": [iid(env, b)]}]
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=one_b)
    env.fake.advance(30)
    r = env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[b, c, "no-such-node"])
    assert r["SuccessfulNodeLogicalIds"] == [c]
    assert [(f["NodeLogicalId"], f["ErrorCode"]) for f in r["FailedNodeLogicalIds"]] == [
        (b, "InvalidInstanceStatus"),
        ("no-such-node", "InstanceIdNotFound"),
    ]


def test_automatic_node_recovery_replaces_a_failed_node(env: Env) -> None:
    bad, _, _ = workers(env.fake, node_recovery="Automatic")
    env.fake.set_truth("hp", bad, "fail")
    old = iid(env, bad)
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)
    env.fake.advance(30 + 3600)
    assert status(env, bad) == "ShuttingDown"
    assert [(a[1], a[2], a[3]) for a in env.fake.actions] == [("replace", bad, "hyperpod")]
    r = env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[bad])  # the controller collides
    assert r["FailedNodeLogicalIds"][0]["ErrorCode"] == "InstanceIdInUse"
    env.fake.advance(1800)
    assert status(env, bad) == "Running" and iid(env, bad) != old

    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)
    env.fake.advance(30 + 3600)  # the replacement hardware passes (set_truth_replacement default)
    assert env.fake.cluster("hp").checks[1].results[bad] == "pass"


def test_reboot_cures_only_transient_faults(env: Env) -> None:
    transient, hard, _ = workers(env.fake)
    env.fake.set_truth("hp", transient, "fail", cured_by="reboot")
    env.fake.set_truth("hp", hard, "fail")
    env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[transient, hard])
    env.fake.advance(600)
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=STRESS)
    env.fake.advance(30 + 3600)
    results = env.fake.cluster("hp").checks[0].results
    assert results[transient] == "pass" and results[hard] == "fail"


def test_on_start_checks_gate_new_nodes(env: Env) -> None:
    env.fake.create_cluster("hp", [GroupSpec("workers", on_start_checks=("InstanceStress",))], "Automatic")
    new = env.fake.add_node("hp", "workers", ready_after_s=600)
    env.fake.set_truth("hp", new, "fail")
    env.fake.advance(600)
    assert status(env, new) == "DeepHealthCheckInProgress"
    env.fake.advance(3600)
    assert status(env, new) == "ShuttingDown" and env.fake.actions[0][3] == "hyperpod"
    env.fake.advance(1800)  # the replacement runs the on-start checks again
    assert status(env, new) == "DeepHealthCheckInProgress"
    env.fake.advance(3600)
    assert status(env, new) == "Running" and len(env.fake.node("hp", new).instance_ids) == 2


def test_controller_group_refuses_replace_and_health_checks(env: Env) -> None:
    workers(env.fake)
    ctl = next(n for n in env.fake.cluster("hp").nodes.values() if n.group == "controller")
    r = env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeIds=[ctl.instance_id])
    assert r["Failed"][0]["ErrorCode"] == "InvalidInstanceStatus"
    assert "controller nodes cannot be replaced" in r["Failed"][0]["Message"]
    with pytest.raises(ClientError) as exc:
        env.sm.start_cluster_health_check(
            ClusterName="hp",
            DeepHealthCheckConfigurations=[{"InstanceGroupName": "controller", "DeepHealthChecks": ["InstanceStress"]}],
        )
    assert error_code(exc) == "ValidationException" and "worker nodes only" in str(exc.value)


@pytest.mark.parametrize(
    "config",
    [
        {"InstanceGroupName": "nope", "DeepHealthChecks": ["InstanceStress"]},
        {"InstanceGroupName": "workers", "DeepHealthChecks": ["Bogus"]},
        {"InstanceGroupName": "workers", "DeepHealthChecks": ["InstanceStress"] * 4},
        {
            "InstanceGroupName": "workers",
            "DeepHealthChecks": ["InstanceStress"],
            "InstanceIds": ["i-0123456789abcdef0"],
        },
        {"InstanceGroupName": "workers", "DeepHealthChecks": ["InstanceStress"], "InstanceIds": ["worker-0"]},
        {"InstanceGroupName": "workers", "DeepHealthChecks": ["InstanceStress"], "InstanceIds": ["i-0"] * 501},
    ],
    ids=["unknown-group", "bad-enum", "four-checks", "unknown-instance", "bad-id-pattern", "501-ids"],
)
def test_health_check_request_validation(env: Env, config: dict[str, Any]) -> None:
    workers(env.fake)
    with pytest.raises(ClientError) as exc:
        env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=[config])
    assert error_code(exc) == "ValidationException"
    assert env.fake.cluster("hp").checks == []


def test_instance_connectivity_needs_two_nodes(env: Env) -> None:
    (one, *_) = workers(env.fake)
    config = {"InstanceGroupName": "workers", "DeepHealthChecks": ["InstanceConnectivity"]}
    with pytest.raises(ClientError) as exc:
        env.sm.start_cluster_health_check(
            ClusterName="hp", DeepHealthCheckConfigurations=[{**config, "InstanceIds": [iid(env, one)]}]
        )
    assert error_code(exc) == "ValidationException"
    env.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=[config])


def test_injected_errors_surface_as_client_errors(env: Env) -> None:
    workers(env.fake)
    env.fake.inject_error("ListClusterNodes")
    env.fake.inject_error("DescribeCluster", code="InternalFailure", status=500)
    with pytest.raises(ClientError) as exc:
        env.sm.list_cluster_nodes(ClusterName="hp")
    assert error_code(exc) == "ThrottlingException"
    with pytest.raises(ClientError) as exc:
        env.sm.describe_cluster(ClusterName="hp")
    assert error_code(exc) == "InternalFailure" and exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert env.sm.list_cluster_nodes(ClusterName="hp")["ClusterNodeSummaries"]  # only the next call failed
    assert env.fake.calls["ListClusterNodes"] == 2


def test_cluster_name_or_arn_and_unknown_cluster(env: Env) -> None:
    workers(env.fake)
    arn = env.fake.cluster("hp").arn
    assert env.sm.describe_cluster(ClusterName=arn)["ClusterName"] == "hp"
    assert env.sm.list_clusters()["ClusterSummaries"][0]["ClusterArn"] == arn
    for call in (env.sm.describe_cluster, env.sm.list_cluster_nodes):
        with pytest.raises(ClientError) as exc:
            call(ClusterName="other")
        assert error_code(exc) == "ResourceNotFound"


def test_deleted_cluster_goes_away_after_the_delay(env: Env) -> None:
    workers(env.fake)
    env.fake.drain_events()
    env.sm.delete_cluster(ClusterName="hp")
    assert env.sm.describe_cluster(ClusterName="hp")["ClusterStatus"] == "Deleting"
    (change,) = env.fake.drain_events()
    assert change["detail-type"] == "SageMaker HyperPod Cluster State Change"
    assert change["detail"]["ClusterStatus"] == "Deleting"
    env.fake.advance(300)
    with pytest.raises(ClientError) as exc:
        env.sm.list_cluster_nodes(ClusterName="hp")
    assert error_code(exc) == "ResourceNotFound"
    assert env.sm.list_clusters()["ClusterSummaries"] == []


def test_events_have_the_documented_shapes(env: Env) -> None:
    workers(env.fake, count=1)
    env.fake.drain_events()
    new = env.fake.add_node("hp", "workers", ready_after_s=600)
    env.fake.advance(600)
    events = env.fake.drain_events()
    descriptions = [e["detail"]["EventDetails"]["Description"] for e in events]
    instance = iid(env, new)
    assert descriptions == [
        f"EC2 Instance {instance} successfully provisioned in Cluster hp and IG workers",
        f"Instance lifecycle script execution for EC2InstanceId {instance} has Started",
        f"Instance lifecycle script execution for EC2InstanceId {instance} has Succeeded",
    ]
    arn = env.fake.cluster("hp").arn
    for e in events:
        assert e["source"] == "aws.sagemaker" and e["detail-type"] == "SageMaker HyperPod Cluster Event"
        assert e["resources"] == [arn] and e["account"] == "123456789012" and e["region"] == REGION
        d = e["detail"]["EventDetails"]
        assert isinstance(d["EventTime"], int) and d["ResourceType"] == "Instance" and d["EventLevel"] == "Info"
        assert d["InstanceId"] == instance and d["ClusterArn"] == arn and d["InstanceGroupName"] == "workers"
        assert d["EventDetails"]["EventMetadata"]["Instance"]["NodeLogicalId"] == new
    assert events[1]["detail"]["EventDetails"]["EventDetails"]["EventMetadata"]["Instance"]["LcsExecutionState"] == (
        "Started"
    )
    assert events[2]["detail"]["EventDetails"]["EventTime"] == round(env.fake.clock.now() * 1000)

    listed = env.sm.list_cluster_events(ClusterName="hp", NodeId=instance)["Events"]  # newest first
    assert [e["EventId"] for e in listed] == [e["detail"]["EventDetails"]["EventId"] for e in reversed(events)]
    detail = env.sm.describe_cluster_event(ClusterName="hp", EventId=listed[0]["EventId"])["EventDetails"]
    assert detail["EventDetails"]["EventMetadata"]["Instance"]["NodeLogicalId"] == new

    env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[new])
    (reboot,) = env.fake.drain_events()
    assert (
        reboot["detail"]["EventDetails"]["Description"] == f"Reboot of EC2 Instance {instance} is currently in progress"
    )


def test_seeded_fakes_are_deterministic() -> None:
    def ids(seed: int) -> list[str]:
        fake = FakeHyperPod(Clock(), seed=seed)
        c = fake.create_cluster("hp", [GroupSpec("workers", count=2)])
        return [c.cluster_id, *(f"{n.logical_id}/{n.instance_id}" for n in c.nodes.values())]

    assert ids(7) == ids(7) != ids(8)
