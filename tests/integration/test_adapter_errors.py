"""Every adapter turns throttling and 5xx (left over after botocore's retries) into the names the round
workflow's ASL Retry matches, and reboots/replacements are never sent twice (issue 11, defects 2 and 6)."""

from __future__ import annotations

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError
from botocore.stub import Stubber

from hyperpod_dhc.deephealth.adapters import aws
from hyperpod_dhc.deephealth.adapters.hyperpod import HyperPod
from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
from hyperpod_dhc.deephealth.adapters.notifications import Notifier
from hyperpod_dhc.deephealth.adapters.round_starter import RoundStarter
from hyperpod_dhc.deephealth.domain.errors import Throttled, TransientError
from hyperpod_dhc.deephealth.domain.nodes import Action

REGION = "us-east-1"


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op")


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (client_error("ProvisionedThroughputExceededException", 400), Throttled),  # DynamoDB
        (client_error("ThrottlingException", 400), Throttled),  # Step Functions, Logs, SSM, SageMaker
        (client_error("Throttling", 400), Throttled),  # SNS (query protocol)
        (client_error("InternalServerError", 500), TransientError),
        (client_error("ServiceUnavailable", 503), TransientError),
        (EndpointConnectionError(endpoint_url="https://x"), TransientError),
        (client_error("ConditionalCheckFailedException", 400), None),
        (client_error("AccessDeniedException", 400), None),  # a missing grant is not retried away
        (ParamValidationError(report="bad"), None),
    ],
)
def test_transient_errors_are_named_for_the_workflow_retry(err, expected):
    mapped = aws.transient(err)
    assert (type(mapped) if mapped else None) is expected


def stubbed(service: str) -> tuple[object, Stubber]:
    # One attempt per call: what is left after botocore's own retries is what the adapters see.
    config = Config(retries={"mode": "standard", "total_max_attempts": 1})
    client = boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x", config=config)
    return client, Stubber(client)


def test_dynamodb_throttling_reaches_the_workflow_as_throttled():
    client, stub = stubbed("dynamodb")

    class Table:
        meta = type("meta", (), {"client": client})

        def get_item(self, **kw):
            return client.get_item(TableName="t", Key={"pk": {"S": "x"}, "sk": {"S": "y"}})

    stub.add_client_error("get_item", "ProvisionedThroughputExceededException", http_status_code=400)
    with stub, pytest.raises(Throttled):
        NodeTable("t", table=Table()).round_meta("c")


def test_sns_and_step_functions_5xx_reach_the_workflow_as_transient():
    sns, sns_stub = stubbed("sns")
    sns_stub.add_client_error("publish", "InternalError", http_status_code=500)
    with sns_stub, pytest.raises(TransientError):
        Notifier("arn:aws:sns:us-east-1:123456789012:t", sns=sns).publish("node-failed", "c", "g", "s", {})
    sfn, sfn_stub = stubbed("stepfunctions")
    sfn_stub.add_client_error("start_execution", "ThrottlingException", http_status_code=400)

    class Meta:
        def round_meta(self, cluster):
            from hyperpod_dhc.deephealth.adapters.round_item import RoundMeta

            return RoundMeta()

    starter = RoundStarter(Meta(), "arn:aws:states:us-east-1:123456789012:stateMachine:m", sfn=sfn)
    with sfn_stub, pytest.raises(Throttled):
        starter.ensure_round("c")


def test_a_replacement_answered_5xx_is_sent_once_and_comes_back_unconfirmed():
    sm, stub = stubbed("sagemaker")
    stub.add_client_error("batch_replace_cluster_nodes", "InternalFailure", http_status_code=500)
    with stub:
        (outcome,) = HyperPod(sm).act("c", Action.REPLACE, ["lid-1"], [])
        stub.assert_no_pending_responses()
    assert outcome.unconfirmed and not outcome.ok and outcome.key == "lid-1"


def test_a_throttled_reboot_was_not_carried_out_so_it_is_sent_again_then_refused():
    sm, stub = stubbed("sagemaker")
    for _ in range(3):
        stub.add_client_error("batch_reboot_cluster_nodes", "ThrottlingException", http_status_code=400)
    with stub:
        (outcome,) = HyperPod(sm).act("c", Action.REBOOT, ["lid-1"], [])
        stub.assert_no_pending_responses()
    assert (outcome.ok, outcome.unconfirmed, outcome.code) == (False, False, "Throttled")


def test_the_action_client_never_retries(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    aws.reset()
    assert aws.client_without_retries("sagemaker").meta.config.retries["total_max_attempts"] == 1
    assert aws.client("sagemaker").meta.config.retries["total_max_attempts"] == 4  # 3 retries
    aws.reset()
