"""The IAM check of the harness (tests/harness/iam.py): the evaluator, the request mapping, and denials answered as
AWS answers them, in each service's own error shape."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.fakes.hyperpod import Clock, FakeHyperPod, GroupSpec
from tests.harness import iam, moto_patches
from tests.harness.engine import ACCOUNT, CONFIG_PARAMETER_NAME, REGION, SCHEDULED_EVENT, TABLE_NAME, Harness
from tests.harness.template import ControllerTemplate

TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE_NAME}"
KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:topic"


def policy(*statements: dict) -> iam.Policy:
    return iam.Policy([{"Effect": "Allow", **s} for s in statements])


# ---------------------------------------------------------------- the evaluator


def test_an_action_no_statement_allows_is_denied():
    p = policy({"Action": ["dynamodb:GetItem"], "Resource": TABLE})
    assert p.decide("dynamodb:GetItem", TABLE) == "allow"
    assert p.decide("dynamodb:PutItem", TABLE) == "implicit-deny"
    assert p.decide("DynamoDB:getitem", TABLE) == "allow", "action names are case-insensitive"


def test_a_resource_outside_the_granted_arns_is_denied():
    p = policy({"Action": "sagemaker:DescribeCluster", "Resource": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/*"})
    assert p.decide("sagemaker:DescribeCluster", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abc123") == "allow"
    assert p.decide("sagemaker:DescribeCluster", f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:cluster/abc") != "allow"
    assert p.decide("dynamodb:GetItem", f"{TABLE}-other") == "implicit-deny"


def test_wildcards_are_iams_not_regular_expressions():
    p = policy({"Action": "logs:FilterLogEvents", "Resource": "arn:aws:logs:*:*:log-group:/a.b/?"})
    assert p.decide("logs:FilterLogEvents", "arn:aws:logs:r:1:log-group:/a.b/x") == "allow"
    assert p.decide("logs:FilterLogEvents", "arn:aws:logs:r:1:log-group:/aXb/x") == "implicit-deny", "'.' is literal"
    assert p.decide("logs:FilterLogEvents", "arn:aws:logs:r:1:log-group:/a.b/xy") == "implicit-deny", "'?' is one"


def test_an_explicit_deny_wins_over_any_allow():
    p = iam.Policy(
        [
            {"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "dynamodb:DeleteItem", "Resource": TABLE},
        ]
    )
    assert p.decide("dynamodb:GetItem", TABLE) == "allow"
    assert p.decide("dynamodb:DeleteItem", TABLE) == "explicit-deny"
    assert p.decide("dynamodb:DeleteItem", f"{TABLE}-other") == "allow", "the deny names one table"


def test_an_allow_whose_condition_is_unmet_does_not_apply_and_a_deny_applies_only_when_met():
    condition = {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
    allow = policy({"Action": "sqs:SendMessage", "Resource": "*", "Condition": condition})
    assert allow.decide("sqs:SendMessage", "q", {"aws:SourceAccount": ACCOUNT}) == "allow"
    assert allow.decide("sqs:SendMessage", "q", {"aws:SourceAccount": "999999999999"}) == "implicit-deny"
    assert allow.decide("sqs:SendMessage", "q") == "implicit-deny", "an absent key does not match"
    deny = iam.Policy(
        [
            {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"},
            {"Effect": "Deny", "Action": "*", "Resource": "*", "Condition": {"ArnLike": {"aws:SourceArn": "arn:x:*"}}},
        ]
    )
    assert deny.decide("sqs:SendMessage", "q", {"aws:SourceArn": "arn:x:rule/a"}) == "explicit-deny"
    assert deny.decide("sqs:SendMessage", "q", {"aws:SourceArn": "arn:y:rule/a"}) == "allow"


def test_what_the_evaluator_cannot_decide_fails_loudly():
    with pytest.raises(iam.UnsupportedPolicy, match="IpAddress"):
        policy({"Action": "*", "Resource": "*", "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}})
    with pytest.raises(iam.UnsupportedPolicy, match="NotResource"):
        policy({"Action": "*", "NotResource": TABLE})


# ---------------------------------------------------------------- requests -> IAM


def request(body: dict | str, url: str = "https://example.amazonaws.com/") -> SimpleNamespace:
    return SimpleNamespace(body=body if isinstance(body, str) else json.dumps(body), url=url, headers={})


WORLD = iam.World(
    ACCOUNT,
    REGION,
    cluster_arn=lambda name: f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/id-of-{name}",
    key_of={TOPIC: KEY}.get,
)


def test_the_ssm_arn_of_a_path_name_has_one_slash():
    (path,) = iam.requests("ssm", "GetParameter", request({"Name": "/hyperpod-dhc/config"}), WORLD)
    assert path == iam.Access("ssm:GetParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/hyperpod-dhc/config")
    (simple,) = iam.requests("ssm", "GetParameter", request({"Name": "HyperPodDhc-Config"}), WORLD)
    assert simple.resource == f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/HyperPodDhc-Config"


def test_publishing_to_an_encrypted_topic_needs_its_key_too():
    body = f"Action=Publish&Version=2010-03-31&TopicArn={TOPIC}&Message=hi"
    assert iam.requests("sns", "Publish", request(body), WORLD) == [
        iam.Access("sns:Publish", TOPIC),
        iam.Access("kms:GenerateDataKey", KEY),
        iam.Access("kms:Decrypt", KEY),
    ]
    plain = body.replace(TOPIC, f"{TOPIC}-plain")
    assert iam.requests("sns", "Publish", request(plain), WORLD) == [iam.Access("sns:Publish", f"{TOPIC}-plain")]


def test_each_operation_maps_to_its_action_and_resource():
    cluster = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/id-of-c"
    assert iam.requests("sagemaker", "ListClusterNodes", request({"ClusterName": "c"}), WORLD) == [
        iam.Access("sagemaker:ListClusterNodes", cluster)
    ]
    assert iam.requests("sagemaker", "ListClusters", request({}), WORLD) == [iam.Access("sagemaker:ListClusters", "*")]
    for operation in ("ListClusterOperations", "DescribeClusterOperation", "ListClusterEvents"):
        assert iam.requests("sagemaker", operation, request({"ClusterName": "c"}), WORLD) == [
            iam.Access(f"sagemaker:{operation}", cluster)
        ]
    batch = request({"RequestItems": {"a": {"Keys": []}, "b": {"Keys": []}}})
    assert [a.resource for a in iam.requests("dynamodb", "BatchGetItem", batch, WORLD)] == [
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/a",
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/b",
    ]
    machine = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:m"
    assert iam.requests("sfn", "StartExecution", request({"stateMachineArn": machine}), WORLD) == [
        iam.Access("states:StartExecution", machine)
    ]
    group = "/aws/sagemaker/Clusters/c/id"
    assert iam.requests("cloudwatch-logs", "FilterLogEvents", request({"logGroupName": group}), WORLD) == [
        iam.Access("logs:FilterLogEvents", f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{group}")
    ]


def test_an_operation_without_a_mapping_fails_loudly():
    with pytest.raises(iam.UnmappedRequest, match="sagemaker:DeleteCluster"):
        iam.requests("sagemaker", "DeleteCluster", request({"ClusterName": "c"}), WORLD)
    with pytest.raises(iam.UnmappedRequest, match="ec2:DescribeInstances"):
        iam.requests("ec2", "DescribeInstances", request("Action=DescribeInstances"), WORLD)


# ---------------------------------------------------------------- the synthesized roles, in the harness


def _function(template: ControllerTemplate, name: str) -> str:
    (fn,) = [f.construct_id for f in template.functions if f.construct_id.endswith(name)]
    return fn


def test_the_synthesized_roles_resolve_to_the_names_the_harness_uses(controller_template):
    names = iam.PhysicalNames(ACCOUNT, REGION, TABLE_NAME, CONFIG_PARAMETER_NAME, "topic")
    authorizer = iam.Authorizer(controller_template.template, names)
    claim = authorizer.functions[_function(controller_template, "ClaimRound")].policy
    parameter = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/{CONFIG_PARAMETER_NAME}"
    assert claim.decide("ssm:GetParameter", parameter) == "allow"
    assert claim.decide("dynamodb:UpdateItem", TABLE) == "allow"
    assert claim.decide("dynamodb:UpdateItem", f"{TABLE}-other") == "implicit-deny"
    assert (
        claim.decide("sagemaker:StartClusterHealthCheck", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/x") != "allow"
    )
    own = f"/aws/lambda/{_function(controller_template, 'ClaimRound')}"
    stream = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{own}:log-stream:s"
    assert claim.decide("logs:PutLogEvents", stream) == "allow"
    assert claim.decide("logs:PutLogEvents", stream.replace("ClaimRound", "PollCheck")) == "implicit-deny"


def test_a_denied_request_gets_access_denied_in_the_services_own_shape(controller_template):
    fake = FakeHyperPod(Clock(), seed=7)
    with Harness(controller_template, fake) as harness:
        fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
        claim = _function(controller_template, "ClaimRound")
        with moto_patches.invocation(claim), pytest.raises(ClientError) as denied:
            boto3.client("sagemaker", region_name=REGION).start_cluster_health_check(
                ClusterName="demo",
                DeepHealthCheckConfigurations=[
                    {"InstanceGroupName": "gpu", "InstanceIds": ["i-0"], "DeepHealthChecks": ["InstanceStress"]}
                ],
            )
        error = denied.value.response
        assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert error["Error"]["Code"] == "AccessDeniedException"
        assert error["Error"]["Message"] == (
            f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{harness.iam.functions[claim].role}/{claim} is not authorized"
            f" to perform: sagemaker:StartClusterHealthCheck on resource: {fake.cluster('demo').arn} because no "
            "identity-based policy allows the sagemaker:StartClusterHealthCheck action"
        )
        assert fake.calls["StartClusterHealthCheck"] == 0, "a refused request never reaches the service"
        report = harness.iam.report()
        assert report["denied"] == 1 and report["calls"]["ClaimRound"] == {"sagemaker:StartClusterHealthCheck": 1}
        boto3.client("sagemaker", region_name=REGION).describe_cluster(ClusterName="demo")  # the harness: never


def _without_statements(template: dict, function: str, action: str) -> ControllerTemplate:
    out = copy.deepcopy(template)
    for res in out["Resources"].values():
        if res["Type"] == "AWS::IAM::Policy" and function in json.dumps(res["Properties"]["Roles"]):
            document = res["Properties"]["PolicyDocument"]
            document["Statement"] = [s for s in document["Statement"] if action not in json.dumps(s["Action"])]
    return ControllerTemplate(out)


@pytest.mark.parametrize(
    ("action", "status", "code"), [("sns:Publish", 403, "AuthorizationError"), ("kms:", 400, "KMSAccessDenied")]
)
def test_sns_refuses_in_its_query_protocol_shape(controller_template, action, status, code):
    template = _without_statements(controller_template.template, "Functions" + "PollCheckRole", action)
    with Harness(template, FakeHyperPod(Clock(), seed=7)) as harness:
        with moto_patches.invocation(_function(template, "PollCheck")), pytest.raises(ClientError) as denied:
            boto3.client("sns", region_name=REGION).publish(TopicArn=harness.topic_arn, Message="{}")
        assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
        assert denied.value.response["Error"]["Code"] == code
        assert harness.notifications() == []


def test_eventbridge_needs_a_lambda_permission_for_the_rule_that_delivers(controller_template):
    template = copy.deepcopy(controller_template.template)
    schedule = [lid for lid, r in template["Resources"].items() if "ScheduleExpression" in r.get("Properties", {})]
    for lid in [lid for lid, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::Permission"]:
        if template["Resources"][lid]["Properties"]["SourceArn"] == {"Fn::GetAtt": [schedule[0], "Arn"]}:
            del template["Resources"][lid]
    with Harness(ControllerTemplate(template), FakeHyperPod(Clock(), seed=7)) as harness:
        with pytest.raises(AssertionError, match="AccessDeniedException"):
            harness.invoke_event(harness.reconcile_arn, SCHEDULED_EVENT)
        assert harness.iam.report()["denials"] == [
            f"EventBridge lambda:InvokeFunction {harness.reconcile_arn} on "
            f"arn:aws:events:{REGION}:{ACCOUNT}:rule/HyperPodDhc-{schedule[0]}: 1"
        ]
    with Harness(controller_template, FakeHyperPod(Clock(), seed=7)) as harness:
        harness.invoke_event(harness.reconcile_arn, SCHEDULED_EVENT)  # the synthesized permission lets it in
        calls = harness.iam.report()["calls"]
        assert calls["EventBridge"] == {"lambda:InvokeFunction": 1}
        assert {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments"} <= set(calls["Reconcile"])


def test_the_state_machine_role_must_grant_invoking_each_task(controller_template):
    template = copy.deepcopy(controller_template.template)
    for res in template["Resources"].values():
        if res["Type"] == "AWS::IAM::Policy" and "StateMachineRole" in json.dumps(res["Properties"]["Roles"]):
            for s in res["Properties"]["PolicyDocument"]["Statement"]:
                if s["Action"] == "lambda:InvokeFunction":
                    s["Resource"] = [r for r in s["Resource"] if "ClaimRound" not in json.dumps(r)]
    fake = FakeHyperPod(Clock(), seed=7)
    with Harness(ControllerTemplate(template), fake, config={"clusters": ["demo"]}) as harness:
        fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
        harness.reconcile()  # records the node and starts a round: its first task cannot be invoked
        harness.wait_for_executions()
        (execution,) = harness.executions()
        assert execution["status"] == "FAILED"
        (denial,) = harness.iam.report()["denials"]
        assert denial.startswith("RoundWorkflow lambda:InvokeFunction on arn:aws:lambda:") and "ClaimRound" in denial
