"""hyperpod_dhc.infra.notifications on a stack of its own: Slack and Teams through AWS Chatbot and HTTPS webhooks on the
topic, each only when configured, with a role that can do nothing and a deny-all guardrail; cdk-nag and cfn-lint pass;
bad settings are one-line ConfigErrors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from hyperpod_dhc.deephealth.domain.policy import ConfigError
from hyperpod_dhc.infra.notifications import CHATBOT_PRINCIPAL, Notifications, SlackChannel, TeamsChannel
from tests.infra.test_lint import tool
from tests.infra.test_stack import resources

SLACK = SlackChannel(workspace_id="T0123ABCD", channel_id="C0456EFGH")
TEAM, TENANT = "9d7a5c2e-1b3f-4e6a-8c9d-0e1f2a3b4c5d", "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
TEAMS = TeamsChannel(team_id=TEAM, channel_id="19:abcDEF123@thread.tacv2", tenant_id=TENANT)
HOOKS = ["https://hooks.example.com/sns/ops", "https://alerts.example.org:8443/in?source=hpdhc"]
DENY_ALL = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AWSDenyAll"]]}


def tiny(outdir: Path | None = None, *, nag: bool = False, **kw: Any) -> tuple[cdk.App, cdk.Stack, Notifications]:
    app = cdk.App(outdir=str(outdir) if outdir else None)
    stack = cdk.Stack(app, "Dhc", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    notifications = Notifications(stack, "Notifications", **kw)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack, notifications


def template(**kw: Any) -> dict[str, Any]:
    _, stack, _ = tiny(**kw)
    return Template.from_stack(stack).to_json()


@pytest.fixture(scope="module")
def everything() -> dict[str, Any]:
    return template(email="ops@example.com", slack=SLACK, teams=TEAMS, webhooks=HOOKS)


def test_nothing_is_added_when_no_chat_or_webhook_is_configured():
    plain = template()
    assert not resources(plain, "AWS::Chatbot::SlackChannelConfiguration")
    assert not resources(plain, "AWS::Chatbot::MicrosoftTeamsChannelConfiguration")
    assert not resources(plain, "AWS::IAM::Role")
    assert not resources(plain, "AWS::SNS::Subscription")
    only_email = template(email="ops@example.com")
    (sub,) = resources(only_email, "AWS::SNS::Subscription").values()
    assert sub["Properties"]["Protocol"] == "email"


def test_slack_and_teams_channels_get_the_topic(everything):
    ((topic, _),) = resources(everything, "AWS::SNS::Topic").items()
    (slack,) = (r["Properties"] for r in resources(everything, "AWS::Chatbot::SlackChannelConfiguration").values())
    assert (slack["SlackWorkspaceId"], slack["SlackChannelId"]) == ("T0123ABCD", "C0456EFGH")
    assert slack["SnsTopicArns"] == [{"Ref": topic}]
    assert slack["ConfigurationName"] == "Dhc-eu-west-1-slack"  # unique per account across regions
    (teams,) = (
        r["Properties"] for r in resources(everything, "AWS::Chatbot::MicrosoftTeamsChannelConfiguration").values()
    )
    assert (teams["TeamId"], teams["TeamsTenantId"]) == (TEAM, TENANT)
    assert teams["TeamsChannelId"] == "19%3AabcDEF123%40thread.tacv2"  # URL-encoded, as Chatbot wants it
    assert teams["SnsTopicArns"] == [{"Ref": topic}]
    assert teams["ConfigurationName"] == "Dhc-eu-west-1-teams"


def test_the_chat_channels_can_only_receive_notifications(everything):
    ((role_id, role),) = resources(everything, "AWS::IAM::Role").items()
    props = role["Properties"]
    assert props["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": CHATBOT_PRINCIPAL}}
    ]
    assert "Policies" not in props and "ManagedPolicyArns" not in props  # no permission at all
    assert not resources(everything, "AWS::IAM::Policy")  # none attached later either
    for type_ in ("AWS::Chatbot::SlackChannelConfiguration", "AWS::Chatbot::MicrosoftTeamsChannelConfiguration"):
        (config,) = (r["Properties"] for r in resources(everything, type_).values())
        assert config["IamRoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
        assert config["GuardrailPolicies"] == [DENY_ALL]  # caps channel members' own user roles too
        assert config["UserRoleRequired"] is False


def test_each_webhook_is_an_https_subscription_with_the_sns_envelope(everything):
    subs = [r["Properties"] for r in resources(everything, "AWS::SNS::Subscription").values()]
    hooks = sorted(s["Endpoint"] for s in subs if s["Protocol"] == "https")
    assert hooks == sorted(HOOKS)
    assert not any(s.get("RawMessageDelivery") for s in subs)  # Chatbot and webhooks need the envelope


def test_a_webhook_token_is_in_no_logical_id_or_construct_path_only_in_the_endpoint(tmp_path):
    """A subscription named by its URL put the token in the logical id: deploy progress, stack events and
    ListStackResources would show it. The Endpoint property keeps it (docs/SECURITY.md says who can read that)."""
    token_url = "https://example.com/hooks/SECRETTOKEN123"
    app, stack, _ = tiny(tmp_path, webhooks=["https://hooks.example.com/sns/ops", token_url])
    app.synth()
    body = Template.from_stack(stack).to_json()
    assert not [logical_id for logical_id in body["Resources"] if "SECRETTOKEN123" in logical_id.upper()]
    paths = json.dumps([r.get("Metadata", {}) for r in body["Resources"].values()])
    assert "SECRETTOKEN123" not in paths.upper()  # aws:cdk:path metadata: the construct ids
    assert "SECRETTOKEN123" not in (tmp_path / "manifest.json").read_text().upper()  # logical ids -> paths
    assert "SECRETTOKEN123" not in " ".join(_construct_paths(json.loads((tmp_path / "tree.json").read_text()))).upper()
    endpoints = {s["Properties"]["Endpoint"] for s in resources(body, "AWS::SNS::Subscription").values()}
    assert token_url in endpoints
    assert json.dumps(body).count("SECRETTOKEN123") == 1


def _construct_paths(node: dict[str, Any]) -> list[str]:
    return [node.get("path", ""), *(p for child in node.get("children", {}).values() for p in _construct_paths(child))]


def test_webhook_subscriptions_are_named_by_their_position():
    """Stable across synths and independent of the URL: the first URL is Webhook1, the second Webhook2."""
    ids = sorted(resources(template(webhooks=HOOKS), "AWS::SNS::Subscription"))
    assert [i[: len("NotificationsWebhookN")] for i in ids] == ["NotificationsWebhook1", "NotificationsWebhook2"]


@pytest.mark.parametrize(
    ("url", "service"),
    [
        ("https://hooks.slack.com/services/T000/B000/XXXXSECRET", "Slack"),
        ("https://HOOKS.SLACK.COM./services/T000/B000/XXXXSECRET", "Slack"),  # case and a trailing dot
        ("https://hooks.slack-gov.com/services/T000/B000/XXXXSECRET", "Slack"),
        ("https://contoso.webhook.office.com/webhookb2/a@b/IncomingWebhook/XXXXSECRET/c", "Teams"),
        ("https://outlook.office.com/webhook/a@b/IncomingWebhook/XXXXSECRET/c", "Teams"),
        (
            "https://prod-12.westus.logic.azure.com:443/workflows/0a1b/triggers/manual/paths/invoke?sig=XXXXSECRET",
            "Teams",
        ),
        ("https://default0a1b.2c.environment.api.powerplatform.com/powerautomate/workflows/a?sig=XXXXSECRET", "Teams"),
    ],
)
def test_a_chat_incoming_webhook_is_refused_pointing_to_the_chatbot_key(url, service):
    with pytest.raises(ConfigError) as raised:
        template(webhooks=["https://hooks.example.com/sns/ops", url])
    message = str(raised.value)
    assert message.startswith("webhooks[1] (host ") and f"is a {service} incoming webhook" in message
    assert f"use the {service.lower()} key instead" in message
    assert "XXXXSECRET" not in message  # the host, never the path or query


@pytest.mark.parametrize(
    "url",
    ["https://slack.com.example.org/hook", "https://notslack.com/hooks", "https://webhook.office.com.example.net/x"],
)
def test_a_host_that_only_resembles_a_chat_service_is_accepted(url):
    (sub,) = resources(template(webhooks=[url]), "AWS::SNS::Subscription").values()
    assert sub["Properties"]["Endpoint"] == url


def test_the_key_is_not_opened_to_chatbot(everything):
    """SNS decrypts before it delivers to a subscriber: only publishers use the key."""
    (key,) = resources(everything, "AWS::KMS::Key").values()
    principals = json.dumps([s["Principal"] for s in key["Properties"]["KeyPolicy"]["Statement"]])
    assert CHATBOT_PRINCIPAL not in principals


def test_cdk_nag_and_cfn_lint_pass_on_the_chat_and_webhook_resources(tmp_path):
    app, _, _ = tiny(tmp_path, nag=True, slack=SLACK, teams=TEAMS, webhooks=HOOKS)
    app.synth()  # raises on an unacknowledged AwsSolutions finding
    report = json.loads((tmp_path / "validation-report.json").read_text())
    assert not [v for plugin in report["pluginReports"] for v in plugin["violations"]]
    result = subprocess.run(
        [tool("cfn-lint"), "--format", "parseable", "--", str(tmp_path / "Dhc.template.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert not result.stdout.strip() and not result.stderr.strip(), result.stdout + result.stderr


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: SlackChannel("t0123", "C1"), "slack.workspace_id must be a Slack workspace id"),
        (lambda: SlackChannel("T0123", "#ops"), "slack.channel_id must be a Slack channel id"),
        (lambda: TeamsChannel("not-a-guid", "19:a@thread.tacv2", TENANT), "teams.team_id must be a GUID"),
        (lambda: TeamsChannel(TEAM, "19:a@thread.tacv2", ""), "teams.tenant_id must be a GUID"),
        (lambda: TeamsChannel(TEAM, "General", TENANT), "teams.channel_id must be a Teams channel id"),
        (lambda: template(webhooks=["http://hooks.example.com/x"]), r"webhooks\[0\] \(host hooks.example.com\) must"),
        (lambda: template(webhooks=["https://user:pw@hooks.example.com/x"]), "credentials"),
        (lambda: template(webhooks=["https:///x"]), "must name a host"),
        (lambda: template(webhooks=["https://hooks.example.com/a b"]), "is not a URL"),
        (lambda: template(webhooks=["https://hooks.example.com:99999/x"]), "not a well-formed URL"),
        (lambda: template(webhooks=["https://h.example.com/x", "https://h.example.com/x"]), "listed twice"),
        (lambda: template(webhooks="https://h.example.com/x"), "a list of https:// URLs"),
    ],
)
def test_bad_settings_are_one_line_config_errors(make, says):
    with pytest.raises(ConfigError, match=says) as raised:
        make()
    assert "\n" not in str(raised.value)
    assert "/x" not in str(raised.value)  # a webhook is named by position and host, not by its path
