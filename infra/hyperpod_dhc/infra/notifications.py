"""The notifications topic: what the controller announces (quarantines, rounds) and where alarms go.

The topic is encrypted with its own customer-managed KMS key (rotation on): the AWS managed
``alias/aws/sns`` key cannot be used by CloudWatch alarms, whose notifications would then be dropped.
The topic has a fixed name, ``<stack name>-notifications``, so the key policy can name the topic ARN
without a reference to the topic (the topic already refers to the key).

Publishers get ``sns:Publish`` on the topic and ``kms:GenerateDataKey`` + ``kms:Decrypt`` on the key:
the exact calls SNS makes for an encrypted publish. (``Topic.grant_publish`` would grant
``kms:GenerateDataKey*``, a wildcard action this stack does not use anywhere.)

An email subscription is added when the ``hyperpod-dhc:notification-email`` context key is set.

Chat and webhooks (each optional, from the deploy config):

- Slack and Microsoft Teams through AWS Chatbot (Amazon Q Developer in chat applications): one channel
  configuration each, subscribed to the topic. The workspace (Slack) or team (Teams) must have been authorized
  once in the Chatbot console; CloudFormation cannot do that step. Chatbot posts what the controller publishes for
  HTTPS subscribers (a custom notification, ``hyperpod_dhc.deephealth.domain.messages``) and this stack's CloudWatch
  alarms. Its channel role has no permissions at all, and the channel's guardrail is AWS's ``AWSDenyAll``: the channel
  only receives notifications; nobody can run an AWS command from the chat through it (channel members' own user roles
  are capped by the guardrail too). The price: alarm notifications come without the metric graph Chatbot draws when its
  role may read CloudWatch (the documented notifications policy is ``cloudwatch:Describe*``, ``Get*`` and ``List*`` on
  every resource, which this stack grants nobody). The topic's customer-managed key needs no grant for Chatbot: SNS
  decrypts a message before it delivers it to a subscriber, over HTTPS to Chatbot's endpoint; only publishers use the
  key. - HTTPS webhooks: one SNS ``https`` subscription per URL. The endpoint must answer SNS's subscription
  confirmation (visit the ``SubscribeURL`` of the first POST) before anything is delivered, so a Slack or Teams
  *incoming* webhook can never be subscribed: those hosts (``CHAT_WEBHOOK_HOSTS``) are refused, pointing to the Chatbot
  channel. It receives the SNS envelope whose ``Message`` is the Chatbot custom-notification JSON (the machine-readable
  detail in ``metadata.additionalContext``), with the message attributes for filtering. A subscription's logical id is
  its position (``Webhook1``), never derived from its URL, and errors name a URL by position and host: a token in a
  URL's path or query is not in ids, deploy progress, stack events or messages. The URL itself is still the
  subscription's ``Endpoint`` property, in the template, the synthesized ``cdk.out`` and the subscription's attributes
  (docs/SECURITY.md, "Webhook URLs", says who can read them). Credentials in the URL's user-info part
  (``https://user:pass@host``) are refused for that reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_chatbot as chatbot
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from hyperpod_dhc.deephealth.domain.policy import ConfigError

ENV_TOPIC_ARN = "NOTIFICATIONS_TOPIC_ARN"
PUBLISH_KEY_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
# What the AWS documentation gives service principals that publish to an encrypted topic.
SERVICE_KEY_ACTIONS = ("kms:GenerateDataKey*", "kms:Decrypt")


# The guardrail of every chat channel: an AWS managed policy that denies every action (notifications only).
CHAT_GUARDRAIL = "AWSDenyAll"
CHATBOT_PRINCIPAL = "chatbot.amazonaws.com"
# AWS::Chatbot identifier patterns (CloudFormation resource schemas).
_SLACK_WORKSPACE = re.compile(r"[0-9A-Z]{1,255}")
_SLACK_CHANNEL = re.compile(r"[A-Za-z0-9]{1,255}")
_UUID = re.compile(r"[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}")
_TEAMS_CHANNEL = re.compile(r"[a-zA-Z0-9\-_=+/.,]*%3[aA][a-zA-Z0-9\-_=+/.,]*%40[a-zA-Z0-9\-_=+/.,]*")
_TEAMS_CHANNEL_SAFE = "-_=+/.,%"  # left as they are when a channel id is URL-encoded
MAX_WEBHOOKS = 20


@dataclass(frozen=True)
class SlackChannel:
    """A Slack channel of a workspace authorized in the AWS Chatbot console.

    ``workspace_id``: the workspace (team) id, ``T…`` (Chatbot console, or the workspace's URL);
    ``channel_id``: the channel's id, ``C…`` (channel details in Slack), not its name."""

    workspace_id: str
    channel_id: str

    def __post_init__(self) -> None:
        if not isinstance(self.workspace_id, str) or not _SLACK_WORKSPACE.fullmatch(self.workspace_id):
            raise ConfigError(
                f"slack.workspace_id must be a Slack workspace id (T…, upper case), got {self.workspace_id!r}"
            )
        if not isinstance(self.channel_id, str) or not _SLACK_CHANNEL.fullmatch(self.channel_id):
            raise ConfigError(
                f"slack.channel_id must be a Slack channel id (C…, not its name), got {self.channel_id!r}"
            )


@dataclass(frozen=True)
class TeamsChannel:
    """A Microsoft Teams channel of a team authorized in the AWS Chatbot console.

    ``team_id`` and ``tenant_id``: GUIDs; ``channel_id``: the channel id as in the channel's link, either
    URL-encoded (``19%3a…%40thread.tacv2``) or not (``19:…@thread.tacv2``, encoded here)."""

    team_id: str
    channel_id: str
    tenant_id: str

    def __post_init__(self) -> None:
        for field, value in (("team_id", self.team_id), ("tenant_id", self.tenant_id)):
            if not isinstance(value, str) or not _UUID.fullmatch(value):
                raise ConfigError(f"teams.{field} must be a GUID (8-4-4-4-12 hex digits), got {value!r}")
        channel = quote(self.channel_id, safe=_TEAMS_CHANNEL_SAFE) if isinstance(self.channel_id, str) else ""
        if not _TEAMS_CHANNEL.fullmatch(channel) or len(channel) > 255:
            raise ConfigError(
                f"teams.channel_id must be a Teams channel id (19:…@thread.tacv2), got {self.channel_id!r}"
            )
        object.__setattr__(self, "channel_id", channel)


# Chat services' incoming webhooks: SNS POSTs a SubscriptionConfirmation first and delivers nothing until someone
# visits its SubscribeURL, which these never do (nor can they show SNS's envelope); the Chatbot channel is the way in.
# A host is refused when it is one of these or under one (a trailing dot and case do not matter).
CHAT_WEBHOOK_HOSTS = {
    "hooks.slack.com": "Slack",
    "hooks.slack-gov.com": "Slack",
    "webhook.office.com": "Teams",  # <tenant>.webhook.office.com: Teams incoming webhooks (Office 365 connectors)
    "outlook.office.com": "Teams",  # outlook.office.com/webhook/...: the connectors' older address
    "outlook.office365.com": "Teams",
    "logic.azure.com": "Teams",  # prod-NN.<region>.logic.azure.com/workflows/...: Teams Workflows (Power Automate)
    "api.powerplatform.com": "Teams",  # <env>.environment.api.powerplatform.com/.../workflows/...: the same, newer
}


def chat_webhook_service(hostname: str) -> str | None:
    """ "Slack" or "Teams" when ``hostname`` serves that service's incoming webhooks, else None."""
    host = hostname.lower().rstrip(".")
    return next(
        (name for domain, name in CHAT_WEBHOOK_HOSTS.items() if host == domain or host.endswith(f".{domain}")), None
    )


def webhook_host(url: str) -> str:
    """What may be printed of a webhook URL: its host (the path and query may hold a token), or "?" if unparseable."""
    try:
        return urlsplit(url).hostname or "?"
    except ValueError:
        return "?"


def webhook_url(url: object, index: int = 0) -> str:
    """``url`` when it is a well-formed ``https://`` URL without user-info credentials and not a chat service's
    incoming webhook; ConfigError otherwise. Errors name the URL by its position (``webhooks[0]``) and host only:
    its path or query may be a secret token."""
    where = f"webhooks[{index}]"
    if not isinstance(url, str) or not url or any(c.isspace() or ord(c) < 32 for c in url):
        raise ConfigError(f"{where} is not a URL (a string without spaces)")
    try:
        parts = urlsplit(url)
        hostname, _ = parts.hostname, parts.port  # a malformed port raises here
    except ValueError as err:
        raise ConfigError(f"{where} is not a well-formed URL: {err}") from None
    if parts.scheme != "https":
        raise ConfigError(
            f"{where} (host {hostname or '?'}) must be an https:// URL (SNS would send it plain HTTP), "
            f"got {parts.scheme or 'no'} scheme"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{where}: a URL with credentials (https://user:pass@host) would be stored in the template")
    if not hostname or "." not in hostname or parts.fragment:
        raise ConfigError(f"{where} must name a host (https://host.example/path) and have no #fragment")
    service = chat_webhook_service(hostname)
    if service is not None:
        raise ConfigError(
            f"{where} (host {hostname}) is a {service} incoming webhook, which cannot confirm an SNS subscription: "
            f"use the {service.lower()} key instead (an AWS Chatbot channel: [{service.lower()}] in deploy.toml, "
            f"hyperpod-dhc:{service.lower()} in context)"
        )
    if len(url) > 2048:
        raise ConfigError(f"{where} (host {hostname}) is longer than 2048 characters")
    return url


def webhook_urls(urls: Sequence[str]) -> tuple[str, ...]:
    if isinstance(urls, str):
        raise ConfigError("webhooks must be a list of https:// URLs, got one string")
    checked = tuple(webhook_url(url, index) for index, url in enumerate(urls))
    for index, url in enumerate(checked):
        if url in checked[:index]:
            raise ConfigError(f"webhooks[{index}] (host {webhook_host(url)}): a URL is listed twice")
    if len(checked) > MAX_WEBHOOKS:
        raise ConfigError(f"webhooks: at most {MAX_WEBHOOKS} URLs, got {len(checked)}")
    return checked


def alarm_name(scope: Construct, what: str) -> str:
    """``<stack name>-<what>``: the topic policy lets CloudWatch publish for alarms named so, and only them."""
    return f"{Stack.of(scope).stack_name}-{what}"


class Notifications(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        email: str | None = None,
        slack: SlackChannel | None = None,
        teams: TeamsChannel | None = None,
        webhooks: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, id)
        urls = webhook_urls(webhooks)  # before any resource: a bad URL is a ConfigError, not half a construct
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
        for number, url in enumerate(urls, start=1):
            # Named by position, never by URL (CDK's UrlSubscription names it by the URL, putting a token in the
            # logical id that deploy progress, stack events and ListStackResources show). The price: a URL moved
            # or removed from the middle of the list re-subscribes those after it (each asks confirmation again).
            sns.Subscription(
                self, f"Webhook{number}", topic=self.topic, endpoint=url, protocol=sns.SubscriptionProtocol.HTTPS
            )
        self.chat_role: iam.Role | None = None
        self.slack: chatbot.SlackChannelConfiguration | None = None
        self.teams: chatbot.CfnMicrosoftTeamsChannelConfiguration | None = None
        if slack is not None or teams is not None:
            self._add_chat(stack, slack, teams)

    def _add_chat(self, stack: Stack, slack: SlackChannel | None, teams: TeamsChannel | None) -> None:
        """AWS Chatbot channels on the topic: a role without permissions and a deny-all guardrail."""
        self.chat_role = iam.Role(
            self,
            "ChatRole",
            assumed_by=iam.ServicePrincipal(CHATBOT_PRINCIPAL),
            description="hyperpod-dhc: AWS Chatbot channel role, no permissions (the channels only get notifications)",
        )
        guardrail = iam.ManagedPolicy.from_aws_managed_policy_name(CHAT_GUARDRAIL)
        # Configuration names are unique per account across regions: the stack name and region say whose.
        name = f"{stack.stack_name[:90]}-{stack.region}"
        if slack is not None:
            self.slack = chatbot.SlackChannelConfiguration(
                self,
                "Slack",
                slack_channel_configuration_name=f"{name}-slack",
                slack_workspace_id=slack.workspace_id,
                slack_channel_id=slack.channel_id,
                notification_topics=[self.topic],
                role=self.chat_role,
                guardrail_policies=[guardrail],
                user_role_required=False,
            )
        if teams is not None:
            self.teams = chatbot.CfnMicrosoftTeamsChannelConfiguration(
                self,
                "Teams",
                configuration_name=f"{name}-teams",
                iam_role_arn=self.chat_role.role_arn,
                team_id=teams.team_id,
                teams_channel_id=teams.channel_id,
                teams_tenant_id=teams.tenant_id,
                sns_topic_arns=[self.topic.topic_arn],
                guardrail_policies=[guardrail.managed_policy_arn],
                user_role_required=False,
            )

    def add_publisher(self, function: lambda_.Function) -> None:
        """``NOTIFICATIONS_TOPIC_ARN`` in the function's environment, and the right to publish."""
        function.add_environment(ENV_TOPIC_ARN, self.topic.topic_arn)
        iam.Grant.add_to_principal(grantee=function, actions=["sns:Publish"], resource_arns=[self.topic.topic_arn])
        self.key.grant(function, *PUBLISH_KEY_ACTIONS)
