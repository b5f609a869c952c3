"""`make plan` shows who each principal pattern admits now: IAM's roles (and users) listed under the pattern's path.

Against moto's IAM: a ``PATH/*`` pattern lists the roles it matches (sub-paths included, at most
``ADMITTED_NAMES_SHOWN`` names), an exact one says whether its role exists, and a list IAM refuses (AccessDenied, no
credentials) or another account's pattern is one line saying why, never a failed plan.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from hyperpod_dhc.infra import deploy
from hyperpod_dhc.infra.deploy_config import parse

ACCOUNT, REGION = "123456789012", "us-west-2"  # moto's default account
IAM = f"arn:aws:iam::{ACCOUNT}"
TEAM, BRIDGE, GONE, MANY = f"{IAM}:role/team/*", f"{IAM}:role/ml-cluster-exec", f"{IAM}:role/gone", f"{IAM}:role/many/*"
OPS, ELSEWHERE = f"{IAM}:user/ops/*", "arn:aws:iam::111111111111:role/OnCall"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)  # make plan refuses a region the AWS configuration does not name
    with mock_aws():
        iam = boto3.client("iam", region_name=REGION)
        trust = json.dumps({"Version": "2012-10-17", "Statement": []})
        for path, name in [
            ("/team/", "alice"),
            ("/team/", "bob"),
            ("/team/sub/", "carol"),  # `*` matches across `/`: role/team/* admits it
            ("/", "team-lead"),  # not under /team/
            ("/teamwork/", "dave"),  # PathPrefix /team/ does not list it, nor does the pattern match it
            ("/", "ml-cluster-exec"),
            *(("/many/", f"r{i:02d}") for i in range(12)),
        ]:
            iam.create_role(Path=path, RoleName=name, AssumeRolePolicyDocument=trust)
        iam.create_user(Path="/ops/", UserName="erin")
        yield


def _config(**principals: dict[str, list[str]]) -> Any:
    return parse({"region": REGION, "clusters": ["ml-cluster"], **principals}, Path("deploy.toml"))


def _facts() -> deploy.Preflight:
    return deploy.Preflight(account=ACCOUNT, caller=f"{IAM}:user/me", region=REGION, bootstrap_version=28, clusters=())


CONFIG = {
    "breaker_resetters": {"*": [TEAM]},
    "slurm_bridges": {"ml-cluster": [BRIDGE, GONE]},
    "check_requesters": {"ml-cluster": [MANY, OPS, ELSEWHERE]},
}


def test_each_pattern_says_what_it_admits(aws: None) -> None:
    config = _config(**CONFIG)
    admitted = deploy.admissions(boto3.Session(region_name=REGION), config, ACCOUNT)
    assert admitted == {
        TEAM: "admits: alice, bob, sub/carol (3 roles)",
        BRIDGE: "the role exists",
        GONE: "no such role (it admits nobody until one is created)",
        MANY: "admits: r00, r01, r02, r03, r04, r05, r06, r07, r08, r09 and 2 more (12 roles)",
        OPS: "admits: erin (1 user)",
        ELSEWHERE: f"(cannot list roles: they are account 111111111111's, the plan runs in {ACCOUNT})",
    }
    text = deploy.plan_text(config, _facts(), {"Resources": {}}, existing=None, admitted=admitted)
    lines = text.splitlines()
    start = lines.index("  breaker resetters:")
    assert lines[start : start + 16] == [
        "  breaker resetters:",
        f"    *: {TEAM}",
        "      admits: alice, bob, sub/carol (3 roles)",
        "  slurm bridges:",
        f"    ml-cluster: {BRIDGE}",
        "      the role exists",
        f"    ml-cluster: {GONE}",
        "      no such role (it admits nobody until one is created)",
        "  check requesters:",
        f"    ml-cluster: {MANY}",
        "      admits: r00, r01, r02, r03, r04, r05, r06, r07, r08, r09 and 2 more (12 roles)",
        f"    ml-cluster: {OPS}",
        "      admits: erin (1 user)",
        f"    ml-cluster: {ELSEWHERE}",
        f"      (cannot list roles: they are account 111111111111's, the plan runs in {ACCOUNT})",
        "  nodes table deletion protection: on",
    ]


def test_a_pattern_nobody_matches_yet_says_so(aws: None) -> None:
    config = _config(check_requesters={"*": [f"{IAM}:role/nobody-here/*"]})
    assert deploy.admissions(boto3.Session(region_name=REGION), config, ACCOUNT) == {
        f"{IAM}:role/nobody-here/*": "admits: no role now"
    }


def test_no_pattern_no_iam_call_and_nobody_printed(aws: None) -> None:
    session = boto3.Session(region_name=REGION)
    calls: list[str] = []
    session.events.register("before-call.iam", lambda event_name, **_: calls.append(event_name))
    config = _config()
    assert deploy.admissions(session, config, ACCOUNT) == {} and calls == []
    text = deploy.plan_text(config, _facts(), {"Resources": {}}, existing=None, admitted={})
    assert "  slurm bridges: nobody" in text.splitlines()


def test_a_list_iam_refuses_is_one_line_and_the_plan_goes_on(aws: None) -> None:
    session = boto3.Session(region_name=REGION)
    walks: list[str] = []

    def refuse(**_: Any) -> None:
        walks.append("ListRoles")
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not you"}}, "ListRoles")

    session.events.register("before-call.iam.ListRoles", refuse)
    admitted = deploy.admissions(session, _config(**CONFIG), ACCOUNT)
    assert admitted[TEAM] == admitted[BRIDGE] == "(cannot list roles: AccessDenied: not you)"
    assert admitted[OPS] == "admits: erin (1 user)"  # users are another list
    assert len(walks) == 3  # one walk per path (/team/, /, /many/), each refused once: not once per pattern


def test_no_credentials_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    admitted = deploy.admissions(boto3.Session(region_name=REGION), _config(slurm_bridges={"*": [TEAM]}), ACCOUNT)
    assert admitted == {TEAM: "(cannot list roles: Unable to locate credentials)"}


def test_make_plan_prints_the_admissions(
    aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plan path itself (`python -m hyperpod_dhc.infra.deploy plan`): preflight and IAM against moto, synth stubbed
    out."""
    boto3.client("ssm", region_name=REGION).put_parameter(Name=deploy.BOOTSTRAP_PARAMETER, Value="28", Type="String")

    def synthesize(config: Any, facts: Any, cdk: Path, out: Path) -> Path:
        (out / "manifest.json").write_text(json.dumps({"artifacts": {}}))
        template = out / f"{deploy.STACK_NAME}.template.json"
        template.write_text(json.dumps({"Resources": {"A": {"Type": "AWS::Lambda::Function"}}}))
        return template

    monkeypatch.setattr(deploy, "synthesize", synthesize)
    path = tmp_path / "deploy.toml"
    path.write_text(f'region = "{REGION}"\nclusters = "all"\n[breaker_resetters]\n"*" = ["{TEAM}"]\n')
    code = deploy.main(["plan", "--config", str(path)], session_factory=lambda: boto3.Session(region_name=REGION))
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"  breaker resetters:\n    *: {TEAM}\n      admits: alice, bob, sub/carol (3 roles)\n" in out
