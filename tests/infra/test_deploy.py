"""`make plan` / `make deploy`: the deploy file's checks, and the preflight that stops before any CloudFormation call.

The preflight runs against moto (STS, SSM, SageMaker); a botocore hook counts every CloudFormation call, so a
failing check that let one through fails its test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from hyperpod_dhc.infra import deploy
from hyperpod_dhc.infra.construct import HyperPodDhcProps
from hyperpod_dhc.infra.controller_config import (
    BREAKER_RESETTERS_KEY,
    DEPLOY_EXAMPLE,
    read_breaker_resetters,
    read_controller_config,
    read_notification_email,
)
from hyperpod_dhc.infra.deploy_config import DeployConfigError, load, parse
from hyperpod_dhc.infra.notifications import SlackChannel
from tests.harness.synth import REPO_ROOT

EXAMPLE = DEPLOY_EXAMPLE
ROLE = "arn:aws:iam::123456789012:role/hyperpod-oncall/*"


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deploy.toml"
    path.write_text(text)
    return path


# --- the file -------------------------------------------------------------------------------------------------


def test_the_example_file_loads_as_the_readme_shows_it() -> None:
    config = load(EXAMPLE)
    assert (config.region, config.clusters, config.notification_email) == (
        "us-west-2",
        ("ml-cluster",),
        "hpc-oncall@example.com",
    )


def test_a_missing_file_says_where_the_example_is(tmp_path: Path) -> None:
    with pytest.raises(DeployConfigError, match=r"copy infra/hyperpod_dhc/infra/deploy.example.toml"):
        load(tmp_path / "deploy.toml")


def test_the_file_becomes_context_the_stacks_own_readers_accept() -> None:
    """The -c values are JSON strings; the readers of infra/hyperpod_dhc/infra/controller_config.py parse them as from
    cdk.json."""
    base = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    config = parse(
        {
            "region": "us-west-2",
            "clusters": ["prod"],
            "notification_email": "oncall@example.com",
            "isolating_groups": ["prod/gpu"],
            "breaker_resetters": {"prod": [ROLE]},
            "policy": {"defaults": {"max_attempts": 3}, "groups": {"prod/cpu": {"mode": "off"}}},
            "slack": {"workspace_id": "T0123ABCD", "channel_id": "C0123ABCD"},
            "webhooks": ["https://hooks.example.com/hpdhc"],
        },
        Path("deploy.toml"),
    )
    args = config.cdk_context_args(base)
    context = dict(arg.split("=", 1) for arg in args[1::2])
    stack = cdk.Stack(cdk.App(context=context), "Probe")
    controller = read_controller_config(stack)
    assert list(controller.clusters) == ["prod"]
    assert controller.defaults.max_attempts == 3
    assert controller.defaults.recovery == base["hyperpod-dhc"]["defaults"]["recovery"]  # cdk.json's, kept
    assert controller.policy_for("prod", "gpu").isolating is True
    assert controller.policy_for("prod", "other").isolating is False
    assert read_notification_email(stack) == "oncall@example.com"
    assert read_breaker_resetters(stack, controller) == {"prod": (ROLE,)}
    assert BREAKER_RESETTERS_KEY in context
    props = HyperPodDhcProps.from_context(stack)  # every key, through the construct's own props
    assert props.slack == SlackChannel(workspace_id="T0123ABCD", channel_id="C0123ABCD")
    assert (props.teams, props.webhooks) == (None, ("https://hooks.example.com/hpdhc",))
    assert props.table_deletion_protection is True


# --- the preflight ------------------------------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """moto for STS/SSM/SageMaker, and a count of CloudFormation calls made through any session."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(name, value)
    calls = {"cloudformation": 0}
    with mock_aws():
        yield calls


def _session(calls: dict[str, int], *, orchestrator: dict[str, Any] | None = None) -> boto3.Session:
    session = boto3.Session(region_name="us-west-2")

    def count(**_: Any) -> None:
        calls["cloudformation"] += 1

    session.events.register("before-call.cloudformation", count)
    if orchestrator is not None:

        def orchestrated(parsed: dict[str, Any], **_: Any) -> None:
            parsed["Orchestrator"] = orchestrator

        session.events.register("after-call.sagemaker.DescribeCluster", orchestrated)
    return session


