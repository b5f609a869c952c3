"""Authority per cluster over the Slurm bridge's routes and on-demand checks: `hyperpod-dhc:slurm-bridges` and
`hyperpod-dhc:check-requesters`, the statements they add to the API's resource policy, and the alarm on a
silent bridge.

Red team, turn 3, finding 2: `SlurmBridgePolicy` allows both bridge routes on `clusters/*`, so any cluster's
bridge role (a job on one of its nodes, through IMDS) reported another cluster's nodes busy every 4 minutes for
12 hours and kept them unchecked and drained; `POST /clusters/{cluster}/checks` was open to every principal
with `execute-api:Invoke`. The policy is pinned statement by statement and evaluated with the evaluator the
twin answers with (tests/harness/api_gateway.py); through the real handlers and the twin's clock:
tests/integration/test_cluster_authority.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import aws_cdk as cdk
import pytest

from hyperpod_dhc.deephealth.domain.policy import ConfigError
from hyperpod_dhc.infra.controller_config import BREAKER_RESETTERS_KEY, CHECK_REQUESTERS_KEY, SLURM_BRIDGES_KEY
from hyperpod_dhc.infra.operations_dashboard import BRIDGE_REPORTS_METRIC, BRIDGE_SILENT_PERIODS
from hyperpod_dhc.infra.operator_api import (
    BRIDGE_ROUTES,
    CHECKS_ROUTE,
    POLICY_LENGTH_QUOTA,
    RESET_ROUTE,
    ROUTES,
    api_policy,
    policy_length,
)
from tests.harness import api_gateway as gw
from tests.harness import synth
from tests.infra.stacks import controller_stack
from tests.infra.test_breaker_resetters import ROUTE_WORDS, policy, rendered, route_arn
from tests.infra.test_operations import dashboard_body, one, synth_with
from tests.infra.test_stack import resources

ACCOUNT = gw.ACCOUNT
PROD_BRIDGE = f"arn:aws:iam::{ACCOUNT}:role/prod-cluster-execution-role"
DEV_BRIDGE = f"arn:aws:iam::{ACCOUNT}:role/dev-cluster-execution-role"
ON_CALL = f"arn:aws:iam::{ACCOUNT}:role/HyperPodOnCallEU"
ADMIN = f"arn:aws:iam::{ACCOUNT}:user/hpc-admin"
BRIDGES = {"prod": [PROD_BRIDGE], "dev": [DEV_BRIDGE]}
REQUESTERS = {"prod": [ON_CALL], "*": [ADMIN]}
RESETTERS = {"prod": [ON_CALL], "*": [ADMIN]}
CONTEXT = {SLURM_BRIDGES_KEY: BRIDGES, CHECK_REQUESTERS_KEY: REQUESTERS, BREAKER_RESETTERS_KEY: RESETTERS}
# The red team's caller: a session of cluster dev's bridge role (an instance of its controller group).
DEV_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/dev-cluster-execution-role/i-0feedfacecafe0000"
PROD_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/prod-cluster-execution-role/i-0123456789abcdef0"
ON_CALL_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/HyperPodOnCallEU/alice"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:user/operator"
CLUSTERS = ("prod", "dev", "train-b", *ROUTE_WORDS)  # configured, configured, neither, and route words
GUARDED = {*BRIDGE_ROUTES, CHECKS_ROUTE, RESET_ROUTE}
DENY = {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "execute-api:Invoke"}


def at(route: tuple[str, str], cluster: str) -> str:
    """A route's method ARN (rendered as in the template) for one cluster."""
    return route_arn(route[0], route[1].replace("{cluster}", cluster))


def denied(caller: str, method: str, path: str) -> tuple[int, dict[str, str]]:
    """API Gateway's answer to an explicit deny of the resource policy."""
    arn = f"arn:aws:execute-api:{gw.REGION}:{ACCOUNT}:{gw.API_ID}/{gw.STAGE}/{method}{path}"
    message = (
        f"User: {caller} is not authorized to perform: execute-api:Invoke on resource: {arn} with an explicit deny"
    )
    return 403, {"Message": message}


@pytest.fixture(scope="module")
def configured() -> dict[str, Any]:
    return synth_with(CONTEXT)


# ---------------------------------------------------------------- the keys


def test_cdk_json_ships_empty_maps_documented_in_its_comment() -> None:
    context = synth.cdk_context()
    for key in (SLURM_BRIDGES_KEY, CHECK_REQUESTERS_KEY):
        assert context[key] == {}, key
        assert key in context["//"], key


