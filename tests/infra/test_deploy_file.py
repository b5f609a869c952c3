"""`make plan` with a deploy.toml mistake: one line naming the file's key, and not one AWS call before it.

Every key of the file is checked by one model (hyperpod_dhc.infra.deploy_config.DeployFile) with synth's own rules, so a
mistake that synth would have refused (after the AWS checks, as a traceback naming a CDK context key) stops at once.
Calls are counted where every boto3 client makes them (BaseClient._make_api_call); the CDK CLI is never started.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.client
import pytest

from hyperpod_dhc.infra import deploy
from hyperpod_dhc.infra.controller_config import PRINCIPAL_PATTERNS_ALLOWED

FILE = 'region = "us-west-2"\nclusters = ["ml-cluster"]\n'
IAM = "arn:aws:iam::123456789012"
TEAM = "9d7a5c2e-1b3f-4e6a-8c9d-0e1f2a3b4c5d"


@pytest.fixture
def aws_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every AWS call any client makes, by operation; the region configured as the files' (us-west-2)."""
    calls: list[str] = []

    def counted(self: Any, operation: str, params: Any) -> Any:
        calls.append(operation)
        raise AssertionError(f"an AWS call ({operation}) before the file was refused")

    def no_cdk(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a subprocess (the CDK CLI?) before the file was refused: {args}")

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    monkeypatch.setattr(subprocess, "run", no_cdk)
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    yield calls


def _plan(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "deploy.toml"
    path.write_text(text)
    assert deploy.main(["plan", "--config", str(path), "--cdk", "/nonexistent/cdk"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err  # one line
    assert err.startswith(f"make plan: {path}: "), err
    return err.removeprefix(f"make plan: {path}: ").rstrip("\n")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # unknown keys, at every level
        (FILE + "clsuters = []\n", "clsuters: unknown key: did you mean clusters? allowed: region, clusters, "),
        (FILE + "[policy.defaults]\nmax_attemps = 3\n", "policy.defaults.max_attemps: unknown key: did you mean "),
        (FILE + "[policy]\nreconcile_every_minute = 5\n", "policy.reconcile_every_minute: unknown key: did you"),
        (FILE + '[slack]\nworkspace_id = "T1"\nchannel_id = "C1"\nchannel = "ops"\n', "slack.channel: unknown key"),
        # a bad value in every section
        ('region = "us-west-2"\nclusters = []\n', 'clusters: must be "all" or a non-empty list of cluster names'),
        ('region = "us-west-2"\nclusters = ["ml_cluster"]\n', "clusters[0]: String should match pattern"),
        (FILE + 'notification_email = "oncall"\n', "notification_email: must be an email address, got 'oncall'"),
        (FILE + 'isolating_groups = ["a/b/c"]\n', "isolating_groups[0]: 'a/b/c' is not \"<group>\" or"),
        (FILE + 'table_deletion_protection = "no"\n', "table_deletion_protection: Input should be a valid boolean"),
        (FILE + "[policy.defaults]\nmax_attempts = 99\n", "policy.defaults.max_attempts: Input should be less than"),
        (FILE + '[policy.groups.gpu]\nrecovery = "fix"\n', "policy.groups.gpu.recovery: Input should be 'auto', "),
        (FILE + '[policy]\nclusters = "all"\n', "policy.clusters: set clusters at the top level"),
        (
            FILE + '[policy.defaults]\nrecovery = "replace"\nladder = ["reboot"]\n',
            'policy.defaults: ladder reboots but recovery is "replace"',
        ),
        (
            FILE + 'isolating_groups = ["gpu"]\n[policy.groups.gpu]\nisolate_until_checked = true\n',
            "policy: sets isolate_until_checked beside isolating_groups",
        ),
        (FILE + '[slack]\nworkspace_id = "t1"\nchannel_id = "C1"\n', "slack.workspace_id must be a Slack workspace"),
        (FILE + '[slack]\nworkspace_id = "T1"\n', "slack.channel_id: required, and missing"),
        (
            FILE + f'[teams]\nteam_id = "{TEAM}"\nchannel_id = "General"\ntenant_id = "{TEAM}"\n',
            "teams.channel_id must be a Teams channel id",
        ),
        (FILE + f'[breaker_resetters]\nml-cluster = ["{IAM}:role/*"]\n', 'breaker_resetters: "ml-cluster" has \''),
        (FILE + f'[slurm_bridges]\nother = ["{IAM}:role/x"]\n', 'slurm_bridges: cluster "other" is not one of the'),
        (FILE + '[check_requesters]\nml-cluster = "arn"\n', 'check_requesters: "ml-cluster" must be a non-empty list'),
        # a wrong region
        ('region = "us-west-9"\nclusters = "all"\n', "region: 'us-west-9' is not an AWS region with SageMaker: did "),
        ('region = "US-WEST-2"\nclusters = "all"\n', "region: 'US-WEST-2' is not an AWS region with SageMaker"),
        # webhooks SNS cannot use, or that would spell a token
        (FILE + 'webhooks = ["http://hooks.example.com/x"]\n', "webhooks[0] (host hooks.example.com) must be an https"),
        (FILE + 'webhooks = "https://hooks.example.com/x"\n', "webhooks: must be a list of https:// URLs, got a str"),
        (
            FILE + 'webhooks = ["https://hooks.slack.com/services/T0/B0/x"]\n',
            "webhooks[0] (host hooks.slack.com) is a Slack incoming webhook, which cannot confirm an SNS "
            "subscription: use the slack key instead",
        ),
        (
            FILE + 'webhooks = ["https://contoso.webhook.office.com/webhookb2/x"]\n',
            "webhooks[0] (host contoso.webhook.office.com) is a Teams incoming webhook, which cannot confirm an SNS "
            "subscription: use the teams key instead",
        ),
        # not TOML at all
        ('region = "us-west-2"\nclusters = ["a"\n', "not valid TOML"),
    ],
)
def test_a_mistake_is_one_line_naming_the_files_key_before_any_aws_call(
    aws_calls: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    refusal = _plan(tmp_path, text, capsys)
    assert refusal.startswith(says), refusal
    assert "context key" not in refusal  # the file's key, never the CDK context key synth would name
    assert aws_calls == []


def test_a_principal_refusal_says_what_is_allowed(
    aws_calls: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = _plan(tmp_path, FILE + f'[check_requesters]\n"*" = ["{IAM}:role/dev-*"]\n', capsys)
    assert refusal.endswith(PRINCIPAL_PATTERNS_ALLOWED)


def test_a_webhook_refusal_names_the_host_never_the_token(
    aws_calls: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for url in ("http://example.com/hooks/SECRETTOKEN123", "https://hooks.slack.com/services/SECRETTOKEN123"):
        refusal = _plan(tmp_path, FILE + f'webhooks = ["https://ok.example.com/a", "{url}"]\n', capsys)
        assert refusal.startswith("webhooks[1] (host ") and "SECRETTOKEN123" not in refusal, refusal


def test_a_region_the_aws_configuration_does_not_name_is_refused_before_any_call(
    aws_calls: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials set up for eu-west-1 (AWS_REGION, as the CDK CLI reads it) and a file saying us-west-2: the
    operator learns it now, not from a bootstrap request for a region they did not mean."""
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    path = tmp_path / "deploy.toml"
    path.write_text(FILE)
    assert deploy.main(["plan", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"make plan: {path}: region is us-west-2, but AWS_REGION is eu-west-1: make them agree "
        '(region = "eu-west-1" in deploy.toml, or AWS_REGION=us-west-2 AWS_DEFAULT_REGION=us-west-2 make ...)\n'
    )
    assert aws_calls == []


def test_the_profiles_region_counts_when_no_variable_names_one(
    aws_calls: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = ap-southeast-2\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    path = tmp_path / "deploy.toml"
    path.write_text(FILE)
    assert deploy.main(["plan", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert "region is us-west-2, but the profile's region is ap-southeast-2" in err and err.count("\n") == 1
    assert aws_calls == []
