"""Security properties of the synthesized template: least privilege, encryption, TLS, retention, no secrets.

Each test states one rule over *every* matching resource, so a new resource is covered without a new test:
- no policy allows every action or a whole service; every ``Resource: "*"`` is an acknowledged action that
  supports no resource-level permission; a service principal only gets access bound to our resources;
- the DynamoDB actions granted are exactly the ones the code calls;
- table, topic and queues are encrypted at rest with KMS, every customer-managed key rotates;
- the topic and the queues refuse requests without TLS;
- every log group has a retention, and every function logs to one of them;
- Lambda environments hold only allow-listed, non-secret settings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from hyperpod_dhc.infra.controller_config import FUNCTIONS_DIR
from hyperpod_dhc.infra.controller_functions import TABLE_ACTIONS
from tests.infra.test_stack import as_list, function_statements, functions, render, resources

# Actions that support no resource-level permission: "*" is their only valid resource (Service
# Authorization Reference), and each is acknowledged to cdk-nag with the reason where it is granted.
STAR_RESOURCE_ACTIONS = {
    "xray:PutTraceSegments",  # Lambda / Step Functions active tracing
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "sagemaker:ListClusters",  # Reconcile, only when `clusters` is "all"
    "logs:CreateLogDelivery",  # Step Functions logging to CloudWatch Logs (vended log delivery)
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
}
ENV_ALLOW_LIST = {
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
    "TABLE_NAME",
    "CONFIG_PARAMETER_NAME",
    "ROUND_STATE_MACHINE_ARN",
    "NOTIFICATIONS_TOPIC_ARN",
}
SECRET_LIKE = re.compile(
    r"(?:A3T[A-Z0-9]|AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[A-Z0-9]{16}"  # AWS access key ids
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|(?<![A-Za-z0-9/+=])[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])"  # a 40-character secret access key
    r"|xox[abprs]-|ghp_[A-Za-z0-9]{36}|sk_live_"
    r"|(?i:password|passwd|secret|token|api[_-]?key|private[_-]?key)\s*[=:]"
)
SECRET_NAME = re.compile(r"(?i)secret|password|passwd|token|credential|api_?key|private_?key|access_?key")


def templates(template_json: dict[str, Any], scoped_template_json: dict[str, Any]) -> list[dict[str, Any]]:
    return [template_json, scoped_template_json]  # clusters "all" and a list of names


def identity_statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Statements of every identity policy: AWS::IAM::Policy, ManagedPolicy and roles' inline policies."""
    out = [
        s
        for type_ in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        for p in resources(template, type_).values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    for role in resources(template, "AWS::IAM::Role").values():
        for inline in role["Properties"].get("Policies", []):
            out += inline["PolicyDocument"]["Statement"]
    return out


def resource_policies(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Logical id -> statements of every resource policy: KMS key, SNS topic, SQS queue and REST API policies."""
    out: dict[str, list[dict[str, Any]]] = {}
    for lid, key in resources(template, "AWS::KMS::Key").items():
        out[lid] = key["Properties"]["KeyPolicy"]["Statement"]
    for lid, api in resources(template, "AWS::ApiGateway::RestApi").items():
        out[lid] = api["Properties"]["Policy"]["Statement"]
    for type_ in ("AWS::SNS::TopicPolicy", "AWS::SQS::QueuePolicy"):
        for lid, policy in resources(template, type_).items():
            out[lid] = policy["Properties"]["PolicyDocument"]["Statement"]
    return out


def account_root(principal: Any) -> bool:
    """``arn:<partition>:iam::<this account>:root`` (as CDK renders it)."""
    arn = principal.get("AWS") if isinstance(principal, dict) else None
    parts = arn.get("Fn::Join", [None, []])[1] if isinstance(arn, dict) else []
    return bool(parts) and parts[-1] == ":root" and {"Ref": "AWS::AccountId"} in parts


def service_wide(action: str) -> bool:
    return action == "*" or action.endswith(":*")


# ---------------------------------------------------------------- IAM least privilege


def test_no_identity_policy_allows_every_action_or_a_whole_service(template_json, scoped_template_json) -> None:
    for template in templates(template_json, scoped_template_json):
        statements = identity_statements(template)
        assert statements
        for s in statements:
            assert "NotAction" not in s and "NotResource" not in s, s
            if s["Effect"] == "Allow":
                assert not any(service_wide(a) for a in as_list(s["Action"])), s


def test_no_resource_policy_allows_a_whole_service_except_the_key_admin_delegation(template_json) -> None:
    for lid, statements in resource_policies(template_json).items():
        for s in statements:
            assert "NotAction" not in s and "NotPrincipal" not in s, (lid, s)
            if s["Effect"] != "Allow" or not any(service_wide(a) for a in as_list(s["Action"])):
                continue  # a Deny may use a wildcard: it only takes away (the TLS-only statements)
            # The one exception: a KMS key's default statement, `kms:*` for this account's root, which
            # delegates the key's use to IAM (without it the key could become unmanageable).
            assert resources(template_json, "AWS::KMS::Key").get(lid), (lid, s)
            assert as_list(s["Action"]) == ["kms:*"] and account_root(s["Principal"]), (lid, s)


def test_every_wildcard_resource_is_an_acknowledged_action(template_json, scoped_template_json) -> None:
    seen: set[str] = set()
    for template in templates(template_json, scoped_template_json):
        for s in identity_statements(template):
            if s["Effect"] == "Allow" and "*" in as_list(s["Resource"]):
                assert as_list(s["Resource"]) == ["*"], f"* mixed with resources: {s}"
                actions = set(as_list(s["Action"]))
                assert actions <= STAR_RESOURCE_ACTIONS, f"unacknowledged Resource *: {actions - STAR_RESOURCE_ACTIONS}"
                seen |= actions
    assert "sagemaker:ListClusters" in seen and "xray:PutTraceSegments" in seen  # the list is what exists
    assert seen == STAR_RESOURCE_ACTIONS, f"acknowledged but no longer granted: {STAR_RESOURCE_ACTIONS - seen}"


def test_service_principals_only_get_access_bound_to_our_resources(template_json) -> None:
    """Confused-deputy protection: a service may act for this account, and for our sources, only."""
    for lid, statements in resource_policies(template_json).items():
        for s in statements:
            principal = s.get("Principal")
            if s["Effect"] != "Allow" or not isinstance(principal, dict) or "Service" not in principal:
                continue
            conditions = {key for operator in s.get("Condition", {}).values() for key in operator}
            assert conditions & {"aws:SourceArn", "aws:SourceAccount"}, (lid, s)
            if resources(template_json, "AWS::KMS::Key").get(lid):  # key use also bound to this account
                assert "aws:SourceAccount" in conditions, (lid, s)
    for lid, permission in resources(template_json, "AWS::Lambda::Permission").items():
        props = permission["Properties"]
        if str(props["Principal"]).endswith(".amazonaws.com"):
            assert props.get("SourceArn"), f"{lid}: {props['Principal']} may invoke for any source"


def test_no_long_term_credentials_or_users(template_json) -> None:
    for type_ in ("AWS::IAM::User", "AWS::IAM::AccessKey", "AWS::IAM::Group", "AWS::SecretsManager::Secret"):
        assert not resources(template_json, type_), type_
    for lid, role in resources(template_json, "AWS::IAM::Role").items():
        for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            assert set(s["Principal"]) == {"Service"}, f"{lid} may be assumed by {s['Principal']}"


def dynamodb_calls_in_code() -> set[str]:
    """``dynamodb:<Operation>`` for every DynamoDB operation the Lambda code calls (boto3 snake_case names)."""
    model = botocore.session.get_session().get_service_model("dynamodb")
    snake = {botocore.xform_name(op): op for op in model.operation_names}
    source = "\n".join(p.read_text() for p in Path(FUNCTIONS_DIR).rglob("*.py"))
    called = {snake[name] for name in re.findall(r"\.(\w+)\(", source) if name in snake}
    called |= {snake[name] for name in re.findall(r"get_paginator\(\s*['\"](\w+)['\"]", source) if name in snake}
    if re.search(r"\.batch_writer\(", source):
        called.add("BatchWriteItem")
    return {f"dynamodb:{op}" for op in called}


def test_table_grant_is_exactly_what_the_code_calls(template_json) -> None:
    used = dynamodb_calls_in_code()
    assert used, "no DynamoDB call found in functions/: the scan is broken"
    assert used == set(TABLE_ACTIONS), (
        f"controller_functions.TABLE_ACTIONS and the code differ: missing {used - set(TABLE_ACTIONS)}, "
        f"unused {set(TABLE_ACTIONS) - used}"
    )
    granted = {a for s in identity_statements(template_json) for a in as_list(s["Action"]) if a.startswith("dynamodb:")}
    assert granted == used


# ---------------------------------------------------------------- encryption at rest, TLS


def kms_key(template: dict[str, Any], ref: Any) -> dict[str, Any]:
    """The template's KMS key behind a KmsMasterKeyId (a Ref or GetAtt of a key in the template)."""
    lid = ref.get("Ref") or ref.get("Fn::GetAtt", [None])[0] if isinstance(ref, dict) else None
    key = resources(template, "AWS::KMS::Key").get(lid)
    assert key, f"{ref} is not a customer-managed key of this stack"
    return key


def test_every_customer_managed_key_rotates_and_is_not_shared_beyond_the_account(template_json) -> None:
    keys = resources(template_json, "AWS::KMS::Key")
    assert len(keys) == 2  # notifications topic, dead-letter queues
    for lid, key in keys.items():
        assert key["Properties"]["EnableKeyRotation"] is True, lid
        for s in key["Properties"]["KeyPolicy"]["Statement"]:
            principal = s["Principal"]
            assert account_root(principal) or set(principal) == {"Service"}, (lid, s)


def test_table_is_encrypted_with_kms(template_json) -> None:
    (table,) = resources(template_json, "AWS::DynamoDB::GlobalTable").values()
    sse = table["Properties"]["SSESpecification"]
    # The AWS managed key aws/dynamodb, explicitly (why: infra/hyperpod_dhc/infra/nodes_table.py).
    assert sse == {"SSEEnabled": True, "SSEType": "KMS"}
    for replica in table["Properties"]["Replicas"]:
        assert "KMSMasterKeyId" not in replica.get("SSESpecification", {})


def test_topic_and_queues_are_encrypted_with_customer_managed_keys(template_json) -> None:
    topics = resources(template_json, "AWS::SNS::Topic")
    queues = resources(template_json, "AWS::SQS::Queue")
    assert topics and queues
    for lid, resource in {**topics, **queues}.items():
        props = resource["Properties"]
        assert "KmsMasterKeyId" in props and not props.get("SqsManagedSseEnabled"), lid
        kms_key(template_json, props["KmsMasterKeyId"])


def test_only_senders_of_dead_letters_may_use_the_queues_key(template_json) -> None:
    queues = resources(template_json, "AWS::SQS::Queue")
    (key,) = {q["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0] for q in queues.values()}  # one key, all queues
    for name, props in functions(template_json).items():
        granted = {
            a
            for s in function_statements(template_json, name)
            for a in as_list(s["Action"])
            for r in as_list(s["Resource"])
            if render(r) == f"<{key}.Arn>"
        }
        # Lambda sends a failed async invocation to the function's own DLQ with the function's role.
        assert granted == ({"kms:GenerateDataKey", "kms:Decrypt"} if "DeadLetterConfig" in props else set()), name
    services = [s for s in resources(template_json, "AWS::KMS::Key")[key]["Properties"]["KeyPolicy"]["Statement"]
                if "Service" in s["Principal"]]  # fmt: skip
    (events,) = services
    assert events["Principal"] == {"Service": "events.amazonaws.com"}
    assert set(as_list(events["Action"])) == {"kms:GenerateDataKey", "kms:Decrypt"}
    assert render(events["Condition"]["ArnLike"]["aws:SourceArn"]).endswith(":<AWS::AccountId>:rule/*")
    assert events["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}


def test_topic_and_queues_refuse_requests_without_tls(template_json) -> None:
    policies = [
        (p["Properties"].get("Topics", []) + p["Properties"].get("Queues", []), p["Properties"]["PolicyDocument"])
        for type_ in ("AWS::SNS::TopicPolicy", "AWS::SQS::QueuePolicy")
        for p in resources(template_json, type_).values()
    ]
    for type_, action in (("AWS::SNS::Topic", "sns:Publish"), ("AWS::SQS::Queue", "sqs:*")):
        for lid in resources(template_json, type_):
            denies = [
                s
                for targets, doc in policies
                if {"Ref": lid} in targets
                for s in doc["Statement"]
                if s["Effect"] == "Deny"
                and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
                and s["Principal"] in ("*", {"AWS": "*"})
                and action in as_list(s["Action"])
            ]
            assert denies, f"{lid} accepts requests without TLS"


# ---------------------------------------------------------------- logs, environment


def test_every_log_group_has_a_retention_and_every_function_uses_one(template_json) -> None:
    groups = resources(template_json, "AWS::Logs::LogGroup")
    assert groups
    for lid, group in groups.items():
        assert group["Properties"].get("RetentionInDays", 0) > 0, lid
    assert not [r for r in template_json["Resources"].values() if r["Type"] == "Custom::LogRetention"]
    for name, props in functions(template_json).items():
        # Without an explicit group Lambda creates /aws/lambda/<name> itself, kept forever.
        assert props["LoggingConfig"]["LogGroup"]["Ref"] in groups, name


def literal_strings(value: Any) -> list[str]:
    """Every literal string in a CloudFormation value (intrinsic functions included)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in literal_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in literal_strings(v)]
    return []


def test_lambda_environments_hold_no_secrets(template_json, scoped_template_json) -> None:
    for template in templates(template_json, scoped_template_json):
        for name, props in functions(template).items():
            env = props.get("Environment", {}).get("Variables", {})
            assert set(env) <= ENV_ALLOW_LIST, f"{name}: unexpected variables {set(env) - ENV_ALLOW_LIST}"
            for var, value in env.items():
                assert not SECRET_NAME.search(var), (name, var)
                for text in literal_strings(value):
                    assert not SECRET_LIKE.search(text), f"{name}.{var} looks like a secret"


@pytest.mark.parametrize(
    "value",
    [
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "-----BEGIN RSA PRIVATE KEY-----",
        "token=abc",
    ],
)
def test_the_secret_detector_detects(value: str) -> None:
    assert SECRET_LIKE.search(value)


def test_the_allow_list_is_what_the_settings_read() -> None:
    from hyperpod_dhc.deephealth import settings

    names = {
        field
        for model in (
            settings.IntakeSettings,
            settings.ReconcileSettings,
            settings.ApiSettings,
            settings.PollCheckSettings,
        )
        for field in model.model_fields
    }
    assert names <= ENV_ALLOW_LIST
    assert ENV_ALLOW_LIST - names == {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL"}
