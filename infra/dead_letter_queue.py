"""An encrypted, TLS-only SQS dead-letter queue: where undeliverable events and failed async invocations land."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.acknowledgements import acknowledge


class DeadLetterQueue(sqs.Queue):
    def __init__(self, scope: Construct, id: str, *, holds: str, target_of_eventbridge: bool = False) -> None:
        """``holds`` says what lands here (it goes into the queue's nag acknowledgement, if any).

        cdk-nag recognises a queue as a DLQ when an SQS redrive policy or a Lambda DeadLetterConfig
        points at it, not when an EventBridge target does: ``target_of_eventbridge`` acknowledges SQS3.
        """
        super().__init__(
            scope,
            id,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        if target_of_eventbridge:
            acknowledge(
                self,
                "AwsSolutions-SQS3",
                f"This queue is the dead-letter queue of EventBridge rule targets ({holds}); cdk-nag only "
                "recognises SQS redrive and Lambda DLQs. A DLQ of a DLQ would move the same messages one "
                "hop further; they are kept 14 days for inspection and redrive.",
            )
