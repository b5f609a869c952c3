"""The synthesized template: triggers, workflow, table, functions, permissions, configuration."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk.assertions import Match, Template

from hyperpod_dhc.deephealth.domain.events import (
    CLUSTER_EVENT,
    DETAIL_TYPES,
    NODE_HEALTH_EVENT,
    SOURCE,
    STATE_CHANGE_EVENT,
)
from hyperpod_dhc.deephealth.domain.policy import ConfigError, parse_config
from hyperpod_dhc.deephealth.domain.rounds import ROUND_STEPS
from hyperpod_dhc.infra.controller_config import read_deletion_protection
from hyperpod_dhc.infra.controller_functions import FUNCTIONS
from hyperpod_dhc.infra.lambda_assets import PYTHON_VERSION, compile_bytecode, runtime_python
from hyperpod_dhc.infra.nodes_table import NodesTable
from hyperpod_dhc.infra.round_workflow import DEFINITION_FILE
from tests.harness import synth
from tests.harness.asl import construct_id, round_definition, round_task_functions
from tests.infra.stacks import controller_stack

CLUSTERS = "arn:<AWS::Partition>:sagemaker:<AWS::Region>:<AWS::AccountId>:cluster/*"
CHECK_LOGS = "arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:/aws/sagemaker/Clusters/*"
ROUND_ARN = "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:stateMachine:HyperPodDhc-check-round"
ROUND_EXECUTIONS = "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:HyperPodDhc-check-round:*"
STARTERS = {"Intake", "Reconcile", "FinishRound", "Api"}


# ---------------------------------------------------------------- helpers


def render(value: Any) -> str:
    """A CloudFormation string value with Ref as <Name> and GetAtt as <Logical.Attr>."""
    if isinstance(value, str):
        return value
    ((fn, arg),) = value.items()
    if fn == "Ref":
        return f"<{arg}>"
    if fn == "Fn::GetAtt":
        return f"<{arg[0]}.{arg[1]}>"
    if fn == "Fn::Join":
        return arg[0].join(render(part) for part in arg[1])
    raise AssertionError(f"unexpected intrinsic {value}")


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def resources(template_json: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {lid: res for lid, res in template_json["Resources"].items() if res["Type"] == type_}


def functions(template_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Construct id -> properties of each Lambda function."""
    found = resources(template_json, "AWS::Lambda::Function")
    return {construct_id(template_json["Resources"], lid): res["Properties"] for lid, res in found.items()}