@pytest.mark.parametrize("key", [SLURM_BRIDGES_KEY, CHECK_REQUESTERS_KEY])
@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ("{not json", "not valid JSON"),
        (["prod"], "must be a map"),
        ({"prod/gpu": [PROD_BRIDGE]}, "neither a cluster name"),
        ({"prod": []}, "non-empty list"),
        ({"prod": ["*"]}, "not an IAM role or user ARN pattern"),
        ({"prod": [PROD_SESSION]}, "name its role"),
    ],
)
def test_a_bad_map_fails_synth_naming_the_key(key: str, bad: Any, named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)) as err:
        controller_stack(synth.app({key: bad}))
    assert named in str(err.value)


@pytest.mark.parametrize("key", [SLURM_BRIDGES_KEY, CHECK_REQUESTERS_KEY])
def test_a_cluster_that_is_not_watched_fails_synth(key: str) -> None:
    context = {**synth.config_with(clusters=["prod"]), key: {"prdo": [PROD_BRIDGE]}}
    with pytest.raises(ConfigError, match=re.escape(key) + r'.*cluster "prdo" is not one of the watched clusters'):
        controller_stack(synth.app(context))


# ---------------------------------------------------------------- the resource policy


def test_shipped_empty_nobody_may_call_a_bridge_route_or_queue_checks(template_json) -> None:
    for caller in (OPERATOR, PROD_SESSION, ON_CALL_SESSION):
        for cluster in CLUSTERS:
            for method, path in (*BRIDGE_ROUTES, CHECKS_ROUTE):
                concrete = path.replace("{cluster}", cluster)
                assert gw.refusal(template_json, method, concrete, caller) == denied(caller, method, concrete)


def test_configured_one_deny_per_set_of_principals_and_per_set_of_every_cluster_patterns(configured) -> None:
    assert [rendered(s) for s in policy(configured)] == [
        {  # prod's resetters are its check requesters: one statement for both routes
            **DENY,
            "Sid": "ClusterRoutes1OnlyByTheirPrincipals",
            "Resource": [at(RESET_ROUTE, "prod"), at(CHECKS_ROUTE, "prod")],
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": sorted([ON_CALL, ADMIN])}},
        },
        {
            **DENY,
            "Sid": "ClusterRoutes2OnlyByTheirPrincipals",
            "Resource": [at(route, "dev") for route in BRIDGE_ROUTES],
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": [DEV_BRIDGE]}},
        },
        {
            **DENY,
            "Sid": "ClusterRoutes3OnlyByTheirPrincipals",
            "Resource": [at(route, "prod") for route in BRIDGE_ROUTES],
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": [PROD_BRIDGE]}},
        },
        {  # every other cluster's reset and checks: the "*" patterns of both keys are the same
            **DENY,
            "Sid": "OtherClusters1OnlyByPrincipalsOfAll",
            "NotResource": [route_arn(m, p) for m, p in ROUTES if (m, p) not in (RESET_ROUTE, CHECKS_ROUTE)]
            + [at(RESET_ROUTE, "prod"), at(CHECKS_ROUTE, "prod")],
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": [ADMIN]}},
        },
        {  # every other cluster's bridge routes: nobody's (no "*" bridge)
            **DENY,
            "Sid": "OtherClusters2OnlyByPrincipalsOfAll",
            "NotResource": [route_arn(m, p) for m, p in ROUTES if (m, p) not in BRIDGE_ROUTES]
            + [at(route, c) for c in ("dev", "prod") for route in BRIDGE_ROUTES],
        },
    ]


