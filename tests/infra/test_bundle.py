"""The release's CloudFormation bundle (infra/hyperpod_dhc/infra/bundle.py): a template with Parameters and nothing of
the CDK bootstrap, whose every asset is in the bundle, and which, given ``Clusters``, is the template ``make deploy``
synthesizes for those clusters where it matters (the configuration parameter, the event rules). Deployed against moto's
server by ``make deploy-bundle-moto`` (tests/deploy/bundle.py)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hyperpod_dhc.deephealth.domain.policy import parse_config
from hyperpod_dhc.infra.bundle import (
    ASSETS_BUCKET,
    ASSETS_KEY_PREFIX,
    CHECKSUMS,
    CLUSTERS,
    CLUSTERS_PATTERN,
    EMAIL_PATTERN,
    NOTIFICATION_EMAIL,
    TEMPLATE_NAME,
    bundle_stack,
    write_bundle,
)
from hyperpod_dhc.infra.controller_config import STANDARD_TIER_LIMIT
from tests.harness import synth
from tests.infra.test_lint import NEWER_THAN_CFN_LINT, tool

PARAMETERS = [ASSETS_BUCKET, ASSETS_KEY_PREFIX, CLUSTERS, NOTIFICATION_EMAIL]
EMAIL_SUBSCRIPTION = "NotificationsEmailSubscription457731DC"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle directory as ``make release`` writes it, from a synth without the layer's pip install (its
    staged asset is then a placeholder directory: the names and references are what is tested here)."""
    tmp = tmp_path_factory.mktemp("bundle")
    app = synth.app(outdir=tmp / "cdk.out")
    _, synthesizer = bundle_stack(app)
    app.synth()
    write_bundle(tmp / "cdk.out", synthesizer, tmp / "bundle", "0.0.0-test")
    return tmp / "bundle"


@pytest.fixture(scope="module")
def bundle_json(bundle: Path) -> dict[str, Any]:
    template: dict[str, Any] = json.loads((bundle / TEMPLATE_NAME).read_text())
    return template