def statements_of_role(template_json: dict[str, Any], role_logical_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in resources(template_json, "AWS::IAM::Policy").values()
        if {"Ref": role_logical_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def function_statements(template_json: dict[str, Any], name: str) -> list[dict[str, Any]]:
    role = functions(template_json)[name]["Role"]["Fn::GetAtt"][0]
    return statements_of_role(template_json, role)


def actions(statements: list[dict[str, Any]], prefix: str) -> set[str]:
    return {a for s in statements for a in as_list(s["Action"]) if a.startswith(prefix)}


@pytest.fixture(scope="session")
def asl(resolved_definition: str) -> dict[str, Any]:
    return json.loads(resolved_definition)


# ---------------------------------------------------------------- triggers


def test_one_rule_per_hyperpod_detail_type_targets_intake(template_json: dict[str, Any]) -> None:
    rules = resources(template_json, "AWS::Events::Rule").values()
    patterns = [r["Properties"]["EventPattern"] for r in rules if "EventPattern" in r["Properties"]]
    assert sorted(p["detail-type"][0] for p in patterns) == sorted(DETAIL_TYPES)  # every type Intake classifies
    intake = next(lid for lid in resources(template_json, "AWS::Lambda::Function") if "Intake" in lid)
    for rule in rules:
        props = rule["Properties"]
        if "EventPattern" not in props:
            continue
        assert props["EventPattern"]["source"] == [SOURCE]
        assert "detail" not in props["EventPattern"]  # clusters: "all"
        (target,) = props["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": [intake, "Arn"]}


def test_reconcile_schedule_uses_configured_rate(template_json: dict[str, Any]) -> None:
    minutes = synth.cdk_context()["hyperpod-dhc"]["reconcile_every_minutes"]
    (schedule,) = [
        r["Properties"]
        for r in resources(template_json, "AWS::Events::Rule").values()
        if "ScheduleExpression" in r["Properties"]
    ]
    assert schedule["ScheduleExpression"] == f"rate({minutes} minutes)"
    (target,) = schedule["Targets"]
    assert "Reconcile" in target["Arn"]["Fn::GetAtt"][0]


def test_every_rule_target_retries_then_dead_letters(template_json: dict[str, Any]) -> None:
    queues = resources(template_json, "AWS::SQS::Queue")
    for rule in resources(template_json, "AWS::Events::Rule").values():
        for target in rule["Properties"]["Targets"]:
            assert target["RetryPolicy"] == {"MaximumRetryAttempts": 4, "MaximumEventAgeInSeconds": 7200}
            assert target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0] in queues


def test_named_clusters_scope_rules_by_cluster_name(scoped_template_json: dict[str, Any]) -> None:
    names = ["train-a", "train-b"]
    patterns = {
        r["Properties"]["EventPattern"]["detail-type"][0]: r["Properties"]["EventPattern"]
        for r in resources(scoped_template_json, "AWS::Events::Rule").values()
        if "EventPattern" in r["Properties"]
    }
    assert patterns[CLUSTER_EVENT]["detail"] == {"EventDetails": {"ClusterName": names}}
    assert patterns[STATE_CHANGE_EVENT]["detail"] == {"ClusterName": names}
    assert patterns[NODE_HEALTH_EVENT]["detail"] == {"ClusterName": names}


def test_list_clusters_only_when_watching_all(
    template_json: dict[str, Any], scoped_template_json: dict[str, Any]
) -> None:
    listing = {name for name, spec in FUNCTIONS.items() if spec.lists_clusters}
    assert listing == {"Reconcile"}, "only Reconcile lists clusters (the operator API never does)"
    for name in FUNCTIONS:
        granted = actions(function_statements(template_json, name), "sagemaker:")
        assert ("sagemaker:ListClusters" in granted) == (name in listing), name
        assert "sagemaker:ListClusters" not in actions(function_statements(scoped_template_json, name), "sagemaker:")


# ---------------------------------------------------------------- round workflow


def test_state_machine_is_standard_logs_all_and_traces(template: Template, template_json: dict[str, Any]) -> None:
    template.resource_count_is("AWS::StepFunctions::StateMachine", 1)
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineName": "HyperPodDhc-check-round",
            "StateMachineType": "STANDARD",
            "LoggingConfiguration": {"Level": "ALL", "Destinations": Match.any_value()},
            "TracingConfiguration": {"Enabled": True},
        },
    )
    (machine,) = resources(template_json, "AWS::StepFunctions::StateMachine").values()
    (destination,) = machine["Properties"]["LoggingConfiguration"]["Destinations"]
    log_group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    assert template_json["Resources"][log_group]["Properties"]["RetentionInDays"] > 0


def test_resolved_definition_is_the_asl_file_with_arns_substituted(
    resolved_definition: str, function_arns: dict[str, str]
) -> None:
    assert set(function_arns) == set(ROUND_STEPS)
    expected = DEFINITION_FILE.read_text()
    for name, arn in function_arns.items():
        expected = expected.replace(f"${{{name}FunctionArn}}", arn)
    assert "${" not in expected
    assert resolved_definition == expected


def test_definition_resolves_by_logical_id_and_without_path_metadata(
    template_json: dict[str, Any], resolved_definition: str
) -> None:
    tasks = round_task_functions(template_json)
    by_logical = {
        lid: f"arn:aws:lambda:us-east-1:123456789012:function:HyperPodDhc-{name}" for name, lid in tasks.items()
    }
    assert round_definition(template_json, by_logical) == resolved_definition
    bare = copy.deepcopy(template_json)
    for resource in bare["Resources"].values():
        resource.pop("Metadata", None)
    assert round_task_functions(bare) == tasks
    by_name = {name: f"arn:aws:lambda:us-east-1:123456789012:function:HyperPodDhc-{name}" for name in tasks}
    assert round_definition(bare, by_name) == resolved_definition


