"""The notifications topic: what the controller announces (quarantines, rounds) and where alarms go.

The topic is encrypted with its own customer-managed KMS key (rotation on): the AWS managed
``alias/aws/sns`` key cannot be used by CloudWatch alarms, whose notifications would then be dropped.
The topic has a fixed name, ``<stack name>-notifications``, so the key policy can name the topic ARN
without a reference to the topic (the topic already refers to the key).

Publishers get ``sns:Publish`` on the topic and ``kms:GenerateDataKey`` + ``kms:Decrypt`` on the key:
the exact calls SNS makes for an encrypted publish. (``Topic.grant_publish`` would grant
``kms:GenerateDataKey*``, a wildcard action this stack does not use anywhere.)

An email subscription is added when the ``hyperpod-dhc:notification-email`` context key is set.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

ENV_TOPIC_ARN = "NOTIFICATIONS_TOPIC_ARN"
PUBLISH_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
# What the AWS documentation gives service principals that publish to an encrypted topic.
SERVICE_KEY_ACTIONS = ("kms:GenerateDataKey*", "kms:Decrypt")


def alarm_name(scope: Construct, what: str) -> str:
    """``<stack name>-<what>``: the topic policy lets CloudWatch publish for alarms named so, and only them."""
    return f"{Stack.of(scope).stack_name}-{what}"


class Notifications(Construct):
    def __init__(self, scope: Construct, id: str, *, email: str | None = None) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.topic_name = f"{stack.stack_name}-notifications"
        topic_arn = stack.format_arn(service="sns", resource=self.topic_name)
        self.alarm_arns = stack.format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=alarm_name(self, "*"),
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

        self.key = kms.Key(
            self,
            "Key",
            description=f"hyperpod-dhc: encrypts the {self.topic_name} SNS topic",
            enable_key_rotation=True,
            # SNS keeps messages only until they are delivered: nothing encrypted outlives the topic.
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        encryption_context = {"kms:EncryptionContext:aws:sns:topicArn": topic_arn}
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublishToTheTopic",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=list(SERVICE_KEY_ACTIONS),
                resources=["*"],  # in a key policy "*" is this key
                conditions={"StringEquals": {"aws:SourceAccount": stack.account, **encryption_context}},
            )
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowSnsToUseTheKeyForTheTopic",
                principals=[iam.ServicePrincipal("sns.amazonaws.com")],
                actions=list(SERVICE_KEY_ACTIONS),
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account, **encryption_context}},
            )
        )

        self.topic = sns.Topic(
            self,
            "Topic",
            topic_name=self.topic_name,
            display_name="hyperpod-dhc",
            master_key=self.key,
            enforce_ssl=True,
        )
        # The topic policy (created for enforce_ssl) replaces SNS's default policy, which let every
        # principal of the account publish; CloudWatch alarms are a service principal and need this.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": self.alarm_arns},
                },
            )
        )
        if email is not None:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))

    def add_publisher(self, function: lambda_.Function) -> None:
        """``NOTIFICATIONS_TOPIC_ARN`` in the function's environment, and the right to publish."""
        function.add_environment(ENV_TOPIC_ARN, self.topic.topic_arn)
        iam.Grant.add_to_principal(grantee=function, actions=["sns:Publish"], resource_arns=[self.topic.topic_arn])
        self.key.grant(function, *PUBLISH_KEY_ACTIONS)
