"""Who may reset what: the twin answers as API Gateway does, from the synthesized resource policy.

`hyperpod-dhc:breaker-resetters` here: "demo" by the on-call role's sessions, "other" by the other team's
role, every cluster by the admin role. The twin's operator (`Harness.api`'s default principal) is not
configured in this template, so it may read but not reset.
"""

import pytest

from hyperpod_dhc.infra.controller_config import BREAKER_RESETTERS_KEY
from tests.fakes.hyperpod import GroupSpec
from tests.harness import api_gateway as gw
from tests.harness.engine import Harness
from tests.harness.synth import TWIN_OPERATOR, synthesized_template
from tests.harness.template import ControllerTemplate

ACCOUNT = gw.ACCOUNT
RESETTERS = {
    "demo": [f"arn:aws:iam::{ACCOUNT}:role/HyperPodOnCallEU", f"arn:aws:iam::{ACCOUNT}:role/HyperPodOnCall"],
    "other": [f"arn:aws:iam::{ACCOUNT}:role/OtherTeam"],
    "*": [f"arn:aws:iam::{ACCOUNT}:role/HyperPodAdmin"],
}
ON_CALL = f"arn:aws:sts::{ACCOUNT}:assumed-role/HyperPodOnCallEU/alice"  # a session of a "demo" role
OTHER_TEAM = f"arn:aws:sts::{ACCOUNT}:assumed-role/OtherTeam/bob"
ADMIN = f"arn:aws:sts::{ACCOUNT}:assumed-role/HyperPodAdmin/carol"
CONFIG = {"clusters": ["demo"], "defaults": {"gather_window_s": 0}}
RESET = {"reason": "drill: nothing is open"}


@pytest.fixture(scope="module")
def template() -> dict:
    return synthesized_template({BREAKER_RESETTERS_KEY: RESETTERS})


@pytest.fixture
def gated(template, fake):
    fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    with Harness(ControllerTemplate(template), fake, config=CONFIG) as h:
        yield h


def _reset(cluster: str) -> str:
    return f"/clusters/{cluster}/breakers/reset"


def _denied(caller: str, path: str) -> tuple[int, dict]:
    arn = f"arn:aws:execute-api:us-east-1:{ACCOUNT}:{gw.API_ID}/v1/POST{path}"
    message = (
        f"User: {caller} is not authorized to perform: execute-api:Invoke on resource: {arn} with an explicit deny"
    )
    return 403, {"Message": message}


# ---------------------------------------------------------------- end to end through Harness.api


def test_a_configured_resetter_reaches_the_handler(gated):
    status, body = gated.api("POST", _reset("demo"), RESET, principal=ON_CALL)
    assert status == 200 and body["reset"] is False, body  # a closed breaker: nothing to reset


def test_a_resetter_of_another_cluster_or_an_unconfigured_principal_gets_an_explicit_deny(gated):
    for caller in (OTHER_TEAM, TWIN_OPERATOR):
        assert gated.api("POST", _reset("demo"), RESET, principal=caller) == _denied(caller, _reset("demo"))


def test_a_cluster_not_configured_is_reset_by_nobody_but_the_every_cluster_resetters(gated):
    for caller in (ON_CALL, OTHER_TEAM, TWIN_OPERATOR):
        assert gated.api("POST", _reset("unlisted"), RESET, principal=caller) == _denied(caller, _reset("unlisted"))
    status, body = gated.api("POST", _reset("unlisted"), RESET, principal=ADMIN)
    assert status != 403, body  # past API Gateway: the handler answers (no such cluster)


def test_reads_and_checks_are_not_governed_by_the_resetter_map(gated):
    for caller in (ON_CALL, OTHER_TEAM, TWIN_OPERATOR, f"arn:aws:iam::{ACCOUNT}:user/anyone"):
        status, body = gated.api("GET", "/clusters/demo/breakers", principal=caller)
        assert status == 200 and body["cluster"] == "demo", body
        assert gated.api("GET", "/clusters", principal=caller)[0] == 200
    # Checks are the twin's check requesters' (its operators, tests/harness/synth.py), whoever resets.
    assert gated.api("POST", "/clusters/demo/checks", {}, principal=TWIN_OPERATOR)[0] == 422  # the handler validates
    for caller in (ON_CALL, ADMIN):
        assert gated.api("POST", "/clusters/demo/checks", {}, principal=caller) == _denied(
            caller, "/clusters/demo/checks"
        )


@pytest.mark.parametrize(
    ("method", "path"),
    [("DELETE", "/clusters/demo"), ("GET", "/nope"), ("GET", "/clusters/demo/breakers/reset"), ("POST", "/")],
)
def test_a_missing_route_answers_missing_authentication_token(gated, method, path):
    assert gated.api(method, path, principal=ADMIN) == (403, {"message": "Missing Authentication Token"})


# ---------------------------------------------------------------- the decision table, without a harness