def test_every_lambda_task_retries_service_errors_and_is_caught(asl: dict[str, Any]) -> None:
    states = asl["States"]
    tasks = {name: s for name, s in states.items() if s["Type"] == "Task"}
    assert tasks
    catch_targets = {c["Next"] for s in states.values() for c in s.get("Catch", [])}
    transient: dict[str, dict[str, Any]] = {}  # Task -> its retrier of transient errors
    for name, state in tasks.items():
        assert state["Resource"].startswith("arn:aws:lambda:"), name
        (transient[name],) = [r for r in state.get("Retry", []) if "Lambda.ServiceException" in r["ErrorEquals"]]
        # Our adapters' names for throttling and 5xx of any AWS service (issue 11, defect 2).
        assert {"Throttled", "TransientError"} <= set(transient[name]["ErrorEquals"]), name
        if states[state["Next"]]["Type"] == "Fail":
            # The handler of caught failures must not catch itself: it ends the execution failed. It retries
            # anything a few times first: when it fails, the lease and the claimed nodes wait for Reconcile.
            # (A step another's Catch goes on to, Start check after Recover before check, is no handler.)
            assert name in catch_targets, name
            assert "Catch" not in state, name
            assert state["Retry"][-1]["ErrorEquals"] == ["States.ALL"], name
        else:
            assert any("States.ALL" in c["ErrorEquals"] for c in state.get("Catch", [])), name
    # The ASL file repeats that retrier on every Task: the copies stay one block (errors and timing alike).
    first, *others = tasks
    for name in others:
        assert transient[name] == transient[first], f"{name!r} retries transient errors unlike {first!r}"


def test_every_loop_of_the_workflow_waits(asl: dict[str, Any]) -> None:
    """A cycle of states with no Wait in it would spin as fast as its Lambdas answer (Start check -> RecoveryFirst ->
    Recover before check, with a node that stays due) until the execution's history is full."""
    states = asl["States"]

    def after(name: str) -> set[str]:
        s = states[name]
        nexts = {s.get("Next"), s.get("Default"), *(c["Next"] for c in s.get("Choices", []))}
        return {n for n in (*nexts, *(c["Next"] for c in s.get("Catch", []))) if n}

    for start in states:
        if states[start]["Type"] == "Wait":
            continue
        seen, todo = set(), list(after(start))
        while todo:  # every state reachable from `start` without passing a Wait
            name = todo.pop()
            if name in seen or states[name]["Type"] == "Wait":
                continue
            seen.add(name)
            todo += after(name)
        assert start not in seen, f"{start!r} comes back to itself without a Wait"


def test_every_error_the_workflow_names_is_an_exception_the_functions_raise(asl: dict[str, Any]) -> None:
    """Python exception names are the contract with the ASL: a renamed class would leave a Retry or Catch that
    never matches (RecoveryFirst's Catch would become the round's abandonment)."""
    from hyperpod_dhc.deephealth.domain import errors

    named = {
        e
        for s in asl["States"].values()
        for rule in (*s.get("Retry", []), *s.get("Catch", []))
        for e in rule["ErrorEquals"]
        if not e.startswith(("States.", "Lambda."))
    }
    assert {"ClusterBusy", "RecoveryFirst", "Throttled", "TransientError"} <= named
    for name in named:
        assert isinstance(getattr(errors, name, None), type) and issubclass(getattr(errors, name), Exception), name


def test_state_machine_invokes_exactly_the_task_functions(template_json: dict[str, Any]) -> None:
    (machine,) = resources(template_json, "AWS::StepFunctions::StateMachine").values()
    role = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    invoke = [s for s in statements_of_role(template_json, role) if "lambda:InvokeFunction" in as_list(s["Action"])]
    invoked = {render(r).split(".Arn>")[0].lstrip("<") for s in invoke for r in as_list(s["Resource"])}
    names = {construct_id(template_json["Resources"], lid) for lid in invoked}
    assert names == set(ROUND_STEPS)


def test_only_starters_start_and_describe_rounds(template_json: dict[str, Any]) -> None:
    for name, props in functions(template_json).items():
        statements = function_statements(template_json, name)
        states = {(a, render(r)) for s in statements for a in as_list(s["Action"]) if a.startswith("states:")
                  for r in as_list(s["Resource"])}  # fmt: skip
        env = props["Environment"]["Variables"]
        if name in STARTERS:
            assert states == {("states:StartExecution", ROUND_ARN), ("states:DescribeExecution", ROUND_EXECUTIONS)}
            assert render(env["ROUND_STATE_MACHINE_ARN"]) == ROUND_ARN
        else:
            assert states == set(), name
            assert "ROUND_STATE_MACHINE_ARN" not in env, name


# ---------------------------------------------------------------- table, logs, queues


def test_nodes_table_keys_and_protection(template: Template) -> None:
    template.resource_count_is("AWS::DynamoDB::GlobalTable", 1)
    template.has_resource(
        "AWS::DynamoDB::GlobalTable",
        {
            "Properties": {
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "AttributeDefinitions": Match.array_with(
                    [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}]
                ),
                "BillingMode": "PAY_PER_REQUEST",
                "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS"},
                "Replicas": [
                    Match.object_like(
                        {
                            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                            "DeletionProtectionEnabled": True,
                        }
                    )
                ],
            },
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
        },
    )


