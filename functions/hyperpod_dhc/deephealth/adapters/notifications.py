"""SNS notifications that read well where they land, with message attributes so a subscriber can filter by
cluster, group and kind (an SNS filter policy on `kind`, `cluster`, `group`, and `route` when the group's policy
sets one).

One publish carries a message per protocol (`MessageStructure=json`, `hyperpod_dhc.deephealth.domain.messages`): plain
text for email, an AWS Chatbot custom notification for HTTPS subscribers (Chatbot's Slack and Teams channels, webhooks),
and the machine-readable JSON for every other protocol (SQS, Lambda, HTTP, Firehose, email-json)."""

from __future__ import annotations

import json
from typing import Any

from hyperpod_dhc.deephealth.adapters import aws
from hyperpod_dhc.deephealth.domain.messages import render
from hyperpod_dhc.deephealth.domain.policy import NOTIFICATION_KINDS as KINDS
from hyperpod_dhc.deephealth.domain.runbooks import notification_runbook
from hyperpod_dhc.deephealth.observability import logger


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
        sns = self._sns or aws.client("sns")
        try:
            rendered = render(kind, cluster, group, subject, detail)
        except Exception:  # a message that cannot be worded must not fail the round that decided it
            logger.exception("notification rendering failed; publishing the machine JSON alone", extra={"kind": kind})
            machine = json.dumps(
                {"kind": kind, "cluster": cluster, "group": group, "runbook": notification_runbook(kind), **detail},
                default=str,
            )
            sns.publish(TopicArn=self._topic, Subject=subject[:100], Message=machine, MessageAttributes=attributes)
            return
        sns.publish(
            TopicArn=self._topic,
            Subject=rendered.subject,
            Message=rendered.message,
            MessageStructure="json",
            MessageAttributes=attributes,
        )