@pytest.mark.parametrize(
    ("caller", "bridge", "checks", "reset"),
    [
        (PROD_SESSION, {"prod"}, set(), set()),
        (DEV_SESSION, {"dev"}, set(), set()),  # not prod's: the red team's report is refused
        (f"arn:aws:sts::{ACCOUNT}:assumed-role/prod-cluster-execution-role-2/x", set(), set(), set()),  # anchored
        ("arn:aws:sts::999999999999:assumed-role/prod-cluster-execution-role/x", set(), set(), set()),
        (ON_CALL_SESSION, set(), {"prod"}, {"prod"}),
        (ADMIN, set(), set(CLUSTERS), set(CLUSTERS)),  # "*": every cluster, configured or not; no bridge
        (OPERATOR, set(), set(), set()),
    ],
)
def test_who_may_call_which_guarded_route_of_which_cluster(
    configured, caller: str, bridge: set[str], checks: set[str], reset: set[str]
) -> None:
    may = {**dict.fromkeys(BRIDGE_ROUTES, bridge), CHECKS_ROUTE: checks, RESET_ROUTE: reset}
    for (method, path), clusters in may.items():
        for cluster in CLUSTERS:
            concrete = path.replace("{cluster}", cluster)
            refused = gw.refusal(configured, method, concrete, caller)
            assert refused == (None if cluster in clusters else denied(caller, method, concrete)), (method, concrete)
    for method, path in ROUTES:
        if (method, path) not in GUARDED:  # the reads stay IAM auth's alone
            for cluster in ("prod", "dev", "train-b"):
                concrete = path.replace("{cluster}", cluster).replace("{node}", "n-1")
                assert gw.refusal(configured, method, concrete, caller) is None, (method, concrete)


def test_another_clusters_bridge_role_posting_busy_is_refused_as_api_gateway_does(configured) -> None:
    occupancy = "/clusters/prod/slurm/occupancy"
    refused = gw.refusal(configured, "POST", occupancy, DEV_SESSION)
    assert refused == (
        403,
        {
            "Message": f"User: {DEV_SESSION} is not authorized to perform: execute-api:Invoke on resource: "
            f"arn:aws:execute-api:us-east-1:{ACCOUNT}:local/v1/POST/clusters/prod/slurm/occupancy "
            "with an explicit deny"
        },
    )
    assert gw.refusal(configured, "GET", "/clusters/prod/slurm", DEV_SESSION)[0] == 403  # nor its inventory
    assert gw.refusal(configured, "POST", "/clusters/dev/slurm/occupancy", DEV_SESSION) is None
    assert gw.refusal(configured, "POST", occupancy, PROD_SESSION) is None


def test_a_bridge_role_for_every_cluster_is_a_star_pattern() -> None:
    shared = synth_with({SLURM_BRIDGES_KEY: {"*": [PROD_BRIDGE]}})
    for cluster in CLUSTERS:
        for method, path in BRIDGE_ROUTES:
            assert gw.refusal(shared, method, path.replace("{cluster}", cluster), PROD_SESSION) is None
            assert gw.refusal(shared, method, path.replace("{cluster}", cluster), DEV_SESSION)[0] == 403
    assert not alarms(shared)  # "*" names no cluster: nothing to alarm on


def test_a_changed_map_is_a_new_deployment_of_the_stage(template_json, configured) -> None:
    (deployment,) = resources(template_json, "AWS::ApiGateway::Deployment")
    for context in ({SLURM_BRIDGES_KEY: BRIDGES}, {CHECK_REQUESTERS_KEY: REQUESTERS}):
        (redeployment,) = resources(synth_with(context), "AWS::ApiGateway::Deployment")
        assert deployment != redeployment, context


def measured(context: dict[str, dict[str, list[str]]]) -> int:
    """POLICY_LENGTH_QUOTA's measure of the policy of ``context`` (keys as in cdk.json)."""
    stack = cdk.Stack(cdk.App(), "Measure")
    return policy_length(stack, api_policy(context))


def own(n: int, who: str) -> dict[str, list[str]]:
    return {f"cluster-{i:02d}": [f"arn:aws:iam::{ACCOUNT}:role/{who}-{i:02d}/*"] for i in range(n)}


EVERYONE = {"*": [ON_CALL]}


@pytest.mark.parametrize(
    ("fits", "context"),
    [  # the capacities the module doc of infra/hyperpod_dhc/infra/operator_api.py and cdk.json state
        (17, lambda n: {BREAKER_RESETTERS_KEY: own(n, "OnCall")}),
        (12, lambda n: {SLURM_BRIDGES_KEY: own(n, "Exec")}),
        (
            5,
            lambda n: {
                BREAKER_RESETTERS_KEY: own(n, "Reset"),
                SLURM_BRIDGES_KEY: own(n, "Exec"),
                CHECK_REQUESTERS_KEY: own(n, "Check"),
            },
        ),
        (
            6,
            lambda n: {
                BREAKER_RESETTERS_KEY: own(n, "OnCall"),
                SLURM_BRIDGES_KEY: own(n, "Exec"),
                CHECK_REQUESTERS_KEY: own(n, "OnCall"),
            },
        ),
        (
            10,
            lambda n: {
                BREAKER_RESETTERS_KEY: EVERYONE,
                SLURM_BRIDGES_KEY: own(n, "Exec"),
                CHECK_REQUESTERS_KEY: EVERYONE,
            },
        ),
    ],
)
def test_how_many_clusters_fit_the_quota(fits: int, context: Any) -> None:
    assert measured(context(fits)) <= POLICY_LENGTH_QUOTA < measured(context(fits + 1))