def test_deletion_protection_can_be_turned_off() -> None:
    app = synth.app({"hyperpod-dhc:table-deletion-protection": False})
    stack = Stack(app, "TableOnly")
    NodesTable(stack, "Nodes", deletion_protection=read_deletion_protection(stack))
    Template.from_stack(stack).has_resource_properties(
        "AWS::DynamoDB::GlobalTable",
        {"Replicas": [Match.object_like({"DeletionProtectionEnabled": False})]},
    )


def test_every_log_group_has_retention(template_json: dict[str, Any]) -> None:
    days = synth.cdk_context()["hyperpod-dhc"]["log_retention_days"]
    groups = resources(template_json, "AWS::Logs::LogGroup")
    assert len(groups) == len(FUNCTIONS) + 2  # one per function + the state machine's + API access logs
    for lid, group in groups.items():
        assert group["Properties"].get("RetentionInDays") == days, lid
    for name, props in functions(template_json).items():
        assert props["LoggingConfig"]["LogGroup"]["Ref"] in groups, name
        assert props["LoggingConfig"]["LogFormat"] == "JSON", name


def test_dead_letter_queues_are_encrypted_and_tls_only(template_json: dict[str, Any]) -> None:
    queues = resources(template_json, "AWS::SQS::Queue")
    assert len(queues) == 3  # undelivered events + on-failure of Intake and Reconcile
    policies = resources(template_json, "AWS::SQS::QueuePolicy").values()
    for lid, queue in queues.items():
        assert queue["Properties"].get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in queue["Properties"]
        denies_plain_http = [
            s
            for p in policies
            if {"Ref": lid} in p["Properties"]["Queues"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]
            if s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        ]
        assert denies_plain_http, lid


def test_async_functions_have_on_failure_queue_and_two_retries(template_json: dict[str, Any]) -> None:
    queues = resources(template_json, "AWS::SQS::Queue")
    invoke_configs = {
        c["Properties"]["FunctionName"]["Ref"]: c["Properties"]
        for c in resources(template_json, "AWS::Lambda::EventInvokeConfig").values()
    }
    by_name = {
        construct_id(template_json["Resources"], lid): lid for lid in resources(template_json, "AWS::Lambda::Function")
    }
    for name in ("Intake", "Reconcile"):
        props = functions(template_json)[name]
        assert props["DeadLetterConfig"]["TargetArn"]["Fn::GetAtt"][0] in queues
        assert invoke_configs[by_name[name]]["MaximumRetryAttempts"] == 2


# ---------------------------------------------------------------- functions


def test_functions_match_the_spec(template_json: dict[str, Any]) -> None:
    found = functions(template_json)
    assert set(found) == set(FUNCTIONS)
    for name, spec in FUNCTIONS.items():
        props = found[name]
        assert props["Handler"] == spec.handler
        assert props["Timeout"] == spec.timeout_s
        assert props["Runtime"] == "python3.13"
        assert props["Architectures"] == ["arm64"]
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert "ReservedConcurrentExecutions" not in props
        assert len(props["Layers"]) == 1


def test_every_function_env_names_table_and_config(template_json: dict[str, Any]) -> None:
    (table,) = resources(template_json, "AWS::DynamoDB::GlobalTable")
    (parameter,) = resources(template_json, "AWS::SSM::Parameter")
    for name, props in functions(template_json).items():
        env = props["Environment"]["Variables"]
        assert env["TABLE_NAME"] == {"Ref": table}, name
        assert env["CONFIG_PARAMETER_NAME"] == {"Ref": parameter}, name
        assert env["POWERTOOLS_SERVICE_NAME"] == "hyperpod-dhc"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "HyperPodDHC"
        assert env["POWERTOOLS_LOG_LEVEL"] == "INFO"


def test_config_parameter_holds_the_validated_json(template_json: dict[str, Any]) -> None:
    (parameter,) = resources(template_json, "AWS::SSM::Parameter").values()
    expected = parse_config(synth.cdk_context()["hyperpod-dhc"]).model_dump_json()
    assert parameter["Properties"]["Type"] == "String"
    assert parameter["Properties"]["Value"] == expected
    outputs = template_json["Outputs"]
    assert {"RoundStateMachineArn", "NodesTableName", "ConfigParameterName"} <= set(outputs)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"defaults": {"max_attempts": 99}}, "defaults.max_attempts"),
        ({"reconcile_every_minutes": 0, "surprise": 1}, "reconcile_every_minutes"),
        ({"surprise": 1}, "surprise"),
        ({"groups": {"a/b/c": {}}}, "a/b/c"),
    ],
)
def test_invalid_config_fails_synth_naming_the_key(config: dict[str, Any], named: str) -> None:
    app = synth.app({"hyperpod-dhc": {**synth.cdk_context()["hyperpod-dhc"], **config}})
    with pytest.raises(ConfigError, match=re.escape(named)):
        controller_stack(app)


