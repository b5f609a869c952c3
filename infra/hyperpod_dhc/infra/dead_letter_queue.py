"""Encrypted, TLS-only SQS dead-letter queues: where undeliverable events and failed async invocations land.

Every queue is encrypted with one customer-managed KMS key of the controller, ``DeadLetterKey`` (rotation on),
created with the first queue. A customer-managed key, not SSE-SQS or ``alias/aws/sqs``: EventBridge can
only deliver to a KMS-encrypted queue whose key policy lets ``events.amazonaws.com`` use the key, and the
key policy is where that use is limited (to EventBridge rules of this account and region).
Who may use the key, and for what:
- EventBridge (rule targets' DLQ): ``kms:GenerateDataKey`` + ``kms:Decrypt``, key policy, conditioned on
  ``aws:SourceAccount`` and ``aws:SourceArn`` (rules of this account and region);
- the Lambda functions whose on-failure DLQ it is (Lambda sends with the function's role): the same two
  actions, identity policy (``grant_send``), on this key only. (``Queue.grant_send_messages`` would grant
  ``kms:Encrypt``/``kms:ReEncrypt*``/``kms:GenerateDataKey*`` too; SQS needs only these two.)
Operators who read or redrive the queues get ``kms:Decrypt`` through IAM (the key policy delegates to IAM).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from hyperpod_dhc.infra.acknowledgements import acknowledge

KEY_ID = "DeadLetterKey"
SEND_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")  # what SQS needs from a sender of an encrypted message


def dead_letter_key(scope: Construct) -> kms.Key:
    """The controller's one key for its dead-letter queues (created on first use), a child of the nearest scope that
    holds it (``holds_dead_letter_key``: the ``HyperPodDhc``), else of the stack (a queue built on its own)."""
    stack = Stack.of(scope)
    holders = [s for s in scope.node.scopes if isinstance(s, Construct) and getattr(s, "holds_dead_letter_key", False)]
    holder = holders[-1] if holders else stack
    existing = holder.node.try_find_child(KEY_ID)
    if isinstance(existing, kms.Key):
        return existing
    return kms.Key(
        holder,
        KEY_ID,
        description=f"hyperpod-dhc: encrypts the dead-letter queues of {stack.stack_name}",
        enable_key_rotation=True,
        # The queues (and their messages) go with the stack; nothing encrypted with the key outlives them.
        removal_policy=RemovalPolicy.DESTROY,
        pending_window=Duration.days(7),
    )


class DeadLetterQueue(sqs.Queue):
    def __init__(self, scope: Construct, id: str, *, holds: str, target_of_eventbridge: bool = False) -> None:
        """``holds`` says what lands here (it goes into the queue's nag acknowledgement, if any).

        cdk-nag recognises a queue as a DLQ when an SQS redrive policy or a Lambda DeadLetterConfig
        points at it, not when an EventBridge target does: ``target_of_eventbridge`` acknowledges SQS3.
        """
        self.key = dead_letter_key(scope)
        super().__init__(
            scope,
            id,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        if target_of_eventbridge:
            _allow_eventbridge_rules(self.key)
            acknowledge(
                self,
                "AwsSolutions-SQS3",
                f"This queue is the dead-letter queue of EventBridge rule targets ({holds}); cdk-nag only "
                "recognises SQS redrive and Lambda DLQs. A DLQ of a DLQ would move the same messages one "
                "hop further; they are kept 14 days for inspection and redrive.",
            )

    def grant_send(self, grantee: iam.IGrantable) -> None:
        """The key use of a sender (Lambda's on-failure destination sends with the function's role)."""
        self.key.grant(grantee, *SEND_KEY_ACTIONS)


_EVENTBRIDGE_SID = "AllowEventBridgeRulesOfThisAccountToSendDeadLetters"


def _allow_eventbridge_rules(key: kms.Key) -> None:
    if getattr(key, "_hpdhc_eventbridge_allowed", False):
        return
    stack = Stack.of(key)
    # Rule ARNs cannot be named here: each rule refers to the queue, the queue to this key (a cycle).
    rules = stack.format_arn(
        service="events", resource="rule", resource_name="*", arn_format=ArnFormat.SLASH_RESOURCE_NAME
    )
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid=_EVENTBRIDGE_SID,
            principals=[iam.ServicePrincipal("events.amazonaws.com")],
            actions=list(SEND_KEY_ACTIONS),
            resources=["*"],  # in a key policy "*" is this key
            conditions={"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": rules}},
        )
    )
    key._hpdhc_eventbridge_allowed = True  # type: ignore[attr-defined]
