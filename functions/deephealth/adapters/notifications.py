"""Structured SNS notifications, with message attributes so a subscriber can filter by cluster, group and
kind (an SNS filter policy on `kind`, `cluster`, `group`, and `route` when the group's policy sets one)."""

from __future__ import annotations

import json
from typing import Any

from deephealth.adapters import aws
from deephealth.domain.policy import NOTIFICATION_KINDS as KINDS


class Notifier:
    def __init__(self, topic_arn: str | None, sns: Any | None = None) -> None:
        self._topic = topic_arn
        self._sns = sns

    @aws.translated
    def publish(
        self, kind: str, cluster: str, group: str, subject: str, detail: dict[str, Any], route: str | None = None
    ) -> None:
        if not self._topic:
            return  # notifications not configured (tests without a topic)
        assert kind in KINDS, kind
        attributes = {
            name: {"DataType": "String", "StringValue": value}
            for name, value in (("kind", kind), ("cluster", cluster), ("group", group or "-"), ("route", route))
            if value
        }
        message = {"kind": kind, "cluster": cluster, "group": group, **detail}
        (self._sns or aws.client("sns")).publish(
            TopicArn=self._topic,
            Subject=subject[:100],
            Message=json.dumps(message, default=str),
            MessageAttributes=attributes,
        )