# ---------------------------------------------------------------- IAM


def all_statements(template_json: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        s
        for policy in resources(template_json, "AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_no_wildcard_actions(template_json: dict[str, Any]) -> None:
    statements = all_statements(template_json)
    assert statements
    for statement in statements:
        for action in as_list(statement["Action"]):
            assert "*" not in action, statement


def test_no_managed_policies(template_json: dict[str, Any]) -> None:
    for lid, role in resources(template_json, "AWS::IAM::Role").items():
        assert not role["Properties"].get("ManagedPolicyArns"), lid


def test_sagemaker_actions_are_per_function_and_scoped_to_clusters(template_json: dict[str, Any]) -> None:
    for statement in all_statements(template_json):
        sagemaker = [a for a in as_list(statement["Action"]) if a.startswith("sagemaker:")]
        if not sagemaker:
            continue
        if sagemaker == ["sagemaker:ListClusters"]:
            assert statement["Resource"] == "*"  # the action has no resource type
        else:
            assert "sagemaker:ListClusters" not in sagemaker
            assert [render(r) for r in as_list(statement["Resource"])] == [CLUSTERS]
    for name, spec in FUNCTIONS.items():
        expected = {f"sagemaker:{a}" for a in spec.sagemaker_actions}
        if spec.lists_clusters:
            expected.add("sagemaker:ListClusters")
        assert actions(function_statements(template_json, name), "sagemaker:") == expected, name


def test_check_logs_read_is_scoped_to_hyperpod_cluster_log_groups(template_json: dict[str, Any]) -> None:
    readers = set()
    for name in FUNCTIONS:
        for statement in function_statements(template_json, name):
            if any(a.startswith("logs:") and a not in ("logs:CreateLogStream", "logs:PutLogEvents")
                   for a in as_list(statement["Action"])):  # fmt: skip
                assert as_list(statement["Action"]) == ["logs:FilterLogEvents"]
                assert sorted(render(r) for r in as_list(statement["Resource"])) == [
                    CHECK_LOGS,
                    f"{CHECK_LOGS}:log-stream:*",
                ]
                readers.add(name)
    assert (
        readers
        == {n for n, spec in FUNCTIONS.items() if spec.reads_check_logs}
        == {
            "Intake",
            "Reconcile",
            "ClaimRound",
            "StartCheck",
            "PollCheck",
            "Api",
        }
    )  # every function that observes a cluster (observe_cluster reads the result logs), and the Api's capture route


def test_functions_write_only_their_own_log_group(template_json: dict[str, Any]) -> None:
    for name, props in functions(template_json).items():
        own = props["LoggingConfig"]["LogGroup"]["Ref"]
        for statement in function_statements(template_json, name):
            if "logs:PutLogEvents" in as_list(statement["Action"]):
                assert statement["Resource"] == {"Fn::GetAtt": [own, "Arn"]}, name


def test_every_function_reads_config_and_uses_table(template_json: dict[str, Any]) -> None:
    (table,) = resources(template_json, "AWS::DynamoDB::GlobalTable")
    for name in FUNCTIONS:
        statements = function_statements(template_json, name)
        assert actions(statements, "ssm:") == {"ssm:GetParameter"}, name  # what the code calls, nothing more
        ddb = [s for s in statements if any(a.startswith("dynamodb:") for a in as_list(s["Action"]))]
        assert ddb and all(render(r).startswith(f"<{table}.Arn>") for s in ddb for r in as_list(s["Resource"])), name


def test_layer_bytecode_is_the_runtimes_and_read_without_checking_sources(tmp_path: Path) -> None:
    python = runtime_python()
    if python is None:
        pytest.skip("no CPython 3.13 here: the layer is built without bytecode (compiled at every cold start)")
    package = tmp_path / "python" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    compile_bytecode(python, tmp_path / "python")
    (pyc,) = (package / "__pycache__").glob("*.pyc")
    assert pyc.name == f"__init__.cpython-{PYTHON_VERSION.replace('.', '')}.pyc", "the runtime's own bytecode"
    flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
    assert flags == 0b01, "hash-based and unchecked: valid whatever mtime the zip gives the sources"
