"""Who may reset what: `hyperpod-dhc:breaker-resetters` and the operator API's resource policy.

The policy is pinned statement by statement, and evaluated (tests/harness/api_gateway.py, the evaluator the
twin answers with) for principals and routes: shipped empty, nobody may reset any cluster and no route that
no key guards is touched; configured, a cluster's resetters are its own patterns plus those of "*". The other
keys of the same policy (slurm-bridges, check-requesters): tests/infra/test_cluster_authority.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from hyperpod_dhc.deephealth.domain.policy import ConfigError
from hyperpod_dhc.infra.controller_config import BREAKER_RESETTERS_KEY
from hyperpod_dhc.infra.operator_api import GUARDS, POLICY_LENGTH_QUOTA, RESET_ROUTE, ROUTES, expand_longest
from tests.harness import api_gateway as gw
from tests.harness import synth
from tests.infra.stacks import controller, controller_stack
from tests.infra.test_operations import one, synth_with
from tests.infra.test_stack import as_list, render, resources

ACCOUNT = "123456789012"
ON_CALL = f"arn:aws:iam::{ACCOUNT}:role/HyperPodOnCallUS"
TRAIN = f"arn:aws:iam::{ACCOUNT}:role/TrainTeam"
ADMIN = f"arn:aws:iam::{ACCOUNT}:user/hpc-admin"
RESETTERS = {"prod": [ON_CALL], "train-a": [TRAIN, ON_CALL], "*": [ADMIN]}
ARN_PREFIX = "arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:*/*/"
# Cluster names that are words of the routes: a NotResource pattern must not match their reset.
ROUTE_WORDS = ("GET", "POST", "clusters", "groups", "nodes", "checks", "breakers", "reset", "slurm", "occupancy")
GUARDED = {route for guard in GUARDS for route in guard.routes}


def route_arn(method: str, path: str) -> str:
    return ARN_PREFIX + method + re.sub(r"\{\w+\}", "*", path)


OTHER_ROUTES = [route_arn(m, p) for m, p in ROUTES if (m, p) != RESET_ROUTE]
# What no key guards: the read routes but the bridge's (every other cluster's statement leaves them alone).
UNGUARDED_ROUTES = [route_arn(m, p) for m, p in ROUTES if (m, p) not in GUARDED]


def reset(cluster: str) -> str:
    return f"/clusters/{cluster}/breakers/reset"


def policy_length_of(template_json: dict[str, Any]) -> int:
    """POLICY_LENGTH_QUOTA's measure of a synthesized policy (the longest partition, region and account)."""
    _, api = one(template_json, "AWS::ApiGateway::RestApi")
    return len(json.dumps(expand_longest(api["Policy"]), separators=(",", ":")))


def policy(template_json: dict[str, Any]) -> list[dict[str, Any]]:
    _, api = one(template_json, "AWS::ApiGateway::RestApi")
    return api["Policy"]["Statement"]


def rendered(statement: dict[str, Any]) -> dict[str, Any]:
    """A statement with its ARNs rendered to strings (``<AWS::Region>`` for a Ref)."""
    out = dict(statement)
    for key in ("Resource", "NotResource"):
        if key in out:
            out[key] = [render(r) for r in as_list(out[key])]
    return out


@pytest.fixture(scope="module")
def configured() -> dict[str, Any]:
    return synth_with({BREAKER_RESETTERS_KEY: RESETTERS})


def test_cdk_json_ships_an_empty_map_documented_in_its_comment() -> None:
    context = synth.cdk_context()
    assert context[BREAKER_RESETTERS_KEY] == {}
    assert BREAKER_RESETTERS_KEY in context["//"]


