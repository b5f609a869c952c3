"""The HyperPod adapter's reading of cluster operations and instance events (botocore Stubber, no fake):
a refused check is busy when its words say so, or while a DeepHealthCheck operation is in progress."""

import datetime as dt

import boto3
import pytest
from botocore.stub import ANY, Stubber

from hyperpod_dhc.deephealth.adapters.hyperpod import HyperPod
from hyperpod_dhc.deephealth.domain.errors import CheckRefused, ClusterBusy, ClusterNotFound, Throttled, TransientError

CONFIGS = [
    {"InstanceGroupName": "workers", "InstanceIds": ["i-0123456789abcdef0"], "DeepHealthChecks": ["InstanceStress"]}
]
IN_PROGRESS = {
    "OperationId": "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
    "ClusterArn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcdef123456",
    "Type": "DeepHealthCheck",
    "Status": "InProgress",
    "CreationTime": dt.datetime(2026, 12, 3, tzinfo=dt.UTC),
}
OPERATIONS_QUERY = {"ClusterName": "hp", "Type": "DeepHealthCheck", "Status": "InProgress", "MaxResults": ANY}


@pytest.fixture
def stubbed():
    sm = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(sm) as stub:
        yield HyperPod(sm), stub
        stub.assert_no_pending_responses()


def _operations(stub, *summaries):
    stub.add_response("list_cluster_operations", {"ClusterOperationSummaries": list(summaries)}, OPERATIONS_QUERY)


def test_check_in_progress_asks_for_deep_health_check_operations_in_progress(stubbed):
    hp, stub = stubbed
    _operations(stub, IN_PROGRESS)
    assert hp.check_in_progress("hp") is True
    _operations(stub)
    assert hp.check_in_progress("hp") is False


def test_check_in_progress_follows_an_empty_filtered_page_with_a_token(stubbed):
    hp, stub = stubbed
    stub.add_response("list_cluster_operations", {"ClusterOperationSummaries": [], "NextToken": "t1"}, OPERATIONS_QUERY)
    stub.add_response(
        "list_cluster_operations", {"ClusterOperationSummaries": [IN_PROGRESS]}, {**OPERATIONS_QUERY, "NextToken": "t1"}
    )
    assert hp.check_in_progress("hp") is True


def test_check_in_progress_ignores_an_operation_that_is_not_in_progress(stubbed):
    hp, stub = stubbed
    _operations(stub, {**IN_PROGRESS, "Status": "Done"}, {**IN_PROGRESS, "Status": "Superseded"})
    assert hp.check_in_progress("hp") is False


@pytest.mark.parametrize(
    ("code", "status", "raised"),
    [
        ("ResourceNotFound", 400, ClusterNotFound),
        ("ThrottlingException", 400, Throttled),
        ("InternalFailure", 500, TransientError),
    ],
)
def test_check_in_progress_errors_are_mapped(stubbed, code, status, raised):
    hp, stub = stubbed
    # botocore's own retries (the adapter's client has them) are not part of a Stubber run
    stub.add_client_error("list_cluster_operations", code, "no", http_status_code=status)
    with pytest.raises(raised):
        hp.check_in_progress("hp")


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("ConflictException", "There is an existing DeepHealthCheck operation"),
        ("ValidationException", "A deep health check is already in progress for cluster hp."),
        ("ValidationException", "Only one on-demand deep health check request can be active per cluster."),
        ("ResourceInUse", "Something no one wrote down"),
    ],
)
def test_a_refusal_that_says_busy_is_busy_whatever_a_second_look_would_find(stubbed, code, message):
    """The operation it met may have ended before a ListClusterOperations call could see it: no call is made."""
    hp, stub = stubbed
    stub.add_client_error("start_cluster_health_check", code, message)
    with pytest.raises(ClusterBusy):
        hp.start_health_check("hp", CONFIGS)


def test_a_refusal_in_other_words_is_busy_while_an_operation_is_in_progress(stubbed):
    hp, stub = stubbed
    stub.add_client_error("start_cluster_health_check", "ValidationException", "Something no one wrote down")
    _operations(stub, IN_PROGRESS)
    with pytest.raises(ClusterBusy):
        hp.start_health_check("hp", CONFIGS)


def test_a_refusal_in_other_words_with_no_operation_in_progress_is_a_refusal_of_the_request(stubbed):
    hp, stub = stubbed
    message = "Deep health checks are not supported for instance type ml.g5.8xlarge"
    stub.add_client_error("start_cluster_health_check", "ValidationException", message)
    _operations(stub)
    with pytest.raises(CheckRefused) as refused:
        hp.start_health_check("hp", CONFIGS)
    assert refused.value.code == "ValidationException" and refused.value.message == message