def resolve(node: Any, values: dict[str, str], conditions: dict[str, bool]) -> Any:
    """The intrinsic functions the bundle adds (Ref of a parameter, Fn::Join, Fn::Split, Fn::If), as CloudFormation
    evaluates them; anything else is left as it is."""
    if isinstance(node, list):
        return [resolve(item, values, conditions) for item in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((function, args),) = node.items()
        if function == "Ref" and args in values:
            return values[args]
        if function == "Fn::If":
            name, yes, no = args
            return resolve(yes if conditions[name] else no, values, conditions)
        if function == "Fn::Split":
            return resolve(args[1], values, conditions).split(args[0])
        if function == "Fn::Join":
            parts = resolve(args[1], values, conditions)
            if all(isinstance(part, str) for part in parts):
                return str(args[0]).join(parts)
    return {key: resolve(value, values, conditions) for key, value in node.items()}


def condition(node: Any, values: dict[str, str]) -> bool:
    ((function, args),) = node.items()
    if function == "Fn::Not":
        return not condition(args[0], values)
    assert function == "Fn::Equals", function
    left, right = (resolve(arg, values, {}) for arg in args)
    return bool(left == right)


def deployed(template: dict[str, Any], **given: str) -> dict[str, Any]:
    """``template``'s resources with the parameters given (defaults for the others) and its conditions applied."""
    values = {name: p.get("Default", "") for name, p in template["Parameters"].items()} | given
    conditions = {name: condition(expression, values) for name, expression in template["Conditions"].items()}
    resources = {
        logical_id: resource
        for logical_id, resource in template["Resources"].items()
        if conditions.get(resource.get("Condition", ""), True)
    }
    out: dict[str, Any] = resolve(resources, values, conditions)
    return out


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {logical_id: r for logical_id, r in resources.items() if r["Type"] == kind}


def test_the_template_has_the_parameters_a_first_deploy_needs(bundle_json: dict[str, Any]) -> None:
    parameters = bundle_json["Parameters"]
    assert list(parameters) == PARAMETERS
    assert "Default" not in parameters[ASSETS_BUCKET], "the bucket has no sensible default"
    assert parameters[CLUSTERS]["Default"] == "all" and parameters[NOTIFICATION_EMAIL]["Default"] == ""
    assert parameters[ASSETS_KEY_PREFIX]["Default"] == ""
    assert all(p["Type"] == "String" and p["Description"] for p in parameters.values())


@pytest.mark.parametrize(
    ("value", "allowed"),
    [("all", True), ("ml-a", True), ("ml-a,ml-b", True), ("ml-a, ml-b", False), ("", False), ("a,", False)],
)
def test_clusters_is_all_or_names(value: str, allowed: bool) -> None:
    assert bool(re.fullmatch(CLUSTERS_PATTERN, value)) == allowed


@pytest.mark.parametrize(("value", "allowed"), [("", True), ("oncall@example.com", True), ("oncall", False)])
def test_the_email_is_an_address_or_empty(value: str, allowed: bool) -> None:
    assert bool(re.fullmatch(EMAIL_PATTERN, value)) == allowed


def test_nothing_of_the_cdk_bootstrap(bundle_json: dict[str, Any]) -> None:
    """No BootstrapVersion parameter or rule, no bootstrap bucket or roles, no CDK metadata resource."""
    text = json.dumps(bundle_json)
    assert "Rules" not in bundle_json
    for needle in ("BootstrapVersion", "cdk-bootstrap", "hnb659fds", "cdk-", "AWS::CDK::Metadata"):
        assert needle not in text, needle


def test_every_asset_the_template_references_is_in_the_bundle(bundle: Path, bundle_json: dict[str, Any]) -> None:
    keys: list[str] = []
    for resource in bundle_json["Resources"].values():
        code = resource["Properties"].get("Code") or resource["Properties"].get("Content")
        if resource["Type"] in ("AWS::Lambda::Function", "AWS::Lambda::LayerVersion"):
            assert code["S3Bucket"] == {"Ref": ASSETS_BUCKET}, code
            prefix, key = code["S3Key"]["Fn::Join"][1]
            assert prefix == {"Ref": ASSETS_KEY_PREFIX}, code
            keys.append(key)
    assert len(set(keys)) == 2, "the functions' code and the layer"
    assert {p.name for p in (bundle / "assets").iterdir()} == set(keys)


def test_the_checksums_cover_every_file(bundle: Path) -> None:
    listed = dict(reversed(line.split("  ", 1)) for line in (bundle / CHECKSUMS).read_text().splitlines())
    files = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - {CHECKSUMS}
    assert set(listed) == files
    for name, digest in listed.items():
        assert hashlib.sha256((bundle / name).read_bytes()).hexdigest() == digest, name


def test_the_readme_says_what_to_upload_and_how_to_deploy(bundle: Path, bundle_json: dict[str, Any]) -> None:
    readme = (bundle / "README.md").read_text()
    assert "aws s3 cp assets/" in readme and "aws cloudformation deploy" in readme
    assert "--stack-name HyperPodDhc" in readme and "--capabilities CAPABILITY_IAM" in readme
    for name in PARAMETERS:
        assert f"| `{name}` |" in readme, name
    for asset in (bundle / "assets").iterdir():
        assert f"assets/{asset.name}" in readme


def _config(resources: dict[str, Any]) -> str:
    (parameter,) = of_type(resources, "AWS::SSM::Parameter").values()
    value: str = parameter["Properties"]["Value"]
    return value


def _patterns(resources: dict[str, Any]) -> dict[str, Any]:
    rules = of_type(resources, "AWS::Events::Rule")
    return {k: r["Properties"]["EventPattern"] for k, r in rules.items() if "EventPattern" in r["Properties"]}


def test_for_every_cluster_the_configuration_and_rules_are_make_deploys(
    bundle_json: dict[str, Any], template_json: dict[str, Any]
) -> None:
    resources = deployed(bundle_json, Clusters="all")
    assert _config(resources) == _config(template_json["Resources"])  # the very string `make deploy` stores
    assert _patterns(resources) == _patterns(template_json["Resources"])


def test_for_named_clusters_the_configuration_and_rules_are_make_deploys(
    bundle_json: dict[str, Any], scoped_template_json: dict[str, Any]
) -> None:
    """conftest's scoped stack watches train-a and train-b: the bundle given those names stores the same
    configuration and filters the events as that stack does."""
    resources = deployed(bundle_json, Clusters="train-a,train-b")
    assert _config(resources) == _config(scoped_template_json["Resources"])
    assert parse_config(json.loads(_config(resources))).clusters == ("train-a", "train-b")
    assert _patterns(resources) == _patterns(scoped_template_json["Resources"])


def test_the_longest_clusters_keeps_the_configuration_in_the_standard_tier(bundle_json: dict[str, Any]) -> None:
    longest = bundle_json["Parameters"][CLUSTERS]["MaxLength"]
    assert longest >= 1000, "room for dozens of clusters"
    worst = ",".join("a" * ((longest + 1) // 2))[:longest]  # one-letter names: the most commas
    stored = _config(deployed(bundle_json, Clusters=worst))
    assert len(stored.encode()) <= STANDARD_TIER_LIMIT
    assert bundle_json["Resources"]["ControllerConfig5D39797B"]["Properties"]["Tier"] == "Standard"


def test_the_email_subscription_exists_only_with_an_address(bundle_json: dict[str, Any]) -> None:
    assert EMAIL_SUBSCRIPTION not in deployed(bundle_json)
    subscription = deployed(bundle_json, NotificationEmail="oncall@example.com")[EMAIL_SUBSCRIPTION]
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "oncall@example.com"


def test_the_resources_are_make_deploys_and_the_subscription(
    bundle_json: dict[str, Any], template_json: dict[str, Any]
) -> None:
    """The same resources, by logical id and type, as the example app's stack (without CDK's analytics), and the
    email subscription; what differs in their properties is docs/DEVELOPING.md's list ("The release")."""
    ours = {k: r["Type"] for k, r in bundle_json["Resources"].items()}
    theirs = {k: r["Type"] for k, r in template_json["Resources"].items() if r["Type"] != "AWS::CDK::Metadata"}
    assert ours == theirs | {EMAIL_SUBSCRIPTION: "AWS::SNS::Subscription"}
    assert bundle_json["Outputs"].keys() == template_json["Outputs"].keys()


def test_cfn_lint_reports_no_problems(bundle: Path) -> None:
    result = subprocess.run(
        [tool("cfn-lint"), "-i", "W3005", "--format", "parseable", "--", str(bundle / TEMPLATE_NAME)],
        capture_output=True,
        text=True,
        check=False,
    )
    newer = tuple(f":W3037:'{a.split(':', 1)[1].lower()}' is not one of" for a in NEWER_THAN_CFN_LINT)
    problems = [line for line in result.stdout.splitlines() if line.strip() and not any(n in line for n in newer)]
    assert not problems and not result.stderr.strip(), result.stdout + result.stderr