def test_shipped_empty_the_policy_is_short() -> None:
    assert measured({}) < 800  # one Deny; its NotResource lists the routes no key guards (10 of them)


def test_maps_beyond_the_quota_fail_synth_naming_the_keys_set() -> None:
    context = {SLURM_BRIDGES_KEY: own(13, "Exec"), CHECK_REQUESTERS_KEY: EVERYONE}
    pattern = re.escape(f'context keys "{SLURM_BRIDGES_KEY}", "{CHECK_REQUESTERS_KEY}"') + r".* characters, above"
    with pytest.raises(ConfigError, match=pattern):
        controller_stack(synth.app(context))


# ---------------------------------------------------------------- the bridge-silence alarm


def alarms(template_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Cluster -> properties of its silent-bridge alarm."""
    out = {}
    for alarm in resources(template_json, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if "Metrics" in props and props["Metrics"][0]["MetricStat"]["Metric"]["MetricName"] == BRIDGE_REPORTS_METRIC:
            dimensions = {d["Name"]: d["Value"] for d in props["Metrics"][0]["MetricStat"]["Metric"]["Dimensions"]}
            out[dimensions["cluster"]] = props
        else:
            assert props.get("MetricName") != BRIDGE_REPORTS_METRIC, props
    return out


def test_no_bridge_named_no_alarm(template_json) -> None:
    assert not alarms(template_json)
    _, body = dashboard_body(template_json)
    assert BRIDGE_REPORTS_METRIC not in body


def test_each_named_clusters_bridge_alarms_when_it_sent_no_report_for_three_periods(configured) -> None:
    topic, _ = one(configured, "AWS::SNS::Topic")
    found = alarms(configured)
    assert set(found) == {"dev", "prod"}
    for cluster, props in found.items():
        (query,) = props["Metrics"]
        assert query["MetricStat"] == {
            "Metric": {
                "Namespace": "HyperPodDHC",
                "MetricName": BRIDGE_REPORTS_METRIC,
                "Dimensions": [{"Name": "cluster", "Value": cluster}, {"Name": "service", "Value": "hyperpod-dhc"}],
            },
            "Period": 300,
            "Stat": "Sum",
        }
        assert props["ComparisonOperator"] == "LessThanThreshold" and props["Threshold"] == 1
        assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == BRIDGE_SILENT_PERIODS == 3
        assert props["TreatMissingData"] == "breaching"  # silence is the signal
        assert props["AlarmActions"] == [{"Ref": topic}]
        assert props["AlarmName"] == f"HyperPodDhc-slurm-bridge-silent-{cluster}"  # the topic policy's SourceArn
        assert cluster in props["AlarmDescription"] and SLURM_BRIDGES_KEY in props["AlarmDescription"]


def test_the_dashboard_graphs_each_named_clusters_alarm_and_lists_it(configured) -> None:
    _, body = dashboard_body(configured)
    widgets = json.loads(re.sub(r'"<([\w.:]+)>"', r'"\1"', body))["widgets"]  # a reference: its logical id
    by_cluster = {
        cluster: lid
        for lid, alarm in resources(configured, "AWS::CloudWatch::Alarm").items()
        for cluster in ("dev", "prod")
        if alarm["Properties"]["AlarmName"].endswith(f"-slurm-bridge-silent-{cluster}")
    }
    for cluster, lid in by_cluster.items():
        (widget,) = [w for w in widgets if w["properties"].get("title") == f"Slurm bridge reports — {cluster}"]
        # An alarm widget: the alarm's metric (SlurmBridgeReports of the cluster), its threshold and its state.
        assert widget["properties"]["annotations"]["alarms"] == [f"{lid}.Arn"], widget
    (status,) = [w for w in widgets if w["type"] == "alarm"]
    assert set(by_cluster.values()) <= {arn.removesuffix(".Arn") for arn in status["properties"]["alarms"]}