def test_shipped_empty_the_policy_denies_the_reset_route_to_everyone_and_no_unguarded_route(template_json) -> None:
    (statement,) = policy(template_json)  # every key empty: one statement for every cluster of every key
    assert rendered(statement) == {
        "Sid": "OtherClusters1OnlyByPrincipalsOfAll",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "execute-api:Invoke",
        "NotResource": UNGUARDED_ROUTES,
    }
    for caller in (f"arn:aws:iam::{ACCOUNT}:user/operator", f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/x"):
        for cluster in ("prod", "train-a", *ROUTE_WORDS):  # no other route's ARN pattern covers a reset
            assert gw.refusal(template_json, "POST", reset(cluster), caller)[0] == 403
        for method, path in ROUTES:
            if (method, path) not in GUARDED:  # no deny, and API Gateway may invoke the function
                assert gw.refusal(template_json, method, path.replace("{", "").replace("}", ""), caller) is None


def test_configured_one_deny_per_cluster_for_all_but_its_resetters(configured) -> None:
    statements = [rendered(s) for s in policy(configured)]
    deny = {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "execute-api:Invoke"}
    assert statements == [
        {
            **deny,
            "Sid": "ClusterRoutes1OnlyByTheirPrincipals",
            "Resource": [ARN_PREFIX + "POST" + reset("prod")],
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": sorted([ON_CALL, ADMIN])}},
        },
        {
            **deny,
            "Sid": "ClusterRoutes2OnlyByTheirPrincipals",
            "Resource": [ARN_PREFIX + "POST" + reset("train-a")],
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": sorted([TRAIN, ON_CALL, ADMIN])}},
        },
        {
            **deny,
            "Sid": "OtherClusters1OnlyByPrincipalsOfAll",
            "NotResource": OTHER_ROUTES + [ARN_PREFIX + "POST" + reset(c) for c in ("prod", "train-a")],
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": [ADMIN]}},
        },
        {  # the other keys, unset: their routes of every cluster, to everyone (test_cluster_authority.py)
            **deny,
            "Sid": "OtherClusters2OnlyByPrincipalsOfAll",
            "NotResource": [route_arn(m, p) for m, p in ROUTES if (m, p) not in GUARDED - {RESET_ROUTE}],
        },
    ]


@pytest.mark.parametrize(
    ("caller", "may_reset"),
    [
        (f"arn:aws:sts::{ACCOUNT}:assumed-role/HyperPodOnCallUS/alice", {"prod", "train-a"}),
        (f"arn:aws:sts::{ACCOUNT}:assumed-role/TrainTeam/bob", {"train-a"}),  # not prod, not another cluster
        (ADMIN, {"prod", "train-a", "train-b", *ROUTE_WORDS}),  # "*": every cluster, configured or not
        (f"arn:aws:iam::{ACCOUNT}:user/operator", set()),
    ],
)
def test_configured_who_may_reset_which_cluster(configured, caller: str, may_reset: set[str]) -> None:
    for cluster in ("prod", "train-a", "train-b", *ROUTE_WORDS):
        refused = gw.refusal(configured, "POST", reset(cluster), caller)
        assert (refused is None) is (cluster in may_reset), (cluster, refused)
    for path in ("/clusters", "/clusters/prod/breakers", "/clusters/train-b/nodes/n-1"):
        assert gw.refusal(configured, "GET", path, caller) is None


def test_the_policy_only_denies_and_iam_auth_stays_on_every_method(template_json, configured) -> None:
    for template in (template_json, configured):
        for statement in policy(template):
            assert statement["Effect"] == "Deny" and statement["Action"] == "execute-api:Invoke", statement
        assert {
            m["Properties"]["AuthorizationType"] for m in resources(template, "AWS::ApiGateway::Method").values()
        } == {"AWS_IAM"}
        api, _ = one(template, "AWS::ApiGateway::RestApi")
        stage, _ = one(template, "AWS::ApiGateway::Stage")
        reset_sources = [
            render(p["Properties"]["SourceArn"])
            for p in resources(template, "AWS::Lambda::Permission").values()
            if p["Properties"]["Principal"] == "apigateway.amazonaws.com" and "reset" in str(p["Properties"])
        ]
        assert reset_sources == [
            f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{api}>/<{stage}>/POST/clusters/*/breakers/reset"
        ]


def test_a_changed_map_is_a_new_deployment_of_the_stage(template_json, configured) -> None:
    # API Gateway applies a changed resource policy only when the API is deployed again.
    (deployment,) = resources(template_json, "AWS::ApiGateway::Deployment")
    (redeployment,) = resources(configured, "AWS::ApiGateway::Deployment")
    assert deployment != redeployment
    _, stage = one(configured, "AWS::ApiGateway::Stage")
    assert stage["DeploymentId"] == {"Ref": redeployment}


def test_the_map_may_come_as_a_json_string_from_the_command_line() -> None:
    stack = controller_stack(synth.app({BREAKER_RESETTERS_KEY: json.dumps({"prod": [ON_CALL]})}))
    statements = stack.resolve(controller(stack).operator_api.api.node.default_child.policy)["Statement"]
    assert [s["Sid"] for s in statements] == [
        "ClusterRoutes1OnlyByTheirPrincipals",
        "OtherClusters1OnlyByPrincipalsOfAll",
    ]
    assert "breakers/reset" in json.dumps(statements[0]["Resource"])


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ("{not json", "not valid JSON"),
        (["prod"], "must be a map"),
        ({"prod/gpu": [ON_CALL]}, "neither a cluster name"),
        ({"prod": []}, "non-empty list"),
        ({"prod": ON_CALL}, "non-empty list"),
        ({"prod": ["*"]}, "not an IAM role or user ARN pattern"),
        ({"prod": ["arn:aws:iam::*:role/OnCall"]}, "not an IAM role or user ARN pattern"),  # any account
        ({"prod": [f"arn:aws:sts::{ACCOUNT}:assumed-role/OnCall/alice"]}, "name its role"),
        ({"prod": [f"arn:aws:iam::{ACCOUNT}:group/OnCall"]}, "not an IAM role or user ARN pattern"),
        ({"prod": [42]}, "not an IAM role or user ARN pattern"),
    ],
)
def test_a_bad_map_fails_synth_naming_the_key(bad: Any, named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(BREAKER_RESETTERS_KEY)) as err:
        controller_stack(synth.app({BREAKER_RESETTERS_KEY: bad}))
    assert named in str(err.value)


def test_a_cluster_that_is_not_watched_fails_synth() -> None:
    context = {**synth.config_with(clusters=["prod"]), BREAKER_RESETTERS_KEY: {"prdo": [ON_CALL]}}
    with pytest.raises(ConfigError, match=r'cluster "prdo" is not one of the watched clusters'):
        controller_stack(synth.app(context))


def test_a_map_beyond_api_gateways_policy_quota_fails_synth_naming_the_key() -> None:
    many = {f"cluster-{i:02d}": [f"arn:aws:iam::{ACCOUNT}:role/oncall-{i:02d}/*"] for i in range(20)}
    with pytest.raises(ConfigError, match=re.escape(BREAKER_RESETTERS_KEY) + r".* characters, above API Gateway"):
        controller_stack(synth.app({BREAKER_RESETTERS_KEY: many}))


def test_the_policy_length_counts_full_arns_as_api_gateway_stores_them(template_json, configured) -> None:
    for template in (template_json, configured):
        _, api = one(template, "AWS::ApiGateway::RestApi")
        stored = json.dumps(gw.resolve(api["Policy"], dict(gw.PSEUDO_PARAMETERS)), separators=(",", ":"))
        assert len(stored) <= policy_length_of(template) <= POLICY_LENGTH_QUOTA
        assert "arn:aws:execute-api:us-east-1:123456789012:*/*/GET/clusters/" in stored
