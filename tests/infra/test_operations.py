"""The operators' view and control: REST API, notifications topic, dashboard and alarms, audit queries."""

from __future__ import annotations

import json
import os
import re
from typing import Any
from unittest import mock

import pytest
from aws_cdk.assertions import Template

from hyperpod_dhc.deephealth.domain.nodes import Verdict
from hyperpod_dhc.deephealth.domain.policy import ConfigError
from hyperpod_dhc.infra.audit_queries import NAMES as QUERY_NAMES
from hyperpod_dhc.infra.controller_config import NOTIFICATION_EMAIL_KEY, SLURM_BRIDGES_KEY
from hyperpod_dhc.infra.controller_functions import FUNCTIONS
from hyperpod_dhc.infra.operations_dashboard import BAD_INPUT_METRICS, BRIDGE_BEHIND_S, RECOVERY_METRICS
from hyperpod_dhc.infra.operator_api import ROUTES, openapi_routes
from tests.harness import synth
from tests.infra.stacks import controller_stack
from tests.infra.test_stack import as_list, function_statements, functions, render, resources

# What the Api handler's module needs in its environment to be imported (it builds its dependencies then).
API_ENV = {
    "TABLE_NAME": "-",
    "CONFIG_PARAMETER_NAME": "-",
    "ROUND_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:-",
}
VERDICT_METRICS = [f"Verdict_{v.value}" for v in Verdict]  # what the controller counts, one per verdict


def handler_routes() -> set[tuple[str, str]]:
    """(HTTP method, path) of every route of the Api handler's resolver, now (not the committed document's)."""
    with mock.patch.dict(os.environ, API_ENV):
        from hyperpod_dhc.deephealth.handlers.api import openapi_json

        return set(openapi_routes(json.loads(openapi_json())))


def one(template_json: dict[str, Any], type_: str) -> tuple[str, dict[str, Any]]:
    ((lid, res),) = resources(template_json, type_).items()
    return lid, res["Properties"]