def _bootstrap(version: str = "28") -> None:
    boto3.client("ssm", region_name="us-west-2").put_parameter(
        Name=deploy.BOOTSTRAP_PARAMETER, Value=version, Type="String"
    )


def _cluster(name: str = "ml-cluster") -> None:
    boto3.client("sagemaker", region_name="us-west-2").create_cluster(
        ClusterName=name,
        InstanceGroups=[
            {
                "InstanceGroupName": "gpu-workers",
                "InstanceType": "ml.p5.48xlarge",
                "InstanceCount": 4,
                "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/", "OnCreate": "on_create.sh"},
                "ExecutionRole": "arn:aws:iam::123456789012:role/exec",
                "ThreadsPerCore": 1,
            }
        ],
    )


def _main(path: Path, session: boto3.Session, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = deploy.main(["plan", "--config", str(path)], session_factory=lambda: session)
    return code, capsys.readouterr().err


def test_a_ready_account_passes_every_check(aws: dict[str, int]) -> None:
    _bootstrap()
    _cluster()
    facts = deploy.preflight(load(EXAMPLE), _session(aws, orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}}))
    assert (facts.account, facts.region, facts.bootstrap_version) == ("123456789012", "us-west-2", 28)
    assert facts.clusters[0].groups == (("gpu-workers", "ml.p5.48xlarge", 4),)
    assert aws["cloudformation"] == 0


@pytest.mark.parametrize(
    ("setup", "config", "reason"),
    [
        (
            "no-bootstrap",
            'region = "us-west-2"\nclusters = ["ml-cluster"]\n',
            "is not CDK-bootstrapped: run `cdk bootstrap",
        ),
        (
            "old-bootstrap",
            'region = "us-west-2"\nclusters = ["ml-cluster"]\n',
            "bootstrap is version 5, this stack needs 6+",
        ),
        ("ready", 'region = "us-west-2"\nclusters = ["nope"]\n', "cluster nope is not a HyperPod cluster in us-west-2"),
        ("eks", 'region = "us-west-2"\nclusters = ["ml-cluster"]\n', "orchestrated by Eks, not Slurm"),
        (
            "unknown-orchestrator",
            'region = "us-west-2"\nclusters = "all"\n',
            'Slurm clusters only (clusters = "all" would',
        ),
        (
            "ready",
            'region = "us-west-2"\nclusters = ["ml-cluster"]\nisolating_groups = ["ml-cluster/gpu-workrs"]\n',
            'isolating_groups: "ml-cluster/gpu-workrs" is not an instance group of cluster ml-cluster',
        ),
        (
            "ready",
            'region = "us-west-2"\nclusters = "all"\nisolating_groups = ["cpu-workers"]\n',
            'isolating_groups: "cpu-workers" is not an instance group of any watched cluster',
        ),
    ],
)
def test_a_check_that_fails_stops_with_one_line_before_any_cloudformation_call(
    aws: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, config: str, reason: str
) -> None:
    if setup != "no-bootstrap":
        _bootstrap("5" if setup == "old-bootstrap" else "28")
    _cluster()
    orchestrator = {"eks": {"Eks": {"ClusterArn": "arn"}}, "unknown-orchestrator": {"Nomad": {}}}.get(setup)
    code, err = _main(_config(tmp_path, config), _session(aws, orchestrator=orchestrator), capsys)
    assert code == 1
    assert err.startswith("make plan: ") and reason in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert aws["cloudformation"] == 0


