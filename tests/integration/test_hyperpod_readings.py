"""The HyperPod fake under each reading of undocumented behaviour (``tests/fakes/readings.py``), exercised
through real boto3 clients as in ``test_hyperpod_fake.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.fakes.hyperpod import Clock, FakeHyperPod, GroupSpec, Node
from tests.fakes.model import _iso
from tests.fakes.readings import AutoRecovery, BusyError, Readings, UnsupportedTypes
from tests.integration.test_hyperpod_fake import STRESS, Env, env, error_code, iid, status, workers

__all__ = ["env"]  # the fixture, shared with test_hyperpod_fake.py


def start(e: Env, configs: list[dict[str, Any]] = STRESS) -> None:
    e.sm.start_cluster_health_check(ClusterName="hp", DeepHealthCheckConfigurations=configs)


def only(e: Env, logical_id: str) -> list[dict[str, Any]]:
    return [{**STRESS[0], "InstanceIds": [iid(e, logical_id)]}]


def log_streams(e: Env) -> dict[str, list[dict[str, Any]]]:
    group = f"/aws/sagemaker/Clusters/hp/{e.fake.cluster('hp').cluster_id}"
    if not e.logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
        return {}
    streams = e.logs.describe_log_streams(logGroupName=group)["logStreams"]
    return {
        s["logStreamName"]: e.logs.get_log_events(
            logGroupName=group, logStreamName=s["logStreamName"], startFromHead=True
        )["events"]
        for s in streams
    }


def listed(e: Env) -> set[str]:
    nodes = e.sm.list_cluster_nodes(ClusterName="hp", IncludeNodeLogicalIds=True, MaxResults=100)
    return {s["NodeLogicalId"] for s in nodes["ClusterNodeSummaries"]}


@pytest.mark.parametrize("naming", ["opaque", "hostname", "logical-id"])
def test_result_stream_naming(env: Env, naming: str) -> None:
    (node,) = workers(env.fake, count=1)
    env.fake.readings = Readings(result_stream=naming)
    start(env)
    env.fake.advance(30 + 3600)
    start(env)
    env.fake.advance(30 + 3600)
    names = sorted(log_streams(env))
    if naming == "opaque":  # one new stream per node and check, naming nothing
        assert len(names) == 2 and all(iid(env, node) not in n for n in names)
    elif naming == "logical-id":
        assert names == [f"DeepHealthCheckResults/{node}"]
    else:
        ip = env.fake.node("hp", node).private_ip
        assert names == [f"DeepHealthCheckResults/ip-{ip.replace('.', '-')}"]


@pytest.mark.parametrize("where", ["none", "field", "message"])
def test_result_line_names_the_instance(env: Env, where: str) -> None:
    good, bad, _ = workers(env.fake)
    env.fake.readings = Readings(result_line_instance=where)
    env.fake.set_truth("hp", bad, "fail")
    start(env)
    env.fake.advance(30 + 3600)
    streams = log_streams(env)
    fail = json.loads(streams[f"DeepHealthCheckResults/{iid(env, bad)}"][0]["message"])
    ok = json.loads(streams[f"DeepHealthCheckResults/{iid(env, good)}"][0]["message"])
    assert fail["level"] == "error" and fail["msg"].startswith("Encountered FaultyInstance.")
    if where == "none":
        assert "instance_id" not in fail and iid(env, bad) not in fail["msg"]
        assert ok["msg"] == "Deep health check passed"
    elif where == "field":
        assert fail["instance_id"] == iid(env, bad) and ok["instance_id"] == iid(env, good)
    else:
        assert fail["msg"].endswith(f" Instance: {iid(env, bad)}") and "instance_id" not in fail
        assert ok["msg"] == f"Deep health check passed on instance {iid(env, good)}"


def test_log_lag_delays_the_line_but_keeps_its_timestamp(env: Env) -> None:
    (bad,) = workers(env.fake, count=1)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(log_lag_s=(120.0, 120.0))
    start(env)
    env.fake.advance(30 + 3600)
    end = env.fake.clock.now()
    assert status(env, bad) == "Running" and log_streams(env) == {}  # status first, line not yet readable
    env.fake.advance(120)
    (event,) = log_streams(env)[f"DeepHealthCheckResults/{iid(env, bad)}"]
    assert event["timestamp"] == round(end * 1000)


def test_lines_per_test_put_a_faulty_nodes_pass_lines_before_its_error(env: Env) -> None:
    good, bad, _ = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(result_lines="per-test", result_line_instance="field")
    start(env)
    env.fake.advance(30 + 3600)
    streams = log_streams(env)
    lines = {node: [json.loads(e["message"]) for e in streams[f"DeepHealthCheckResults/{iid(env, node)}"]]
             for node in (good, bad)}  # fmt: skip
    assert [(x["level"], x["msg"]) for x in lines[good]] == [
        ("info", "stress-ng passed"), ("info", "EFA loopback passed"), ("info", "Deep health check passed")
    ]  # fmt: skip
    assert [x["level"] for x in lines[bad]] == ["info", "info", "error"]  # passes first, the failure last
    assert all(x["instance_id"] == iid(env, bad) for x in lines[bad])


def test_failed_status_in_progress_isolates_the_node_but_ends_the_check(env: Env) -> None:
    bad, good, other = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(failed_status="DeepHealthCheckInProgress")
    start(env, [{**STRESS[0], "InstanceIds": [iid(env, bad), iid(env, good)]}])
    env.fake.advance(30 + 3600)
    assert status(env, bad) == "DeepHealthCheckInProgress" and status(env, good) == "Running"
    c = env.fake.cluster("hp")
    assert c.check is None and c.checks[0].results == {bad: "fail", good: "pass"}
    (op,) = env.sm.list_cluster_operations(ClusterName="hp")["ClusterOperationSummaries"]
    assert op["Status"] == "Done"

    start(env, only(env, other))  # the lock is free; the isolated node is refused nothing
    env.fake.advance(30)
    r = env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[bad, other])
    assert r["SuccessfulNodeLogicalIds"] == [bad]
    assert [(f["NodeLogicalId"], f["ErrorCode"]) for f in r["FailedNodeLogicalIds"]] == [
        (other, "InvalidInstanceStatus")  # genuinely in a running check
    ]
    env.fake.advance(600)
    assert status(env, bad) == "Running" and not env.fake.node("hp", bad).isolated


def test_failed_status_failure_vanishes_then_hyperpod_replaces(env: Env) -> None:
    (bad, _, _) = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(failed_status="Failure", failure_retry_s=(600.0, 600.0), vanish_s=(120.0, 120.0))
    old = iid(env, bad)
    start(env)
    env.fake.advance(30 + 3600)
    assert bad not in listed(env)
    with pytest.raises(ClientError) as exc:
        env.sm.describe_cluster_node(ClusterName="hp", NodeLogicalId=bad)
    assert error_code(exc) == "ResourceNotFound"
    env.fake.advance(120)
    assert bad in listed(env) and status(env, bad) == "Failure" and iid(env, bad) == old
    env.fake.advance(480)  # HyperPod's retry: a replacement, recorded as its action
    assert status(env, bad) == "ShuttingDown"
    assert [(a[1], a[2], a[3]) for a in env.fake.actions] == [("replace", bad, "hyperpod")]
    env.fake.advance(1800)
    assert status(env, bad) == "Running" and iid(env, bad) != old


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("There is an existing operation on {cluster}", "There is an existing operation on hp"),
        # A message a real cluster answered, replayed as it was: braces are text, only {cluster} is a placeholder.
        ('Busy: {"op": "hp-2", "nodes": {}} on {cluster} {0}', 'Busy: {"op": "hp-2", "nodes": {}} on hp {0}'),
    ],
)
def test_busy_error_is_configurable(env: Env, message: str, said: str) -> None:
    workers(env.fake)
    env.fake.readings = Readings(busy_error=BusyError(code="ConflictException", message=message, status=409))
    start(env)
    with pytest.raises(ClientError) as exc:
        start(env)
    assert error_code(exc) == "ConflictException" and exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert exc.value.response["Error"]["Message"] == said


def test_supersede_drops_the_old_checks_unfinished_nodes(env: Env) -> None:
    a, b, c = workers(env.fake)
    env.fake.readings = Readings(second_check_request="supersede")
    start(env, [{**STRESS[0], "InstanceIds": [iid(env, a), iid(env, b)]}])
    env.fake.advance(30 + 600)
    start(env, [{**STRESS[0], "InstanceIds": [iid(env, b), iid(env, c)]}])
    cluster = env.fake.cluster("hp")
    old, new = cluster.checks
    assert status(env, a) == "Running" and status(env, b) == "DeepHealthCheckInProgress"  # a: no result line
    assert old.results == {a: "superseded", b: "superseded"} and cluster.check is new
    ops = env.sm.list_cluster_operations(ClusterName="hp", SortOrder="Ascending")["ClusterOperationSummaries"]
    assert [o["Status"] for o in ops] == ["Superseded", "InProgress"]
    env.fake.advance(3000)  # the old check's end for b is ignored: b started over
    assert status(env, b) == "DeepHealthCheckInProgress" and log_streams(env) == {}
    env.fake.advance(30 + 600)
    assert new.results == {b: "pass", c: "pass"} and cluster.check is None
    assert sorted(log_streams(env)) == sorted(f"DeepHealthCheckResults/{iid(env, n)}" for n in (b, c))


def test_cluster_operations_list_and_describe(env: Env) -> None:
    workers(env.fake)
    t0 = env.fake.clock.now()
    start(env)
    env.fake.advance(30 + 3600)
    start(env, [{**STRESS[0], "DeepHealthChecks": ["InstanceConnectivity"]}])
    ops = env.sm.list_cluster_operations(ClusterName="hp")["ClusterOperationSummaries"]  # newest first
    assert [o["Status"] for o in ops] == ["InProgress", "Done"]
    assert all(o["Type"] == "DeepHealthCheck" and o["ClusterArn"] == env.fake.cluster("hp").arn for o in ops)
    assert ops[1]["CreationTime"].timestamp() == t0
    done = env.sm.list_cluster_operations(ClusterName="hp", Status="Done")["ClusterOperationSummaries"]
    assert [o["OperationId"] for o in done] == [ops[1]["OperationId"]]
    assert env.sm.list_cluster_operations(ClusterName="hp", Type="Scaling")["ClusterOperationSummaries"] == []
    after = env.sm.list_cluster_operations(ClusterName="hp", CreationTimeAfter=t0 + 1)["ClusterOperationSummaries"]
    assert [o["OperationId"] for o in after] == [ops[0]["OperationId"]]
    before = env.sm.list_cluster_operations(ClusterName="hp", CreationTimeBefore=t0 + 1)["ClusterOperationSummaries"]
    assert [o["OperationId"] for o in before] == [ops[1]["OperationId"]]
    pages = list(
        env.sm.get_paginator("list_cluster_operations").paginate(ClusterName="hp", PaginationConfig={"PageSize": 1})
    )
    assert [p["ClusterOperationSummaries"][0]["OperationId"] for p in pages] == [o["OperationId"] for o in ops]

    d = env.sm.describe_cluster_operation(ClusterName="hp", OperationId=ops[1]["OperationId"])
    assert d["Status"] == "Done" and d["DeepHealthCheckDetails"] == STRESS
    with pytest.raises(ClientError) as exc:
        env.sm.describe_cluster_operation(ClusterName="hp", OperationId="00000000-0000-4000-8000-000000000000")
    assert error_code(exc) == "ResourceNotFound"


@pytest.mark.parametrize("queued", ["Running", "DeepHealthCheckInProgress"])
def test_busy_nodes_queue_behind_their_jobs(env: Env, queued: str) -> None:
    short, long, free = workers(env.fake)
    env.fake.readings = Readings(queued_status=queued)
    now = env.fake.clock.now()
    env.fake.set_busy("hp", short, now + 300)
    env.fake.set_busy("hp", long, now + 3600)
    start(env)
    env.fake.advance(30)
    assert status(env, free) == "DeepHealthCheckInProgress"
    assert status(env, short) == status(env, long) == queued
    env.fake.advance(270)  # the short job ends: its check begins
    assert status(env, short) == "DeepHealthCheckInProgress"
    env.fake.advance(300)  # 10 min: the long job still runs, the node is skipped, no result line
    assert status(env, long) == "Running"
    env.fake.advance(3600)
    assert env.fake.cluster("hp").checks[0].results == {short: "pass", long: "skip", free: "pass"}
    assert f"DeepHealthCheckResults/{iid(env, long)}" not in log_streams(env)


def test_truth_skip_still_queues_and_skips(env: Env) -> None:
    busy, _, _ = workers(env.fake)
    env.fake.set_truth("hp", busy, "skip")
    env.fake.readings = Readings(queued_status="DeepHealthCheckInProgress")
    start(env)
    env.fake.advance(599)
    assert status(env, busy) == "DeepHealthCheckInProgress"
    env.fake.advance(1)
    assert status(env, busy) == "Running" and env.fake.cluster("hp").checks[0].results[busy] == "skip"


def test_auto_recovery_can_reboot_after_a_delay(env: Env) -> None:
    transient, _, _ = workers(env.fake, node_recovery="Automatic")
    env.fake.set_truth("hp", transient, "fail", cured_by="reboot")
    env.fake.readings = Readings(
        auto_recovery=AutoRecovery(reboot_fraction=1.0, delay_s=(300.0, 300.0), reboot_s=(120.0, 120.0))
    )
    old = iid(env, transient)
    start(env)
    env.fake.advance(30 + 3600)
    assert status(env, transient) == "Running" and env.fake.actions == []  # HyperPod has not acted yet
    env.fake.advance(300)
    assert status(env, transient) == "Pending"
    assert [(a[1], a[2], a[3]) for a in env.fake.actions] == [("reboot", transient, "hyperpod")]
    env.fake.advance(120)
    n = env.fake.node("hp", transient)
    assert status(env, transient) == "Running" and iid(env, transient) == old and n.truth == "pass"


def test_auto_recovery_delay_yields_to_the_controller(env: Env) -> None:
    bad, _, _ = workers(env.fake, node_recovery="Automatic")
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(auto_recovery=AutoRecovery(delay_s=(300.0, 300.0)))
    start(env)
    env.fake.advance(30 + 3600 + 10)
    env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[bad])
    env.fake.advance(3000)
    assert [(a[1], a[3]) for a in env.fake.actions] == [("replace", "controller")]


def mixed(fake: FakeHyperPod) -> tuple[str, str]:
    groups = [GroupSpec("gpu", count=2), GroupSpec("trn", "ml.trn1.32xlarge", count=2)]
    c = fake.create_cluster("hp", groups)
    gpu = next(n.logical_id for n in c.nodes.values() if n.group == "gpu")
    trn = next(n.logical_id for n in c.nodes.values() if n.group == "trn")
    return gpu, trn


BOTH = [{"InstanceGroupName": g, "DeepHealthChecks": ["InstanceStress"]} for g in ("gpu", "trn")]


def test_unsupported_type_rejects_the_whole_request(env: Env) -> None:
    mixed(env.fake)
    env.fake.readings = Readings(unsupported_types=UnsupportedTypes(patterns=("ml.trn*",), behaviour="reject"))
    with pytest.raises(ClientError) as exc:
        start(env, BOTH)
    message = exc.value.response["Error"]["Message"]
    assert error_code(exc) == "ValidationException" and "ml.trn1.32xlarge" in message and "trn" in message
    assert not any(w in message.lower() for w in ("already", "in progress", "active", "ongoing"))
    assert env.fake.cluster("hp").checks == []


def test_unsupported_type_is_skipped_silently(env: Env) -> None:
    gpu, trn = mixed(env.fake)
    env.fake.readings = Readings(unsupported_types=UnsupportedTypes(patterns=("ml.trn*",), behaviour="skip"))
    start(env, BOTH)
    env.fake.advance(30)
    assert status(env, gpu) == "DeepHealthCheckInProgress" and status(env, trn) == "Running"
    env.fake.advance(3600)
    assert env.fake.cluster("hp").checks[0].results[trn] == "skip"
    assert f"DeepHealthCheckResults/{iid(env, trn)}" not in log_streams(env)


def test_transient_launch_failure_retries_with_a_new_instance(env: Env) -> None:
    workers(env.fake, count=1)
    env.fake.readings = Readings(transient_failure_rate=1.0, failure_retry_s=(300.0, 300.0))
    new = env.fake.add_node("hp", "workers", ready_after_s=600)
    env.fake.set_truth("hp", new, "fail")
    env.fake.advance(60)
    first = iid(env, new)
    assert first and status(env, new) == "Failure"
    env.fake.readings = Readings()  # the retry succeeds
    env.fake.advance(300)
    n = env.fake.node("hp", new)
    assert n.instance_ids == [first, n.instance_id] and status(env, new) == "Pending"
    assert n.truth == "fail" and env.fake.actions == []  # not a hardware fault; not a recorded action
    env.fake.advance(540)
    assert status(env, new) == "Running"


def test_replacement_launch_failure_keeps_the_replace_in_flight(env: Env) -> None:
    node, _, _ = workers(env.fake)
    env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[node])
    env.fake.readings = Readings(transient_failure_rate=1.0, failure_retry_s=(300.0, 300.0), vanish_s=(0.0, 1000.0))
    env.fake.advance(60)
    n = env.fake.node("hp", node)
    assert n.status == "Failure" and n.in_flight == "replace" and 60 < n.hidden_until - env.fake.clock.now() <= 300
    env.fake.readings = Readings()
    env.fake.advance(300 + 1740)
    assert status(env, node) == "Running" and len(n.instance_ids) == 3


def test_creation_time_filter_logical(env: Env) -> None:
    old, _, _ = workers(env.fake)
    env.fake.advance(100)
    cut = env.fake.clock.now()
    env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[old])
    env.fake.advance(60)  # the replacement instance launched after `cut`; the logical node is older

    def after() -> list[str]:
        nodes = env.sm.list_cluster_nodes(ClusterName="hp", CreationTimeAfter=cut, IncludeNodeLogicalIds=True)
        return [s["NodeLogicalId"] for s in nodes["ClusterNodeSummaries"]]

    assert after() == [old]
    env.fake.readings = Readings(creation_time_filter="logical")
    assert after() == []
    everything = env.sm.list_cluster_nodes(ClusterName="hp", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]
    assert everything[-1]["NodeLogicalId"] != old  # sorted by logical creation, not LaunchTime


def test_check_start_delay_is_drawn_per_node(env: Env) -> None:
    ids = workers(env.fake, count=6)
    env.fake.readings = Readings(check_start_delay_s=(60.0, 1200.0))
    start(env)
    env.fake.advance(59)
    assert {status(env, n) for n in ids} == {"Running"}
    env.fake.advance(600)
    seen = {status(env, n) for n in ids}
    env.fake.advance(600)
    assert seen == {"Running", "DeepHealthCheckInProgress"}  # some started, some not yet (seeded)
    assert {status(env, n) for n in ids} == {"DeepHealthCheckInProgress"}


def test_eventbridge_metadata_null_and_reference_wording(env: Env) -> None:
    node, _, _ = workers(env.fake)
    env.fake.readings = Readings(event_metadata="null", event_wording="reference")
    env.fake.drain_events()
    old = iid(env, node)
    env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[node])
    env.fake.advance(1800)
    events = env.fake.drain_events()
    texts = [e["detail"]["EventDetails"]["Description"] for e in events]
    assert texts[0] == f"Instance {old} is starting as part of instance replacement in Cluster hp and IG workers"
    assert texts[-1] == (
        f"Instance {iid(env, node)} replacement completed successfully as part of instance replacement "
        "in Cluster hp and IG workers"
    )
    assert all(e["detail"]["EventDetails"]["EventDetails"]["EventMetadata"] is None for e in events)
    listed_event = env.sm.list_cluster_events(ClusterName="hp")["Events"][0]
    detail = env.sm.describe_cluster_event(ClusterName="hp", EventId=listed_event["EventId"])["EventDetails"]
    assert detail["EventDetails"]["EventMetadata"]["Instance"]["NodeLogicalId"] == node


def test_move_nodes_keeps_ids_and_reruns_lifecycle(env: Env) -> None:
    groups = [GroupSpec("a", count=2), GroupSpec("b", on_start_checks=("InstanceStress",))]
    c = env.fake.create_cluster("hp", groups)
    node, other = list(c.nodes)
    old = iid(env, node)
    env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[other])
    with pytest.raises(ValueError):
        env.fake.move_nodes("hp", [other], "b")  # a reboot is in flight
    env.fake.drain_events()
    env.fake.move_nodes("hp", [node], "b", attach_s=300)
    assert status(env, node) == "DetachInProgress"
    r = env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[node])
    assert r["FailedNodeLogicalIds"][0]["ErrorCode"] == "InstanceIdInUse"
    env.fake.advance(60)
    d = env.sm.describe_cluster_node(ClusterName="hp", NodeLogicalId=node)["NodeDetails"]
    assert d["InstanceStatus"]["Status"] == "AttachInProgress" and d["InstanceGroupName"] == "b"
    assert d["InstanceId"] == old
    env.fake.advance(300)  # the target group has on-start checks
    assert status(env, node) == "DeepHealthCheckInProgress"
    env.fake.advance(3600)
    assert status(env, node) == "Running" and iid(env, node) == old
    states = [
        e["detail"]["EventDetails"]["EventDetails"]["EventMetadata"]["Instance"].get("LcsExecutionState")
        for e in env.fake.drain_events()
    ]
    assert states == ["Started", "Succeeded"]


class Recording(FakeHyperPod):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.history: list[tuple[str, str]] = []

    def _truth_changed(self, n: Node) -> None:
        self.history.append((n.instance_id, n.truth))


def test_truth_changed_hook() -> None:
    fake = Recording(Clock())
    c = fake.create_cluster("hp", [GroupSpec("workers", count=1)])
    (n,) = c.nodes.values()
    first = n.instance_id
    fake.set_truth("hp", n.logical_id, "fail", cured_by="reboot")
    fake._reboot(c, n, "test")
    fake.advance(600)
    fake.set_truth_replacement("hp", n.logical_id, "fail")
    fake.replace_now("hp", n.logical_id)
    fake.advance(60)
    assert fake.history == [(first, "pass"), (first, "fail"), (first, "pass"), (n.instance_id, "fail")]


# ---- result lines: format, failure and pass lines, peers, hostnames, NCCL summary, ingestion --------------

FAULT = (
    "Encountered FaultyInstance. Replace the Instance. Region: us-east-1, InstanceType: ml.p5.48xlarge. "
    "ERROR: DCGM diagnostic level 4 failed on GPU 3"
)
ALL_CHECKS = [{"InstanceGroupName": "workers", "DeepHealthChecks": ["InstanceStress", "InstanceConnectivity",
                                                                    "MultiNodeTrainingValidation"]}]  # fmt: skip
ALL_CHECKS_S = 30 + 3600 + 600 + 900


def messages(e: Env, logical_id: str) -> list[str]:
    return [x["message"] for x in log_streams(e).get(f"DeepHealthCheckResults/{iid(e, logical_id)}", [])]


def plain(ts: str, text: str) -> str:
    return f"{ts}  info  {text}"


def json_line(level: str, ts: str, msg: str) -> str:
    return json.dumps({"level": level, "ts": ts, "msg": msg})


# The EFA devices of an ml.p5.48xlarge (32: EC2's MaximumEfaInterfaces), as the fake names them.
DEVICES = ["rdmap0s29", *(f"rdmap0s{30 + i}" for i in range(31))]
LAST_DEVICE = DEVICES[-1]


def stress_lines(ts: str, replace: str = "false", reboot: str = "false", suffix: str = "") -> list[str]:
    return [
        plain(ts, f"stress-ng success{suffix}"),
        plain(ts, f"GpuPci Count check success{suffix}"),
        plain(ts, "DCGM diagnostic health summary: dcgmCheckLevel: 4 dcgmVersion: 3.3.7 gpuDriverVersion: "
                  f"535.183.01, gpuDeviceIds: [2330] replacementRequired: {replace} rebootRequired: {reboot}{suffix}"),
        *(plain(ts, f"EFA Loopback check passed for device: {device}{suffix}") for device in DEVICES),
    ]  # fmt: skip


def nccl(nodes: int) -> str:
    return (
        "Nccl test successful. Summary: NcclMaxAlgoBw: 181.52, NcclAvgAlgoBw: 170.08, "
        f"NcclNodes: {nodes}, NcclClusterMessage:"
    )


def test_default_readings_keep_todays_lines(env: Env) -> None:
    good, bad, _ = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    assert env.fake.readings == Readings(
        result_format="json", failure_line="error", pass_line="yes", isolated_holds_operation=False,
        failure_retried=True, peer_lines=False, foreign_hostnames=False, nccl_summary=False,
    )  # fmt: skip
    start(env, ALL_CHECKS)
    env.fake.advance(ALL_CHECKS_S)
    ts = _iso(env.fake.clock.now())
    assert messages(env, good) == [f'{{"level": "info", "ts": "{ts}", "msg": "Deep health check passed"}}']
    assert messages(env, bad) == [f'{{"level": "error", "ts": "{ts}", "msg": "{FAULT}"}}']
    assert len(log_streams(env)) == 3  # one per node, nothing else


@pytest.mark.parametrize("where", ["none", "message", "field"])
def test_doc_plain_lines_are_the_documented_on_node_lines(env: Env, where: str) -> None:
    good, replace, reboot = workers(env.fake)
    env.fake.set_truth("hp", replace, "fail", cured_by="replace")
    env.fake.set_truth("hp", reboot, "fail", cured_by="reboot")
    env.fake.readings = Readings(result_format="doc-plain", result_line_instance=where)
    start(env, ALL_CHECKS)
    env.fake.advance(ALL_CHECKS_S)
    ts = _iso(env.fake.clock.now())

    def expected(node: str, replace_flag: str, reboot_flag: str) -> list[str]:
        sfx = "" if where == "none" else f" instance: {iid(env, node)}"  # a plain line has no field
        return [
            *stress_lines(ts, replace_flag, reboot_flag, sfx),
            plain(ts, nccl(3) + sfx),
            plain(ts, "MultiNodeTrainingValidation passed" + sfx),
        ]

    assert messages(env, good) == expected(good, "false", "false")
    for node, flags in ((replace, ("true", "false")), (reboot, ("false", "true"))):
        *per_test, failure = messages(env, node)
        assert per_test == expected(node, *flags)  # its other tests still say success / passed
        fail = json.loads(failure)  # the failure line is the JSON line, after the plain lines
        assert fail["level"] == "error" and fail["msg"].startswith(FAULT)
        assert ("instance_id" in fail) == (where == "field")


@pytest.mark.parametrize("pass_line", ["yes", "none"])
def test_an_efa_fault_fails_one_device_and_leaves_dcgm_clean(env: Env, pass_line: str) -> None:
    (bad,) = workers(env.fake, count=1)
    env.fake.set_truth("hp", bad, "fail", cured_by="replace")
    env.fake.readings = Readings(result_format="doc-plain", faulty_test="efa", pass_line=pass_line)
    start(env)
    env.fake.advance(30 + 3600)
    ts = _iso(env.fake.clock.now())
    *lines, failure = messages(env, bad)
    failed_device = plain(ts, f"EFA Loopback check failed for device: {LAST_DEVICE}")
    if pass_line == "none":  # only the failure evidence: the failing device's line
        assert lines == [failed_device]
    else:
        assert lines == [*stress_lines(ts, "false", "false", "")[:-1], failed_device]
    assert json.loads(failure)["level"] == "error"


def test_doc_plain_writes_only_the_requested_tests(env: Env) -> None:
    a, b, _ = workers(env.fake)
    env.fake.readings = Readings(result_format="doc-plain")
    start(env, [{"InstanceGroupName": "workers", "InstanceIds": [iid(env, a), iid(env, b)],
                 "DeepHealthChecks": ["InstanceConnectivity"]}])  # fmt: skip
    env.fake.advance(30 + 600)
    assert messages(env, a) == [plain(_iso(env.fake.clock.now()), nccl(2))]


@pytest.mark.parametrize("fmt", ["json", "doc-plain"])
@pytest.mark.parametrize("failure", ["warn", "none"])
def test_failure_line(env: Env, failure: str, fmt: str) -> None:
    bad, bad_per_test = workers(env.fake, count=2)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.set_truth("hp", bad_per_test, "fail")
    env.fake.readings = Readings(failure_line=failure, result_format=fmt)
    start(env, only(env, bad))
    env.fake.advance(30 + 3600)
    env.fake.readings = Readings(failure_line=failure, result_format=fmt, result_lines="per-test")
    start(env, only(env, bad_per_test))
    env.fake.advance(30 + 3600)
    t1, t2 = _iso(env.fake.clock.now() - 3630), _iso(env.fake.clock.now())
    warn = [json_line("warn", t1, FAULT)] if failure == "warn" else []
    warn2 = [json_line("warn", t2, FAULT)] if failure == "warn" else []
    if fmt == "json":
        assert messages(env, bad) == warn
        assert messages(env, bad_per_test) == [
            json_line("info", t2, "stress-ng passed"), json_line("info", t2, "EFA loopback passed"), *warn2
        ]  # fmt: skip
    else:  # the failure shows in the DCGM summary (and the warn line, if any)
        assert messages(env, bad) == [*stress_lines(t1, replace="true"), *warn]
        assert messages(env, bad_per_test) == [*stress_lines(t2, replace="true"), *warn2]  # per-test: no change


@pytest.mark.parametrize("fmt", ["json", "doc-plain"])
def test_pass_line_none_leaves_only_failure_evidence(env: Env, fmt: str) -> None:
    good, bad, _ = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail", cured_by="reboot")
    env.fake.readings = Readings(pass_line="none", result_format=fmt, result_lines="per-test", peer_lines=True)
    start(env, ALL_CHECKS)
    env.fake.advance(ALL_CHECKS_S)
    ts = _iso(env.fake.clock.now())
    assert messages(env, good) == [] and sorted(log_streams(env)) == [f"DeepHealthCheckResults/{iid(env, bad)}"]
    dcgm = stress_lines(ts, reboot="true")[2:3] if fmt == "doc-plain" else []
    assert messages(env, bad) == [*dcgm, json_line("error", ts, FAULT)]


@pytest.mark.parametrize("second", ["reject", "merge", "supersede"])
def test_isolated_node_holds_the_operation_until_rebooted(env: Env, second: str) -> None:
    bad, good, other = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(
        failed_status="DeepHealthCheckInProgress", isolated_holds_operation=True, second_check_request=second
    )
    start(env, [{**STRESS[0], "InstanceIds": [iid(env, bad), iid(env, good)]}])
    env.fake.advance(30 + 3600)
    assert status(env, bad) == "DeepHealthCheckInProgress" and status(env, good) == "Running"
    assert json.loads(messages(env, bad)[0])["level"] == "error"  # its line is written at the check's end

    def ops() -> list[dict[str, Any]]:
        return env.sm.list_cluster_operations(ClusterName="hp", SortOrder="Ascending")["ClusterOperationSummaries"]

    env.fake.advance(7200)
    assert [o["Status"] for o in ops()] == ["InProgress"]
    check = env.fake.cluster("hp").checks[0]
    assert check.pending == {bad} and check.results == {good: "pass"}

    if second == "reject":  # as for any active check
        with pytest.raises(ClientError) as exc:
            start(env, only(env, other))
        assert error_code(exc) == "ValidationException"
    else:
        start(env, [{**STRESS[0], "InstanceIds": [iid(env, bad), iid(env, other)]}])
    if second == "supersede":  # the old operation ends; the held node leaves it as failed, stays isolated
        assert [o["Status"] for o in ops()] == ["Superseded", "InProgress"] and check.results[bad] == "fail"
        assert status(env, bad) == "DeepHealthCheckInProgress"
        assert env.fake.cluster("hp").checks[1].results == {bad: "skip"}  # not Running: skipped

    r = env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[bad])
    assert r["SuccessfulNodeLogicalIds"] == [bad]
    assert check.results[bad] == "fail" and bad not in check.pending  # merge: `other` is still in it
    env.fake.advance(30 + 3600)  # the second check (if any) ends too
    assert [o["Status"] for o in ops()][-1] == "Done" and ops()[0]["Status"] in ("Done", "Superseded")


@pytest.mark.parametrize("shown", ["Failed", "DeepHealthCheckFailed"])
@pytest.mark.parametrize("action", ["reboot", "replace"])
def test_off_enum_failed_status_isolates_until_rebooted_or_replaced(env: Env, shown: str, action: str) -> None:
    bad, _, _ = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail", cured_by="reboot")
    env.fake.readings = Readings(failed_status=shown)
    start(env)
    env.fake.advance(30 + 3600)
    n = env.fake.node("hp", bad)
    assert status(env, bad) == shown and n.isolated and env.fake.cluster("hp").check is None
    listed_status = {
        s["NodeLogicalId"]: s["InstanceStatus"]["Status"]
        for s in env.sm.list_cluster_nodes(ClusterName="hp", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]
    }
    assert listed_status[bad] == shown
    env.fake.advance(86400)
    assert status(env, bad) == shown and env.fake.actions == []  # nobody acts on it

    n.isolated = False  # not isolated: the status alone does not let an action through
    r = env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[bad])
    assert r["FailedNodeLogicalIds"][0]["ErrorCode"] == "InvalidInstanceStatus"
    n.isolated = True
    batch = env.sm.batch_reboot_cluster_nodes if action == "reboot" else env.sm.batch_replace_cluster_nodes
    assert batch(ClusterName="hp", NodeLogicalIds=[bad])["SuccessfulNodeLogicalIds"] == [bad]
    assert not n.isolated
    env.fake.advance(1800)
    assert status(env, bad) == "Running"


def test_failure_not_retried_stays_until_someone_acts(env: Env) -> None:
    bad, _, _ = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(failed_status="Failure", failure_retried=False, vanish_s=(120.0, 120.0))
    old = iid(env, bad)
    start(env)
    env.fake.advance(30 + 3600)
    assert bad not in listed(env)  # the vanish_s hiding as before
    env.fake.advance(86400)
    assert status(env, bad) == "Failure" and iid(env, bad) == old and env.fake.actions == []
    r = env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[bad])
    assert r["SuccessfulNodeLogicalIds"] == [bad]
    env.fake.advance(1800)
    assert status(env, bad) == "Running" and iid(env, bad) != old


def test_failure_not_retried_after_a_failed_launch(env: Env) -> None:
    node, _, _ = workers(env.fake)
    env.sm.batch_replace_cluster_nodes(ClusterName="hp", NodeLogicalIds=[node])
    env.fake.readings = Readings(transient_failure_rate=1.0, failure_retried=False)
    env.fake.advance(60)
    env.fake.readings = Readings(failure_retried=False)
    env.fake.advance(86400)
    n = env.fake.node("hp", node)
    assert status(env, node) == "Failure" and len(n.instance_ids) == 2 and n.in_flight is None
    assert env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[node])["SuccessfulNodeLogicalIds"]
    env.fake.advance(600)
    assert status(env, node) == "Running" and len(n.instance_ids) == 2


@pytest.mark.parametrize("fmt", ["json", "doc-plain"])
def test_peer_lines_name_every_peer_on_the_writers_stream(env: Env, fmt: str) -> None:
    a, bad, busy = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.set_truth("hp", busy, "skip")  # skipped: it never runs a test, yet its peers name it
    env.fake.readings = Readings(peer_lines=True, result_format=fmt)
    start(env, [{"InstanceGroupName": "workers", "DeepHealthChecks": ["InstanceConnectivity"]}])
    env.fake.advance(30 + 600)
    ts = _iso(env.fake.clock.now())

    def peer(node: str) -> str:
        ip = env.fake.node("hp", node).private_ip
        return f"NCCL all_reduce with peer {iid(env, node)} (ip-{ip.replace('.', '-')}) passed"

    if fmt == "json":
        assert messages(env, a) == [*(json_line("info", ts, peer(p)) for p in (bad, busy)),
                                    json_line("info", ts, "Deep health check passed")]  # fmt: skip
        assert messages(env, bad) == [*(json_line("info", ts, peer(p)) for p in (a, busy)),
                                      json_line("error", ts, FAULT)]  # fmt: skip
    else:  # NcclNodes: the 2 nodes that took part
        assert messages(env, a) == [plain(ts, nccl(2)), *(plain(ts, peer(p)) for p in (bad, busy))]
        assert messages(env, bad)[:-1] == [plain(ts, nccl(2)), *(plain(ts, peer(p)) for p in (a, busy))]
    assert messages(env, busy) == []


@pytest.mark.parametrize("fmt", ["json", "doc-plain"])
def test_foreign_hostnames_name_nodes_by_an_unlisted_address(env: Env, fmt: str) -> None:
    (node,) = workers(env.fake, count=1)
    env.fake.readings = Readings(foreign_hostnames=True, result_stream="hostname", result_format=fmt)
    start(env)
    env.fake.advance(30 + 3600)
    ((stream, events),) = log_streams(env).items()
    host = stream.removeprefix("DeepHealthCheckResults/")
    assert host.startswith("ip-192-168-") and len(host.split("-")) == 5
    text = [e["message"] for e in events][-1]
    assert text.endswith(f"host: {host}" if fmt == "doc-plain" else f'host: {host}"}}')
    if fmt == "json":
        assert json.loads(text)["msg"] == f"Deep health check passed host: {host}"
    else:
        assert text == plain(
            _iso(env.fake.clock.now()), f"EFA Loopback check passed for device: {LAST_DEVICE} host: {host}"
        )
    ip = env.fake.node("hp", node).private_ip
    (summary,) = env.sm.list_cluster_nodes(ClusterName="hp", InstanceGroupNameContains="workers")[
        "ClusterNodeSummaries"
    ]
    assert summary["PrivateDnsHostname"] == f"ip-{ip.replace('.', '-')}.ec2.internal"  # the real one
    env.sm.batch_reboot_cluster_nodes(ClusterName="hp", NodeLogicalIds=[node])
    env.fake.advance(600)
    start(env)
    env.fake.advance(30 + 3600)
    assert list(log_streams(env)) == [stream]  # stable per instance


def workers_of(e: Env) -> list[str]:
    return [n.logical_id for n in e.fake.cluster("hp").nodes.values() if n.group == "workers"]


@pytest.mark.parametrize("fmt", ["json", "doc-plain"])
def test_nccl_summary_is_one_anonymous_line_per_configuration(env: Env, fmt: str) -> None:
    good, bad, _ = workers(env.fake)
    env.fake.set_truth("hp", bad, "fail")
    env.fake.readings = Readings(nccl_summary=True, result_format=fmt)
    checks = ["InstanceStress", "InstanceConnectivity"]
    start(env, [{"InstanceGroupName": "workers", "DeepHealthChecks": checks}])
    env.fake.advance(30 + 3600 + 600)
    ts = _iso(env.fake.clock.now())
    streams = log_streams(env)
    own = {f"DeepHealthCheckResults/{iid(env, n)}" for n in workers_of(env)}
    (anonymous,) = set(streams) - own  # one opaque stream for the configuration, naming no node
    assert all(iid(env, n) not in anonymous for n in workers_of(env))
    summary = nccl(3)  # says successful although a node failed: the fault is GPU-only
    assert [e["message"] for e in streams[anonymous]] == [json_line("info", ts, summary) if fmt == "json"
                                                          else plain(ts, summary)]  # fmt: skip
    if fmt == "json":  # the node's line no longer vouches for connectivity
        assert messages(env, good) == [json_line("info", ts, "InstanceStress passed")]
    else:
        assert messages(env, good) == stress_lines(ts)  # no per-node NCCL line
    assert messages(env, bad)[-1] == json_line("error", ts, FAULT)


@pytest.mark.parametrize("lag", [0.0, 120.0])
def test_ingestion_time_is_the_virtual_time_of_the_append(env: Env, lag: float) -> None:
    workers(env.fake)
    env.fake.readings = Readings(log_lag_s=(lag, lag), result_lines="per-test")
    start(env)
    env.fake.advance(30 + 3600 + lag)
    group = f"/aws/sagemaker/Clusters/hp/{env.fake.cluster('hp').cluster_id}"
    events = env.logs.filter_log_events(logGroupName=group)["events"]
    assert len(events) == 9 and {e["ingestionTime"] - e["timestamp"] for e in events} == {round(lag * 1000)}


@pytest.mark.parametrize("fmt", ["doc-2024", "doc-2026-lines", "doc-2026-records"])
def test_the_doc_formats_write_the_pages_lines_untrimmed(env: Env, fmt: str) -> None:
    """A healthy node's InstanceStress output is the page's lines exactly, but for the times (the node's) and one EFA
    line per further device (the first is the page's rdmap0s29): nothing trimmed, nothing tidied."""
    from tests.corpus import aws_doc
    from tests.fakes.checks import LEADING_TIME

    good, _, _ = workers(env.fake)
    env.fake.readings = Readings(result_format=fmt)
    start(env)
    env.fake.advance(30 + 3600)
    doc = (aws_doc.HARDWARE_2024, aws_doc.DCGM_2024, aws_doc.EFA_2024) if fmt == "doc-2024" else (
        aws_doc.HARDWARE_2026, aws_doc.DCGM_2026, aws_doc.EFA_2026)  # fmt: skip
    page = [line for lines in doc for line in lines]
    written = [line for message in messages(env, good) for line in message.split("\n")]
    untimed = [LEADING_TIME.sub("<time>", line) for line in written]
    assert untimed[: len(page)] == [LEADING_TIME.sub("<time>", line) for line in page]
    efa = [line for line in written[len(page) :] if LEADING_TIME.match(line)]
    assert efa and all(
        "rdmap0s29" not in line and "EFA Loopback check passed for device: rdmap0s" in line for line in efa
    )
    events = messages(env, good)
    assert len(events) == (len(aws_doc.records(doc[0])) + 2 + len(efa) if fmt == "doc-2026-records" else len(written))
