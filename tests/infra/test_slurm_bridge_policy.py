"""The Slurm bridge's grant: `SlurmBridgePolicy`, exported as `SlurmBridgePolicyArn` for operators to attach to
the instance role of a cluster's Slurm controller group.

Pinned as synthesized, and evaluated with the harness's evaluators: the identity policy (tests/harness/iam.py,
what the twin's Lambdas are authorized with) allows exactly the bridge's two methods of this API's stage, and
the API's resource policy (tests/harness/api_gateway.py) lets the instance role through on them for the cluster
`hyperpod-dhc:slurm-bridges` names it for, so a role holding only this policy is refused every other route (IAM
auth: no allow, no invoke) and every other cluster (tests/infra/test_cluster_authority.py).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from hyperpod_dhc.infra.controller_config import SLURM_BRIDGES_KEY
from hyperpod_dhc.infra.operator_api import BRIDGE_ROUTES, RESET_ROUTE, ROUTES
from tests.harness import api_gateway as gw
from tests.harness.iam import Policy
from tests.infra.test_operations import one, synth_with
from tests.infra.test_stack import as_list, render, resources

INSTANCE_ROLE = f"arn:aws:sts::{gw.ACCOUNT}:assumed-role/SlurmControllerGroupRole/i-0123456789abcdef0"


@pytest.fixture(scope="module")
def bridged() -> dict[str, Any]:
    """The stack with the instance role named as cluster prod's bridge."""
    return synth_with({SLURM_BRIDGES_KEY: {"prod": [f"arn:aws:iam::{gw.ACCOUNT}:role/SlurmControllerGroupRole"]}})


def bridge_policy(template_json: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (found,) = [
        (lid, r["Properties"])
        for lid, r in resources(template_json, "AWS::IAM::ManagedPolicy").items()
        if "SlurmBridgePolicy" in lid
    ]
    return found


def evaluated(template_json: dict[str, Any]) -> Policy:
    """The policy as deployed in the twin: the API is `local`, its stage `v1`."""
    api, _ = one(template_json, "AWS::ApiGateway::RestApi")
    stage, _ = one(template_json, "AWS::ApiGateway::Stage")
    refs = {**gw.PSEUDO_PARAMETERS, api: gw.API_ID, stage: gw.STAGE}
    _, props = bridge_policy(template_json)
    return Policy(gw.resolve(props["PolicyDocument"]["Statement"], refs))


def concrete(path: str) -> str:
    return re.sub(r"\{\w+\}", "prod", path)


def test_the_policy_allows_invoke_on_exactly_the_bridges_two_methods_of_this_apis_stage(template_json) -> None:
    api, _ = one(template_json, "AWS::ApiGateway::RestApi")
    stage, _ = one(template_json, "AWS::ApiGateway::Stage")
    lid, props = bridge_policy(template_json)
    (statement,) = props["PolicyDocument"]["Statement"]
    prefix = f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{api}>/<{stage}>/"
    assert statement["Effect"] == "Allow" and as_list(statement["Action"]) == ["execute-api:Invoke"]
    assert set(statement) == {"Effect", "Action", "Resource"}  # no condition, no NotResource
    assert [render(r) for r in statement["Resource"]] == [
        prefix + "GET/clusters/*/slurm",
        prefix + "POST/clusters/*/slurm/occupancy",
    ]
    assert not {"Roles", "Users", "Groups"} & set(props)  # attached by an operator, to the role of their choice
    assert template_json["Outputs"]["SlurmBridgePolicyArn"]["Value"] == {"Ref": lid}


def test_the_bridges_routes_are_the_handlers() -> None:
    assert set(BRIDGE_ROUTES) <= set(ROUTES) and RESET_ROUTE not in BRIDGE_ROUTES


def test_a_role_with_the_policy_reaches_the_bridges_routes_and_no_other(template_json, bridged) -> None:
    policy = evaluated(bridged)
    for method, path in ROUTES:
        arn = gw.method_arn(method, concrete(path))
        allowed = policy.decide("execute-api:Invoke", arn) == "allow"
        refused = gw.refusal(bridged, method, concrete(path), INSTANCE_ROLE)
        reaches = allowed and refused is None
        assert reaches is ((method, path) in BRIDGE_ROUTES), (method, path, allowed, refused)
        if (method, path) in BRIDGE_ROUTES:  # not named for it, or shipped empty: denied whatever the policy allows
            assert gw.refusal(bridged, method, path.replace("{cluster}", "dev"), INSTANCE_ROLE)[0] == 403
            assert gw.refusal(template_json, method, concrete(path), INSTANCE_ROLE)[0] == 403
    for method, path in BRIDGE_ROUTES:  # another stage or API of the account, another method: nothing
        arn = gw.method_arn(method, concrete(path))
        for other in (arn.replace(f"/{gw.STAGE}/", "/test-invoke-stage/"), arn.replace(f":{gw.API_ID}/", ":other/")):
            assert policy.decide("execute-api:Invoke", other) == "implicit-deny", other
        swapped = "POST" if method == "GET" else "GET"
        assert policy.decide("execute-api:Invoke", gw.method_arn(swapped, concrete(path))) == "implicit-deny"
        assert policy.decide("execute-api:ManageConnections", arn) == "implicit-deny"


def test_the_reset_route_stays_denied_to_the_bridges_role(bridged) -> None:
    method, path = RESET_ROUTE
    assert gw.refusal(bridged, method, concrete(path), INSTANCE_ROLE)[0] == 403