def test_a_wrong_region_says_the_clusters_are_not_there_not_to_bootstrap_it(
    aws: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster is in us-west-2, the file (and the shell) say eu-west-1, which is not bootstrapped."""
    _bootstrap()
    _cluster()
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, "eu-west-1")
    session = boto3.Session(region_name="eu-west-1")
    code, err = _main(_config(tmp_path, 'region = "eu-west-1"\nclusters = ["ml-cluster"]\n'), session, capsys)
    assert code == 1 and err.startswith("make plan: cluster ml-cluster is not a HyperPod cluster in eu-west-1"), err
    assert "bootstrap" not in err and err.count("\n") == 1


def test_a_region_without_clusters_asks_whether_it_is_right_before_sending_anyone_to_bootstrap_it(
    aws: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, "eu-west-1")
    session = boto3.Session(region_name="eu-west-1")
    code, err = _main(_config(tmp_path, 'region = "eu-west-1"\nclusters = "all"\n'), session, capsys)
    assert code == 1 and "is not CDK-bootstrapped" in err, err
    assert err.endswith("; eu-west-1 has no HyperPod cluster yet: is region right?\n"), err


def test_no_credentials_stop_before_any_call(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, "us-west-2")
    calls = {"cloudformation": 0}
    code, err = _main(_config(tmp_path, 'region = "us-west-2"\nclusters = "all"\n'), _session(calls), capsys)
    assert (code, calls["cloudformation"]) == (1, 0)
    assert err == "make plan: no AWS credentials: set AWS_PROFILE or run `aws configure` / `aws sso login`\n"


def test_the_isolating_groups_named_exist(aws: dict[str, int]) -> None:
    _bootstrap()
    _cluster()
    config = parse(
        {"region": "us-west-2", "clusters": "all", "isolating_groups": ["gpu-workers", "ml-cluster/gpu-workers"]},
        Path("deploy.toml"),
    )
    assert deploy.preflight(config, _session(aws)).clusters[0].name == "ml-cluster"


def test_destroy_checks_only_credentials_and_region_a_stack_outlives_its_clusters(
    aws: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not bootstrapped, the cluster gone, no stack: nothing to destroy, and nothing synthesized (no CDK CLI)."""
    config = _config(tmp_path, 'region = "us-west-2"\nclusters = ["gone"]\n')
    code = deploy.main(
        ["destroy", "--config", str(config), "--cdk", "/nonexistent/cdk"], session_factory=lambda: _session(aws)
    )
    assert code == 0
    assert "make destroy: no stack HyperPodDhc in 123456789012/us-west-2: nothing to destroy" in capsys.readouterr().out


def test_an_aws_error_is_one_line(aws: dict[str, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = _session(aws)

    def refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not you"}}, "GetParameter")

    session.events.register("before-call.ssm.GetParameter", refuse)
    code, err = _main(_config(tmp_path, 'region = "us-west-2"\nclusters = "all"\n'), session, capsys)
    assert (
        code == 1
        and err
        == f"make plan: cannot read the CDK bootstrap version ({deploy.BOOTSTRAP_PARAMETER}): AccessDenied: not you\n"
    )


def test_the_plan_says_where_what_and_who(aws: dict[str, int]) -> None:
    _bootstrap()
    _cluster()
    config = parse(
        {
            "region": "us-west-2",
            "clusters": ["ml-cluster"],
            "notification_email": "oncall@example.com",
            "slack": {"workspace_id": "T1", "channel_id": "C1"},
            "webhooks": ["https://hooks.example.com/hpdhc?token=secret"],
            "breaker_resetters": {"*": [ROLE]},
        },
        Path("deploy.toml"),
    )
    facts = deploy.preflight(config, _session(aws))
    template = {
        "Resources": {
            "A": {"Type": "AWS::Lambda::Function"},
            "B": {"Type": "AWS::Lambda::Function"},
            "C": {"Type": "AWS::DynamoDB::Table"},
        }
    }
    text = deploy.plan_text(config, facts, template, existing=None)
    assert text.splitlines()[0].startswith("Create stack HyperPodDhc in 123456789012/us-west-2")
    assert "ml-cluster [InService]: gpu-workers (4 x ml.p5.48xlarge)" in text
    assert "email oncall@example.com, Slack channel C1, webhook to hooks.example.com\n" in text
    assert "hpdhc?token" not in text and "secret" not in text  # a webhook's path and query may be its token
    assert f"  breaker resetters:\n    *: {ROLE}\n" in text
    assert "resources: 3" in text and "  2 AWS::Lambda::Function" in text


# --- the plan against a deployed stack ----------------------------------------------------------------------

TOKEN_URL = "https://example.com/hooks/SECRETTOKEN123"
DEPLOYED = {
    "Parameters": {
        "BootstrapVersion": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": deploy.BOOTSTRAP_PARAMETER}
    },
    "Resources": {
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": "HyperPodDhc-notifications"}},
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"MessageRetentionPeriod": 1209600}},
        # what CDK's UrlSubscription used to name a webhook subscription: the URL in the logical id
        "TopichttpsexamplecomhooksSECRETTOKEN123A1B2C3D4": {
            "Type": "AWS::SNS::Subscription",
            "Properties": {"Protocol": "https", "Endpoint": TOKEN_URL, "TopicArn": {"Ref": "Topic"}},
        },
    },
}
PLANNED = {
    "Parameters": {**DEPLOYED["Parameters"], "Extra": {"Type": "String"}},
    "Resources": {
        "Topic": {
            "Type": "AWS::SNS::Topic",
            "Properties": {"TopicName": "HyperPodDhc-notifications", "KmsMasterKeyId": "alias/x"},
            "Metadata": {"aws:cdk:path": "HyperPodDhc/Topic/Resource"},  # not deployed state: no change
        },
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"MessageRetentionPeriod": 1209600}},
        "NotificationsWebhook1A2B3C4D": {
            "Type": "AWS::SNS::Subscription",
            "Properties": {"Protocol": "https", "Endpoint": TOKEN_URL, "TopicArn": {"Ref": "Topic"}},
        },
    },
}


