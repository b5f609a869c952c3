"""Principal ARN patterns admit no more than they spell out (issue 29, the strict reading).

``principal_pattern_problem`` is the one check: synth's readers (``principal_map``: context keys and props) and the
deploy file (``deploy_config.parse``, before any AWS call) both refuse what it refuses, with one line naming the key.
An exact role or user ARN, path included, is allowed, and so is a spelled-out path then a whole last segment ``*``
(every role under that path and, as ``*`` matches across ``/``, its sub-paths); nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NoReturn

import pytest

from hyperpod_dhc.deephealth.domain.policy import ConfigError, parse_config
from hyperpod_dhc.infra import deploy
from hyperpod_dhc.infra.controller_config import (
    DEPLOY_EXAMPLE,
    PRINCIPAL_PATTERNS_ALLOWED,
    principal_map,
    principal_pattern_problem,
)
from hyperpod_dhc.infra.deploy_config import DeployConfigError, load, parse
from tests.harness import synth

ACCOUNT = "123456789012"
IAM = f"arn:aws:iam::{ACCOUNT}"
EXAMPLE = DEPLOY_EXAMPLE

ALLOWED = [
    f"{IAM}:role/ml-cluster-controller-exec",
    f"{IAM}:role/HyperPodOnCall",
    f"{IAM}:role/team/OnCall",  # a role with a path: aws:PrincipalArn includes it
    f"{IAM}:role/team/*",  # every role under /team/ (and its sub-paths)
    f"{IAM}:role/team/sub/*",
    f"{IAM}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_OnCall_0123456789abcdef",  # Identity Center
    f"{IAM}:role/service-role/A_b+c=d,e.f@g-h",  # every character IAM names have
    f"{IAM}:user/hpc-admin",
    f"{IAM}:user/ops/*",
    f"arn:aws-cn:iam::{ACCOUNT}:role/OnCall",
    f"arn:aws-us-gov:iam::{ACCOUNT}:role/team/*",
]

WILDCARD = "* may only be a whole last path segment after a spelled-out path"
NOT_AN_ARN = "not an IAM role or user ARN pattern"
QUESTION = "? is not allowed anywhere"
SESSION = "a session ARN is never a caller's aws:PrincipalArn: name its role"
SEGMENT = "an empty path segment or name"
REFUSED = [
    ("*", NOT_AN_ARN),
    (f"{IAM}:role/*", WILDCARD),  # every role of the account
    (f"{IAM}:user/*", WILDCARD),
    (f"{IAM}:role/dev-*", WILDCARD),  # admits dev-prod-controller-exec
    (f"{IAM}:role/HyperPodOnCall*", WILDCARD),  # admits HyperPodOnCallIntern
    (f"{IAM}:role/team/dev-*", WILDCARD),
    (f"{IAM}:role/*/x", WILDCARD),
    (f"{IAM}:role/team/*/x", WILDCARD),
    (f"{IAM}:role/team/**", WILDCARD),
    (f"{IAM}:role/*AWSReservedSSO_OnCall_*", WILDCARD),
    (f"{IAM}:role/dev-?", QUESTION),
    (f"{IAM}:role/team/?", QUESTION),
    (f"{IAM}:role/?/x", QUESTION),
    ("arn:aws:iam::12345678901?:role/x", QUESTION),
    ("arn:aws:iam::*:role/OnCall", NOT_AN_ARN),  # any account
    (f"arn:*:iam::{ACCOUNT}:role/OnCall", NOT_AN_ARN),
    (f"arn:aws:*::{ACCOUNT}:role/OnCall", NOT_AN_ARN),
    (f"{IAM}:*/OnCall", NOT_AN_ARN),  # any resource type
    (f"{IAM}:r*/OnCall", NOT_AN_ARN),
    (f"{IAM}:*", NOT_AN_ARN),
    (f"{IAM}:role/", NOT_AN_ARN),
    (f"arn:aws:iam:us-east-1:{ACCOUNT}:role/OnCall", NOT_AN_ARN),  # IAM ARNs have no region
    ("arn:aws:iam::12345678901:role/OnCall", NOT_AN_ARN),  # 11 digits
    (f"{IAM}:group/OnCall", NOT_AN_ARN),
    (f"{IAM}:policy/OnCall", NOT_AN_ARN),
    (f" {IAM}:role/OnCall", NOT_AN_ARN),
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/OnCall/alice", SESSION),  # never an aws:PrincipalArn
    (f"arn:aws:sts::{ACCOUNT}:assumed-role/OnCall/*", SESSION),
    (f"{IAM}:role/team//OnCall", SEGMENT),
    (f"{IAM}:role/team/", SEGMENT),
    (f"{IAM}:role/t\u00e9am/OnCall", SEGMENT),
    (42, NOT_AN_ARN),
    (None, NOT_AN_ARN),
]


@pytest.mark.parametrize("pattern", ALLOWED)
def test_a_pattern_that_spells_out_what_it_admits_is_allowed(pattern: str) -> None:
    assert principal_pattern_problem(pattern) is None


@pytest.mark.parametrize(("pattern", "why"), REFUSED)
def test_a_pattern_that_could_admit_more_than_it_spells_out_is_refused(pattern: object, why: str) -> None:
    problem = principal_pattern_problem(pattern)
    assert problem is not None and problem.startswith(why), problem
    assert problem.endswith(PRINCIPAL_PATTERNS_ALLOWED)  # and says what is allowed
    assert "\n" not in problem


def test_what_is_allowed_says_that_a_path_wildcard_admits_its_sub_paths() -> None:
    assert "role/PATH/*, which also admits that path's sub-paths" in PRINCIPAL_PATTERNS_ALLOWED


# --- synth's readers: a context key or a props field --------------------------------------------------------


def test_synth_refuses_naming_the_key_and_the_cluster() -> None:
    config = parse_config(synth.base_config())
    where = 'context key "hyperpod-dhc:slurm-bridges"'
    with pytest.raises(ConfigError) as caught:
        principal_map({"prod": [f"{IAM}:role/prod-exec", f"{IAM}:role/*"]}, config, where)
    message = str(caught.value)
    assert message.startswith(f"{where}: \"prod\" has '{IAM}:role/*': {WILDCARD}"), message
    assert "\n" not in message
    assert principal_map({"*": [f"{IAM}:role/team/*", f"{IAM}:role/team/*"]}, config, where) == {
        "*": (f"{IAM}:role/team/*",)  # deduplicated
    }


# --- the deploy file: refused by `make plan` before any AWS call --------------------------------------------


@pytest.mark.parametrize("key", ["breaker_resetters", "slurm_bridges", "check_requesters"])
def test_the_deploy_file_refuses_naming_its_own_key(key: str) -> None:
    raw = {"region": "us-west-2", "clusters": ["ml-cluster"], key: {"ml-cluster": [f"{IAM}:role/dev-*"]}}
    with pytest.raises(ConfigError) as caught:  # a DeployConfigError is a ConfigError, as synth raises
        parse(raw, Path("deploy.toml"))
    assert isinstance(caught.value, DeployConfigError)
    message = str(caught.value)
    assert message.startswith(f"deploy.toml: {key}: \"ml-cluster\" has '{IAM}:role/dev-*': {WILDCARD}"), message
    assert message.endswith(PRINCIPAL_PATTERNS_ALLOWED) and "\n" not in message


def test_make_plan_refuses_a_broad_pattern_before_any_aws_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deploy.toml"
    path.write_text(f'region = "us-west-2"\nclusters = "all"\n[slurm_bridges]\n"*" = ["{IAM}:role/*"]\n')

    def no_session() -> NoReturn:
        raise AssertionError("a session was made: the file should have been refused first")

    assert deploy.main(["plan", "--config", str(path)], session_factory=no_session) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"make plan: {path}: slurm_bridges: \"*\" has '{IAM}:role/*': {WILDCARD}"), err
    assert err.count("\n") == 1


def test_the_example_files_patterns_are_allowed(tmp_path: Path) -> None:
    """Uncommented, the example's principal lines load: no example teaches a refused pattern."""
    lines = EXAMPLE.read_text().splitlines()
    uncommented = [re.sub(r"^# (\S+ = \[\"arn:)", r"\1", line) for line in lines]
    assert uncommented != lines
    path = tmp_path / "deploy.toml"
    path.write_text("\n".join(uncommented) + "\n")
    config = load(path)
    patterns = [arn for who in config.principals.values() for arns in who.values() for arn in arns]
    assert len(patterns) >= 3 and all(principal_pattern_problem(arn) is None for arn in patterns)