def method_paths(template_json: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(HTTP method, resource path) -> properties of every AWS::ApiGateway::Method."""
    api, _ = one(template_json, "AWS::ApiGateway::RestApi")
    api_resources = resources(template_json, "AWS::ApiGateway::Resource")

    def path(resource_id: Any) -> str:
        if resource_id == {"Fn::GetAtt": [api, "RootResourceId"]}:
            return ""
        props = api_resources[resource_id["Ref"]]["Properties"]
        return f"{path(props['ParentId'])}/{props['PathPart']}"

    return {
        (props["HttpMethod"], path(props["ResourceId"]) or "/"): props
        for props in (m["Properties"] for m in resources(template_json, "AWS::ApiGateway::Method").values())
    }


def synth_with(context: dict[str, Any]) -> dict[str, Any]:
    return Template.from_stack(controller_stack(synth.app(context))).to_json()


# ---------------------------------------------------------------- operator API


def test_api_serves_exactly_the_handler_routes(template_json: dict[str, Any]) -> None:
    """A route of the resolver that API Gateway lacks answers 403 once deployed; one API Gateway has and the
    resolver lacks answers 404. Both fail here (run `make openapi` after changing the routes)."""
    routes = handler_routes()
    assert routes
    synthesized = set(method_paths(template_json))
    assert not routes - synthesized, f"routes of handlers/api.py missing from the API: {sorted(routes - synthesized)}"
    assert not synthesized - routes, f"API methods handlers/api.py does not serve: {sorted(synthesized - routes)}"


def test_every_method_is_iam_authorized_lambda_proxy(template_json: dict[str, Any]) -> None:
    api_function = next(lid for lid, res in resources(template_json, "AWS::Lambda::Function").items()
                        if res["Properties"]["Handler"] == FUNCTIONS["Api"].handler)  # fmt: skip
    methods = resources(template_json, "AWS::ApiGateway::Method")
    assert len(methods) == len(ROUTES)
    for lid, method in methods.items():
        props = method["Properties"]
        assert props["AuthorizationType"] == "AWS_IAM", lid
        assert props["Integration"]["Type"] == "AWS_PROXY", lid
        assert f"<{api_function}.Arn>" in render(props["Integration"]["Uri"]), lid


def test_api_gateway_may_invoke_the_api_function_only_per_route_of_the_stage(template_json: dict[str, Any]) -> None:
    api, _ = one(template_json, "AWS::ApiGateway::RestApi")
    stage, _ = one(template_json, "AWS::ApiGateway::Stage")
    sources = {
        render(p["Properties"]["SourceArn"]).split(f":<{api}>/<{stage}>/", 1)[1]
        for p in resources(template_json, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
    }  # no test-invoke permissions (they would name no stage)
    assert sources == {method + re.sub(r"\{\w+\}", "*", path) for method, path in ROUTES}


def test_stage_v1_logs_traces_and_throttles(template_json: dict[str, Any]) -> None:
    _, stage = one(template_json, "AWS::ApiGateway::Stage")
    assert stage["StageName"] == "v1"
    assert stage["TracingEnabled"] is True
    (settings,) = stage["MethodSettings"]
    assert settings["ResourcePath"] == "/*" and settings["HttpMethod"] == "*"
    assert settings["LoggingLevel"] == "ERROR" and settings["DataTraceEnabled"] is False
    assert (settings["ThrottlingRateLimit"], settings["ThrottlingBurstLimit"]) == (20, 40)
    access = stage["AccessLogSetting"]
    group = re.search(r"log-group:<(\w+)>", render(access["DestinationArn"])).group(1)
    days = synth.cdk_context()["hyperpod-dhc"]["log_retention_days"]
    assert template_json["Resources"][group]["Properties"]["RetentionInDays"] == days
    fields = json.loads(access["Format"].replace("$context.error.messageString", '"x"'))
    assert {"requestId", "status", "userArn", "resourcePath", "httpMethod"} <= set(fields)
    assert not resources(template_json, "AWS::ApiGateway::Account")  # the account-wide role is not ours


def test_api_outputs(template_json: dict[str, Any]) -> None:
    api, _ = one(template_json, "AWS::ApiGateway::RestApi")
    stage, _ = one(template_json, "AWS::ApiGateway::Stage")
    outputs = template_json["Outputs"]
    assert outputs["ApiId"]["Value"] == {"Ref": api}
    endpoint = render(outputs["ApiEndpoint"]["Value"])
    assert endpoint.startswith(f"https://<{api}>.execute-api.") and endpoint.endswith(f"/<{stage}>/")
    assert not [name for name in outputs if name.startswith("OperatorApi")]  # RestApi's own output is removed


# ---------------------------------------------------------------- notifications


def test_topic_is_encrypted_with_a_rotating_customer_key(template_json: dict[str, Any]) -> None:
    _, topic = one(template_json, "AWS::SNS::Topic")
    key = topic["KmsMasterKeyId"]["Fn::GetAtt"][0]  # its own key (the dead-letter queues have another)
    key_props = resources(template_json, "AWS::KMS::Key")[key]["Properties"]
    assert key_props["EnableKeyRotation"] is True
    services = {
        s["Principal"]["Service"]: s for s in key_props["KeyPolicy"]["Statement"] if "Service" in s.get("Principal", {})
    }
    assert set(services) == {"cloudwatch.amazonaws.com", "sns.amazonaws.com"}
    for statement in services.values():
        assert set(as_list(statement["Action"])) == {"kms:Decrypt", "kms:GenerateDataKey*"}
        topic_arn = render(statement["Condition"]["StringEquals"]["kms:EncryptionContext:aws:sns:topicArn"])
        assert topic_arn.endswith(":HyperPodDhc-notifications") and topic["TopicName"] == "HyperPodDhc-notifications"


def test_topic_denies_plain_http_and_lets_only_this_stacks_alarms_publish(template_json: dict[str, Any]) -> None:
    topic, _ = one(template_json, "AWS::SNS::Topic")
    _, policy = one(template_json, "AWS::SNS::TopicPolicy")
    assert policy["Topics"] == [{"Ref": topic}]
    statements = policy["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
    )
    (alarms,) = [s for s in statements if s["Effect"] == "Allow"]
    assert alarms["Principal"] == {"Service": "cloudwatch.amazonaws.com"} and alarms["Action"] == "sns:Publish"
    assert render(alarms["Condition"]["ArnLike"]["aws:SourceArn"]).endswith(":alarm:HyperPodDhc-*")


def test_every_function_may_publish_and_knows_the_topic(template_json: dict[str, Any]) -> None:
    topic, topic_props = one(template_json, "AWS::SNS::Topic")
    key = topic_props["KmsMasterKeyId"]["Fn::GetAtt"][0]
    assert template_json["Outputs"]["NotificationsTopicArn"]["Value"] == {"Ref": topic}
    for name, props in functions(template_json).items():
        assert props["Environment"]["Variables"]["NOTIFICATIONS_TOPIC_ARN"] == {"Ref": topic}, name
        granted = {
            (a, render(r))
            for s in function_statements(template_json, name)
            for a in as_list(s["Action"])
            if a.startswith(("sns:", "kms:"))
            for r in as_list(s["Resource"])
            if render(r) in (f"<{topic}>", f"<{key}.Arn>")
        }
        key_arn = f"<{key}.Arn>"
        assert granted == {("sns:Publish", f"<{topic}>"), ("kms:GenerateDataKey", key_arn), ("kms:Decrypt", key_arn)}


def test_no_email_subscription_without_the_context_key(template_json: dict[str, Any]) -> None:
    assert NOTIFICATION_EMAIL_KEY not in synth.cdk_context()
    assert not resources(template_json, "AWS::SNS::Subscription")


def test_email_subscription_when_the_context_key_is_set() -> None:
    template_json = synth_with({NOTIFICATION_EMAIL_KEY: "hpc-oncall@example.com"})
    topic, _ = one(template_json, "AWS::SNS::Topic")
    _, subscription = one(template_json, "AWS::SNS::Subscription")
    assert subscription == {"Protocol": "email", "Endpoint": "hpc-oncall@example.com", "TopicArn": {"Ref": topic}}


@pytest.mark.parametrize("bad", ["oncall", "oncall@example", "on call@example.com", "a@b@example.com", 42])
def test_bad_notification_email_fails_synth_naming_the_key(bad: Any) -> None:
    with pytest.raises(ConfigError, match=re.escape(NOTIFICATION_EMAIL_KEY)):
        controller_stack(synth.app({NOTIFICATION_EMAIL_KEY: bad}))


# ---------------------------------------------------------------- dashboard and alarms


def dashboard_body(template_json: dict[str, Any]) -> tuple[str, str]:
    _, dashboard = one(template_json, "AWS::CloudWatch::Dashboard")
    return dashboard["DashboardName"], render(dashboard["DashboardBody"])


def controller_metrics(body: str) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    """(metric name, dimensions) of every HyperPodDHC metric on the dashboard."""
    widgets = json.loads(re.sub(r"<[\w.:]+>", "x", body))["widgets"]
    out = set()
    for widget in widgets:
        for line in widget["properties"].get("metrics", []):
            parts = [p for p in line if isinstance(p, str)]
            if parts and parts[0] == "HyperPodDHC":
                dims = parts[2:]
                out.add((parts[1], frozenset(zip(dims[::2], dims[1::2], strict=True))))
    return out


SERVICE = ("service", "hyperpod-dhc")


def test_dashboard_shows_every_controller_metric(template_json: dict[str, Any]) -> None:
    name, body = dashboard_body(template_json)
    assert name == "HyperPodDhc-operations"
    shown = controller_metrics(body)
    metrics = [
        "NodesChecked",
        *VERDICT_METRICS,
        *RECOVERY_METRICS,
        "NodesQuarantined",
        "ReadyToVerdictSeconds",
        *BAD_INPUT_METRICS,
        "Throttled",
    ]
    for metric in metrics:
        assert (metric, frozenset({SERVICE})) in shown, metric
    assert {dims for _, dims in shown} == {frozenset({SERVICE})}  # clusters: "all" has no per-cluster rows
    for metric in ("ExecutionsStarted", "ExecutionsSucceeded", "ExecutionsFailed", "RUNNING_SUM"):
        assert metric in body, metric
    assert body.count('"ApproximateNumberOfMessagesVisible"') == len(resources(template_json, "AWS::SQS::Queue"))
    assert body.count('"Throttles"') == len(FUNCTIONS)
    assert '"p50"' in body and '"p95"' in body


def test_named_clusters_get_a_row_each(scoped_template_json: dict[str, Any]) -> None:
    _, body = dashboard_body(scoped_template_json)
    shown = controller_metrics(body)
    node_metrics = ["NodesChecked", *VERDICT_METRICS, *RECOVERY_METRICS, "NodesQuarantined"]
    for cluster in ("train-a", "train-b"):
        for metric in [*node_metrics, "ReadyToVerdictSeconds"]:
            assert (metric, frozenset({SERVICE, ("cluster", cluster)})) in shown, (cluster, metric)


def alarms_by_metric(template_json: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for alarm in resources(template_json, "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        metric = props.get("MetricName") or props["Metrics"][0]["MetricStat"]["Metric"]["MetricName"]
        out.setdefault(metric, []).append(props)
    return out


CONTROLLER_ALARMS = {  # metric -> (alarms, threshold): every alarm but the Slurm bridges'
    "ExecutionsFailed": (1, 1),
    "ExecutionsTimedOut": (1, 1),
    "ExecutionsAborted": (1, 1),
    "ApproximateNumberOfMessagesVisible": (None, 1),  # one per dead-letter queue
    "Throttled": (1, 10),
    "NodesQuarantined": (1, 1),
    "5XXError": (1, 5),
    "Errors": (1, 1),
}


def test_the_controller_alarms_notify_the_topic(template_json: dict[str, Any]) -> None:
    topic, _ = one(template_json, "AWS::SNS::Topic")
    alarms = alarms_by_metric(template_json)
    queues = resources(template_json, "AWS::SQS::Queue")
    assert {k: len(v) for k, v in alarms.items()} == {
        metric: len(queues) if count is None else count for metric, (count, _) in CONTROLLER_ALARMS.items()
    }
    for metric, found in alarms.items():
        for props in found:
            assert props["AlarmActions"] == [{"Ref": topic}], metric
            assert props["TreatMissingData"] == "notBreaching", metric
            assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold", metric
            assert props["Threshold"] == CONTROLLER_ALARMS[metric][1], metric
            assert props["EvaluationPeriods"] == 1, metric
            assert props["AlarmName"].startswith("HyperPodDhc-"), metric  # the topic policy's SourceArn
    watched = {
        props["Metrics"][0]["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for props in alarms["ApproximateNumberOfMessagesVisible"]
    }
    assert watched == set(queues)
    (throttled,) = alarms["Throttled"]
    stat = throttled["Metrics"][0]["MetricStat"]
    assert (stat["Period"], stat["Stat"]) == (300, "Sum")
    assert stat["Metric"]["Namespace"] == "HyperPodDHC"


def alarm_metric(props: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(namespace, metric name, dimensions by name) of a single-metric alarm."""
    stat = props["Metrics"][0]["MetricStat"] if "Metrics" in props else props
    metric = stat.get("Metric", stat)
    return metric["Namespace"], metric["MetricName"], {d["Name"]: d["Value"] for d in metric["Dimensions"]}


def test_the_round_api_and_api_function_alarms_watch_this_stacks_resources(template_json: dict[str, Any]) -> None:
    """Timed-out and aborted rounds, the operator API's 5xx and the Api function's errors: each on the service
    metric of this stack's own resource (a wrong dimension would watch nothing and never fire)."""
    alarms = alarms_by_metric(template_json)
    machine, _ = one(template_json, "AWS::StepFunctions::StateMachine")
    _, rest_api = one(template_json, "AWS::ApiGateway::RestApi")
    (api_function,) = [
        lid
        for lid, res in resources(template_json, "AWS::Lambda::Function").items()
        if res["Properties"].get("Handler") == "hyperpod_dhc.deephealth.handlers.api.lambda_handler"
    ]
    for metric in ("ExecutionsTimedOut", "ExecutionsAborted"):
        (props,) = alarms[metric]
        assert alarm_metric(props) == ("AWS/States", metric, {"StateMachineArn": {"Ref": machine}}), metric
    (server_errors,) = alarms["5XXError"]
    assert alarm_metric(server_errors) == ("AWS/ApiGateway", "5XXError", {"ApiName": rest_api["Name"]})
    (errors,) = alarms["Errors"]
    assert alarm_metric(errors) == ("AWS/Lambda", "Errors", {"FunctionName": {"Ref": api_function}})


# ---------------------------------------------------------------- the Slurm bridges' alarms

BRIDGE_ROLE = "arn:aws:iam::123456789012:role/prod-cluster-execution-role"
# name -> (metric, statistic, comparison, threshold, missing data), of a cluster's alarm (`-<cluster>`) or stack-wide
BRIDGE_STATUS = {
    "slurm-bridge-behind": ("SlurmBridgeBehindSeconds", "Maximum", "GreaterThanThreshold", 180, "notBreaching"),
    "slurmctld-unreachable": ("SlurmctldUnreachable", "Maximum", "GreaterThanOrEqualToThreshold", 1, "notBreaching"),
    "slurm-bridge-refused": ("SlurmBridgeUpdatesRefused", "Maximum", "GreaterThanOrEqualToThreshold", 1,
                             "notBreaching"),
}  # fmt: skip
PER_CLUSTER = {
    "slurm-bridge-silent": ("SlurmBridgeReports", "Sum", "LessThanThreshold", 1, "breaching"),
    **BRIDGE_STATUS,
}
STACK_WIDE = {"slurm-bridge-silent": ("SlurmBridgeSilent", "Maximum", "GreaterThanOrEqualToThreshold", 1,
                                      "notBreaching"), **BRIDGE_STATUS}  # fmt: skip


@pytest.fixture(scope="module")
def bridged() -> dict[str, Any]:
    """Bridges named for prod and dev, and a "*" entry (every other cluster's bridge, by one role)."""
    return synth_with({SLURM_BRIDGES_KEY: {"prod": [BRIDGE_ROLE], "dev": [BRIDGE_ROLE], "*": [BRIDGE_ROLE]}})


def bridge_alarms(template_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Alarm name without the stack's prefix -> properties, of every Slurm bridge alarm."""
    out = {}
    for props in (a["Properties"] for a in resources(template_json, "AWS::CloudWatch::Alarm").values()):
        name = props["AlarmName"].removeprefix("HyperPodDhc-")
        if "slurm" in name:
            out[name] = props
    return out


def test_no_bridge_no_bridge_alarm(template_json: dict[str, Any]) -> None:
    assert not bridge_alarms(template_json)


def test_each_named_cluster_gets_four_bridge_alarms_and_a_star_entry_four_stack_wide(bridged: dict[str, Any]) -> None:
    topic, _ = one(bridged, "AWS::SNS::Topic")
    found = bridge_alarms(bridged)
    want = {f"{what}-{cluster}": (spec, cluster) for what, spec in PER_CLUSTER.items() for cluster in ("dev", "prod")}
    want |= {what: (spec, None) for what, spec in STACK_WIDE.items()}
    assert set(found) == set(want)
    assert BRIDGE_BEHIND_S == 3 * 60  # 3 syncs
    for name, ((metric, stat, comparison, threshold, missing), cluster) in want.items():
        props = found[name]
        (query,) = props["Metrics"]
        dims = {d["Name"]: d["Value"] for d in query["MetricStat"]["Metric"]["Dimensions"]}
        assert dims == {"service": "hyperpod-dhc"} | ({"cluster": cluster} if cluster else {}), name
        assert query["MetricStat"]["Metric"]["MetricName"] == metric and query["MetricStat"]["Stat"] == stat, name
        assert query["MetricStat"]["Metric"]["Namespace"] == "HyperPodDHC" and query["MetricStat"]["Period"] == 300
        assert (props["ComparisonOperator"], props["Threshold"], props["TreatMissingData"]) == (
            comparison,
            threshold,
            missing,
        ), name
        assert props["EvaluationPeriods"] == (3 if metric == "SlurmBridgeReports" else 1), name
        assert props["AlarmActions"] == [{"Ref": topic}], name
        assert (cluster or "which") in props["AlarmDescription"] and len(props["AlarmDescription"]) <= 1024, name


def test_a_star_entry_alone_gets_the_stack_wide_alarms_only() -> None:
    found = bridge_alarms(synth_with({SLURM_BRIDGES_KEY: {"*": [BRIDGE_ROLE]}}))
    assert set(found) == set(STACK_WIDE)


def test_the_dashboard_shows_each_bridge_alarm_in_a_row_per_cluster(bridged: dict[str, Any]) -> None:
    _, body = dashboard_body(bridged)
    widgets = json.loads(re.sub(r'"<([\w.:]+)>"', r'"\1"', body))["widgets"]  # a reference: its logical id
    by_name = {
        alarm["Properties"]["AlarmName"].removeprefix("HyperPodDhc-"): lid
        for lid, alarm in resources(bridged, "AWS::CloudWatch::Alarm").items()
    }
    shown = {
        w["properties"]["annotations"]["alarms"][0].removesuffix(".Arn"): (w["properties"]["title"], w["y"])
        for w in widgets
        if w["type"] == "metric" and "alarms" in w["properties"].get("annotations", {})
    }
    rows: dict[str, set[int]] = {}
    for name, lid in by_name.items():
        if "slurm" not in name:
            continue
        cluster = next((c for c in ("dev", "prod") if name.endswith(f"-{c}")), None)
        title, y = shown[lid]
        assert title.endswith(f" — {cluster or 'any cluster'}"), (name, title)
        rows.setdefault(cluster or "*", set()).add(y)
    assert all(len(ys) == 1 for ys in rows.values()) and len({y for ys in rows.values() for y in ys}) == 3
    (status,) = [w for w in widgets if w["type"] == "alarm"]
    assert set(by_name.values()) == {arn.removesuffix(".Arn") for arn in status["properties"]["alarms"]}


# ---------------------------------------------------------------- audit queries


def test_saved_queries_cover_every_controller_log_group(template_json: dict[str, Any]) -> None:
    definitions = resources(template_json, "AWS::Logs::QueryDefinition").values()
    queries = {q["Properties"]["Name"]: q["Properties"] for q in definitions}
    assert (
        set(queries)
        == {
            "hyperpod-dhc/history of one node",
            "hyperpod-dhc/recovery actions",
            "hyperpod-dhc/every decision of one round",
        }
        == set(QUERY_NAMES.values())
    )
    function_logs = sorted(props["LoggingConfig"]["LogGroup"]["Ref"] for props in functions(template_json).values())
    assert len(function_logs) == len(FUNCTIONS)
    for name, query in queries.items():
        assert sorted(g["Ref"] for g in query["LogGroupNames"]) == function_logs, name
        assert '| filter message = "decision"' in query["QueryString"], name
    assert 'decision.node = "<node>"' in queries["hyperpod-dhc/history of one node"]["QueryString"]
    assert "sort @timestamp asc" in queries["hyperpod-dhc/history of one node"]["QueryString"]
    recovery = queries["hyperpod-dhc/recovery actions"]["QueryString"]
    assert all(f'"{a}"' in recovery for a in ("reboot", "replace", "hyperpod", "recovering", "quarantined"))
    assert 'correlation_id = "<round-id>"' in queries["hyperpod-dhc/every decision of one round"]["QueryString"]