def test_the_changes_name_resources_and_properties_never_values_or_a_webhooks_token() -> None:
    changes = deploy.template_changes(DEPLOYED, PLANNED)
    assert changes == [
        "- AWS::SNS::Subscription (webhook to example.com)",  # by host: the old logical id spelled the URL
        "+ AWS::SNS::Subscription (webhook to example.com)",
        "~ Topic AWS::SNS::Topic: KmsMasterKeyId",
        "+ parameter Extra",
    ]
    assert deploy.template_changes(PLANNED, PLANNED) == []


def test_make_plan_against_a_deployed_stack_prints_what_changes(aws: dict[str, int]) -> None:
    """The stack deployed in moto: GetTemplate's body against the synthesized one, in the plan's words."""
    _bootstrap()
    _cluster()
    cloudformation = boto3.client("cloudformation", region_name="us-west-2")
    cloudformation.create_stack(StackName=deploy.STACK_NAME, TemplateBody=json.dumps(DEPLOYED))
    config = parse({"region": "us-west-2", "clusters": ["ml-cluster"], "webhooks": [TOKEN_URL]}, Path("deploy.toml"))
    session = _session(aws)
    facts = deploy.preflight(config, session)
    existing = deploy.existing_stack(session, "us-west-2")
    deployed = deploy.deployed_template(session, "us-west-2")
    assert existing == "CREATE_COMPLETE" and isinstance(deployed, dict)
    text = deploy.plan_text(config, facts, PLANNED, existing, deployed=deployed)
    assert text.splitlines()[0].startswith("Update stack HyperPodDhc in 123456789012/us-west-2 (now CREATE_COMPLETE)")
    assert "  changes to the deployed stack (its template against this one; names only, no values):\n" in text
    assert "    ~ Topic AWS::SNS::Topic: KmsMasterKeyId\n" in text
    assert "SECRETTOKEN123" not in text and "/hooks" not in text  # the webhook by its host only
    assert "webhook to example.com" in text
    unchanged = deploy.plan_text(config, facts, DEPLOYED, existing, deployed=deployed)
    assert "  changes to the deployed stack: none (the same resources, properties and parameters)" in unchanged


def test_a_template_that_cannot_be_read_is_said_in_one_line_of_the_plan(aws: dict[str, int]) -> None:
    _bootstrap()
    _cluster()
    config = parse({"region": "us-west-2", "clusters": ["ml-cluster"]}, Path("deploy.toml"))
    session = _session(aws)
    reason = deploy.deployed_template(session, "us-west-2")  # no stack at all
    assert isinstance(reason, str) and "ValidationError" in reason
    text = deploy.plan_text(config, deploy.preflight(config, session), PLANNED, "UPDATE_COMPLETE", deployed=reason)
    assert f"  changes to the deployed stack: not known (cannot read its template: {reason})" in text