@pytest.mark.parametrize(
    ("caller", "cluster", "allowed"),
    [
        (ON_CALL, "demo", True),
        (f"arn:aws:iam::{ACCOUNT}:role/HyperPodOnCall", "demo", True),  # the role itself
        (f"arn:aws:sts::{ACCOUNT}:assumed-role/HyperPodOnCall/x", "other", False),  # one cluster's: not another's
        (f"arn:aws:sts::{ACCOUNT}:assumed-role/NotHyperPodOnCall/x", "demo", False),  # ArnLike is anchored
        (f"arn:aws:iam::{ACCOUNT}:user/HyperPodOnCall", "demo", False),  # a user, not the role
        ("arn:aws:sts::999999999999:assumed-role/HyperPodOnCallEU/x", "demo", False),  # another account
        (OTHER_TEAM, "other", True),
        (OTHER_TEAM, "demo", False),
        (f"arn:aws:sts::{ACCOUNT}:assumed-role/OtherTeam2/x", "other", False),  # no wildcard: exact role
        (ADMIN, "demo", True),
        (ADMIN, "other", True),
        (ADMIN, "unlisted", True),
        (ON_CALL, "unlisted", False),
        (ON_CALL, "dem%6F", False),  # an encoded variant of a configured cluster is "another" cluster
        (ON_CALL, "Demo", False),
        (TWIN_OPERATOR, "demo", False),
    ],
)
def test_who_may_reset_which_cluster(template, caller, cluster, allowed):
    refused = gw.refusal(template, "POST", _reset(cluster), caller)
    assert (refused is None) is allowed, refused
    if not allowed:
        assert refused == _denied(caller, _reset(cluster))


def test_the_twins_own_template_lets_its_operators_reset_every_cluster():
    template = synthesized_template()
    for caller in (TWIN_OPERATOR, "arn:aws:iam::123456789012:user/local-operator"):
        assert gw.refusal(template, "POST", _reset("any-cluster"), caller) is None
    assert gw.refusal(template, "POST", _reset("any-cluster"), ON_CALL) == _denied(ON_CALL, _reset("any-cluster"))


def test_without_an_invoke_permission_api_gateway_answers_500(template):
    broken = {"Resources": dict(template["Resources"])}
    for lid, res in template["Resources"].items():
        if res["Type"] == "AWS::Lambda::Permission" and "reset" in str(res["Properties"].get("SourceArn")):
            del broken["Resources"][lid]
    assert gw.refusal(broken, "POST", _reset("demo"), ON_CALL) == (500, {"message": "Internal server error"})
    assert gw.refusal(broken, "GET", "/clusters/demo/breakers", ON_CALL) is None


# ---------------------------------------------------------------- the evaluator's pieces


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("a*c", "abbc", True),
        ("a*c", "a/b:c", True),
        ("a?c", "abc", True),
        ("a?c", "abbc", False),
        ("a.c", "abc", False),  # regex characters are literal
        ("abc", "ABC", False),
        ("*", "", True),
    ],
)
def test_wildcards(pattern, value, matches):
    assert gw.wildcard_match(pattern, value) is matches


def test_arn_like_matches_each_of_the_six_parts_on_its_own():
    assert gw.arn_like("arn:aws:iam::*:role/x", "arn:aws:iam::123456789012:role/x")
    assert not gw.arn_like("arn:aws:iam::*:role/x", "arn:aws:iam:us-east-1:123456789012:role/x")
    assert not gw.arn_like("arn:aws:iam::1*", "arn:aws:iam::123456789012:role/x")  # * stays within its part
    assert gw.arn_like("arn:aws:iam::1*:role/*", "arn:aws:iam::123456789012:role/path/x")
    assert not gw.arn_like("*", "arn:aws:iam::123456789012:role/x")  # not an ARN pattern


def test_conditions_and_negated_operators():
    context = {"aws:PrincipalArn": "arn:aws:iam::123456789012:role/A"}
    both = {"aws:PrincipalArn": ["arn:aws:iam::*:role/A", "arn:aws:iam::*:role/B"]}
    assert gw.condition_holds("ArnLike", both, context)
    assert not gw.condition_holds("ArnNotLike", both, context)  # not like *any* of the values
    assert gw.condition_holds("ArnNotLike", {"aws:PrincipalArn": "arn:aws:iam::*:role/B"}, context)
    assert gw.condition_holds("StringNotLike", {"aws:Absent": "x"}, context)  # a missing key: not like
    assert not gw.condition_holds("StringLike", {"aws:Absent": "x"}, context)
    with pytest.raises(NotImplementedError):
        gw.condition_holds("IpAddress", {"aws:SourceIp": "10.0.0.0/8"}, context)


def test_deny_wins_and_not_resource_excludes():
    context = {"aws:PrincipalArn": "arn:aws:iam::123456789012:user/u"}
    allow = {"Effect": "Allow", "Principal": "*", "Action": "execute-api:*", "Resource": "arn:x/*"}
    deny = {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "execute-api:Invoke", "NotResource": ["arn:x/GET/*"]}
    policy = {"Statement": [allow, deny]}
    assert gw.evaluate(policy, "execute-api:Invoke", "arn:x/POST/a", context) == "Deny"
    assert gw.evaluate(policy, "execute-api:Invoke", "arn:x/GET/a", context) == "Allow"
    assert gw.evaluate(None, "execute-api:Invoke", "arn:x/GET/a", context) is None
    assert gw.evaluate({"Statement": [deny]}, "execute-api:Invoke", "arn:x/GET/a", context) is None


def test_principal_arn_of_a_session_is_its_role():
    assert gw.principal_arn(ON_CALL) == f"arn:aws:iam::{ACCOUNT}:role/HyperPodOnCallEU"
    assert gw.principal_arn(TWIN_OPERATOR) == TWIN_OPERATOR