def test_the_active_check_is_the_oldest_operation_in_progress_with_its_start(stubbed):
    hp, stub = stubbed
    _operations(stub, IN_PROGRESS)
    active = hp.active_check("hp")
    assert active is not None and active.operation_id == IN_PROGRESS["OperationId"]
    assert active.created_at == IN_PROGRESS["CreationTime"].timestamp()


def test_throttled_to_the_end_while_an_operation_is_in_progress_is_busy(stubbed, monkeypatch):
    monkeypatch.setattr("hyperpod_dhc.deephealth.adapters.hyperpod.time.sleep", lambda s: None)
    hp, stub = stubbed
    for _ in range(3):
        stub.add_client_error("start_cluster_health_check", "ThrottlingException", "Rate exceeded")
    _operations(stub, IN_PROGRESS)
    with pytest.raises(ClusterBusy):
        hp.start_health_check("hp", CONFIGS)
    for _ in range(3):
        stub.add_client_error("start_cluster_health_check", "ThrottlingException", "Rate exceeded")
    _operations(stub)
    with pytest.raises(Throttled):
        hp.start_health_check("hp", CONFIGS)


def test_a_5xx_or_a_deleted_cluster_is_never_read_as_a_refusal(stubbed):
    hp, stub = stubbed
    stub.add_client_error("start_cluster_health_check", "InternalFailure", "oops", http_status_code=500)
    with pytest.raises(TransientError):
        hp.start_health_check("hp", CONFIGS)
    stub.add_client_error("start_cluster_health_check", "ResourceNotFound", "Cluster hp not found.")
    with pytest.raises(ClusterNotFound):
        hp.start_health_check("hp", CONFIGS)


def test_instance_events_since_pages_through_the_instances_events(stubbed):
    hp, stub = stubbed
    since = dt.datetime(2026, 12, 3, 10, tzinfo=dt.UTC)
    query = {
        "ClusterName": "hp",
        "NodeId": "i-0123456789abcdef0",
        "ResourceType": "Instance",
        "EventTimeAfter": since,
        "SortOrder": "Ascending",
        "MaxResults": 100,
    }

    def event(n, description):
        return {
            "EventId": f"e{n}",
            "ClusterArn": IN_PROGRESS["ClusterArn"],
            "ClusterName": "hp",
            "InstanceId": "i-0123456789abcdef0",
            "ResourceType": "Instance",
            "EventTime": since + dt.timedelta(minutes=n),
            "Description": description,
        }

    stub.add_response("list_cluster_events", {"Events": [event(1, "reboot in progress")], "NextToken": "p2"}, query)
    stub.add_response("list_cluster_events", {"Events": [event(2, "")]}, {**query, "NextToken": "p2"})
    assert hp.instance_events_since("hp", "i-0123456789abcdef0", since.timestamp()) == ["reboot in progress", ""]
    stub.add_client_error("list_cluster_events", "ResourceNotFound", "Cluster hp not found.")
    with pytest.raises(ClusterNotFound):
        hp.instance_events_since("hp", "i-0123456789abcdef0", since.timestamp())


DESCRIBED = {
    "ClusterArn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/abcdef123456",
    "ClusterName": "hp",
    "ClusterStatus": "InService",
    "InstanceGroups": [],
}


@pytest.mark.parametrize(
    ("orchestrator", "slurm"),
    [
        (None, True),  # clusters made before the block existed are Slurm clusters
        ({"Slurm": {}}, True),
        ({"Eks": {"ClusterArn": "arn:aws:eks:us-east-1:111122223333:cluster/k"}}, False),
        ({"Slurm": {}, "Eks": {"ClusterArn": "arn:aws:eks:us-east-1:111122223333:cluster/k"}}, False),
    ],
)
def test_only_a_cluster_with_no_orchestrator_block_or_slurm_alone_is_a_slurm_cluster(stubbed, orchestrator, slurm):
    hyperpod, stub = stubbed
    stub.add_response("describe_cluster", {**DESCRIBED, **({"Orchestrator": orchestrator} if orchestrator else {})})
    info = hyperpod.describe_cluster("hp")
    assert info.slurm is slurm
    assert type(info).from_json(info.to_json()) == info, "the table's cached copy says the same"


def test_an_orchestrator_this_code_does_not_know_is_not_slurm():
    from hyperpod_dhc.deephealth.adapters.hyperpod import ClusterInfo

    info = ClusterInfo("hp", "abcdef123456", DESCRIBED["ClusterArn"], "InService", "None", orchestrators=("Ray",))
    assert not info.slurm  # an allow-list: botocore does not validate enums in responses
    cached = info.to_json()
    del cached["orchestrators"]  # an item cached before the field existed
    assert ClusterInfo.from_json(cached).slurm
