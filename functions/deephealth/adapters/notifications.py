"""Structured SNS notifications, with message attributes so a subscriber can filter by cluster, group and
kind (an SNS filter policy on `kind`, `cluster`, `group`)."""

from __future__ import annotations

import json
from typing import Any

from deephealth.adapters import aws

KINDS = ("node-failed", "node-recovered", "node-quarantined", "round-finished", "breaker-tripped")


class Notifier:
    def __init__(self, topic_arn: str | None, sns: Any | None = None) -> None:
        self._topic = topic_arn
        self._sns = sns

    def publish(self, kind: str, cluster: str, group: str, subject: str, detail: dict[str, Any]) -> None:
        if not self._topic:
            return  # notifications not configured (tests without a topic)
        assert kind in KINDS, kind
        attributes = {
            name: {"DataType": "String", "StringValue": value}
            for name, value in (("kind", kind), ("cluster", cluster), ("group", group or "-"))
        }
        message = {"kind": kind, "cluster": cluster, "group": group, **detail}
        (self._sns or aws.client("sns")).publish(
            TopicArn=self._topic,
            Subject=subject[:100],
            Message=json.dumps(message, default=str),
            MessageAttributes=attributes,
        )
