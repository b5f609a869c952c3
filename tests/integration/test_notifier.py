"""adapters.notifications against moto's SNS: one publish per notification, a message per protocol
(MessageStructure=json), the filter attributes unchanged, and what each kind of subscriber receives."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from hyperpod_dhc.deephealth.adapters.notifications import Notifier
from hyperpod_dhc.deephealth.domain.runbooks import notification_runbook

REGION = "us-east-1"
DETAIL = {"node": "lid-1", "instance_id": "i-0abc", "hostname": "ip-10-1-2-3", "evidence": ["result log: XID 79"]}


@pytest.fixture
def topic() -> Iterator[tuple[str, object, dict[str, str]]]:
    with mock_aws():
        sns, sqs = boto3.client("sns", region_name=REGION), boto3.client("sqs", region_name=REGION)
        arn = sns.create_topic(Name="hyperpod-dhc-notifications")["TopicArn"]
        queues = {}
        for name, raw in (("envelope", "false"), ("raw", "true")):
            url = sqs.create_queue(QueueName=name)["QueueUrl"]
            queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            sub = sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn)["SubscriptionArn"]
            sns.set_subscription_attributes(SubscriptionArn=sub, AttributeName="RawMessageDelivery", AttributeValue=raw)
            queues[name] = url
        yield arn, sqs, queues


def received(sqs: object, url: str) -> list[str]:
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)  # type: ignore[attr-defined]
    return [m["Body"] for m in messages.get("Messages", [])]


def test_a_queue_subscriber_gets_the_machine_readable_json_and_the_filter_attributes(topic):
    arn, sqs, queues = topic
    Notifier(arn).publish("node-failed", "ml-cluster", "gpu", "hyperpod-dhc: lid-1 failed", DETAIL, route="oncall")
    (body,) = received(sqs, queues["envelope"])
    envelope = json.loads(body)
    runbook = notification_runbook("node-failed")
    assert json.loads(envelope["Message"]) == {
        "kind": "node-failed", "cluster": "ml-cluster", "group": "gpu", "runbook": runbook, **DETAIL
    }  # fmt: skip
    assert envelope["Subject"] == "hyperpod-dhc: lid-1 failed"
    attributes = {k: v["Value"] for k, v in envelope["MessageAttributes"].items()}
    assert attributes == {"kind": "node-failed", "cluster": "ml-cluster", "group": "gpu", "route": "oncall"}
    (raw,) = received(sqs, queues["raw"])
    assert json.loads(raw)["node"] == "lid-1"  # raw delivery: the same JSON, without the envelope


def test_a_cluster_wide_notice_keeps_its_group_attribute_placeholder(topic):
    arn, sqs, queues = topic
    Notifier(arn).publish("breaker-tripped", "ml-cluster", "", "hyperpod-dhc: breaker open", {"reason": "r"})
    envelope = json.loads(received(sqs, queues["envelope"])[0])
    assert envelope["MessageAttributes"]["group"]["Value"] == "-"
    assert json.loads(envelope["Message"])["reason"] == "r"


def test_a_huge_notice_is_still_published(topic):
    arn, sqs, queues = topic
    nodes = [f"lid-{i:06d}" for i in range(40_000)]
    Notifier(arn).publish("dry-run", "c", "g", "hyperpod-dhc: dry-run would check 40000 node(s)", {"nodes": nodes})
    machine = json.loads(json.loads(received(sqs, queues["envelope"])[0])["Message"])
    assert machine["truncated"] == {"nodes": 40_000}


def test_a_message_that_cannot_be_worded_is_still_published_as_the_machine_json(topic, monkeypatch):
    """Rendering is for people; a bug in it must not fail the round that decided (or lose the notice)."""

    def broken(*_: object) -> None:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr("hyperpod_dhc.deephealth.adapters.notifications.render", broken)
    arn, sqs, queues = topic
    Notifier(arn).publish("node-failed", "ml-cluster", "gpu", "hyperpod-dhc: lid-1 failed", DETAIL)
    envelope = json.loads(received(sqs, queues["envelope"])[0])
    runbook = notification_runbook("node-failed")
    assert json.loads(envelope["Message"]) == {
        "kind": "node-failed", "cluster": "ml-cluster", "group": "gpu", "runbook": runbook, **DETAIL
    }  # fmt: skip
