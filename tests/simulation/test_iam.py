"""IAM on the twin: a missing grant is refused as AWS refuses it, every scenario file runs without a refusal,
and the synthesized grants are exactly what the controller uses (tests/harness/iam.py evaluates every request).

Scenario files too slow for the suite run with their horizon capped (`HORIZON_CAP_S`): a file of more than
`LARGE_NODES` nodes stops after `LARGE_HORIZON_S` of virtual time, enough for its first arrivals to be listed,
checked, judged and recovered; `denied == 0` is asserted on what ran (the uncapped runs are `make bench`'s).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeState
from hyperpod_dhc.infra.controller_functions import TABLE_ACTIONS
from tests.conftest import load_event
from tests.corpus import localize
from tests.harness.iam import EVENTBRIDGE_PRINCIPAL, STATE_MACHINE_PRINCIPAL
from tests.harness.template import ControllerTemplate
from tests.simulation.conftest import BASE_CONFIG
from tests.twin.report import build_report
from tests.twin.scenario import Scenario, load_scenario
from tests.twin.simulation import Twin

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
# Scenario files another test runs whole under `assert_invariants`, which asserts no refusal and no unmapped
# request on every run: running them again here would only repeat that.
RUN_WHOLE_ELSEWHERE = {
    "storm-800.json": "tests/simulation/test_reliability.py",
    "fidelity.json": "tests/simulation/test_fidelity.py (its baseline variant)",
}
FILES = sorted(p.name for p in SCENARIOS.glob("*.json") if p.name not in RUN_WHOLE_ELSEWHERE)
LARGE_NODES = 200
LARGE_HORIZON_S = 3 * 3600.0
# Per file, where a file needs less than the general cap (measured here: bench-10000's 10,000 arrivals make
# even 3 h too slow for the suite; 1 h lists, claims and checks its first few hundred nodes).
# bench-128-jobs-revalidate: its first 12 h are bench-128-jobs' (its revalidations
# make the same calls, and test_revalidation.py runs them under assert_invariants).
HORIZON_CAP_S = {"bench-10000.json": 3600.0, "bench-128-jobs-revalidate.json": 3600.0}
# The files whose calls the grant-usage test takes into account (same worker: the runs are cached below).
USAGE_FILES = ("demo.json", "faults.json")
USAGE_GROUP = "iam-usage"
OPERATOR = "arn:aws:iam::123456789012:user/operator"
FAST_CHECKS = {"InstanceStress": [1800, 2400]}
# (function, action) granted for a code path of the function (tests/simulation/test_iam.py cannot reach it in a
# short run), with that path: still granted, and listed so that a grant nobody needs cannot hide among them
# (the test fails once one is used: then it goes from here).
_STARTS = "ensure_round (adapters/round_starter.py `_running`): a start that meets ExecutionAlreadyExists"
_OBSERVES = "observe_cluster -> fold: a node whose check started has left it, so the result logs are read"
_OPERATIONS = (
    "observe_cluster -> fold: a node has stayed in (or out of) its check longer than a check takes, so "
    "HyperPod's check operation is asked about (check_in_progress)"
)
_DESCRIBES = (
    "Context.describe: no copy of the cluster's DescribeCluster answer in the table younger than "
    "CLUSTER_INFO_TTL_S (in these runs another function described the cluster within it)"
)
NOT_EXERCISED: dict[tuple[str, str], str] = {
    ("Api", "sagemaker:DescribeCluster"): f"GET /clusters/{{cluster}}... -> {_DESCRIBES}",
    ("ClaimRound", "sagemaker:DescribeCluster"): f"claim_round -> observe_cluster -> {_DESCRIBES}",
    ("FinishRound", "sagemaker:DescribeCluster"): f"finish_round -> {_DESCRIBES}",
    ("RecoverNodes", "sagemaker:DescribeCluster"): f"recover_nodes -> {_DESCRIBES}",
    ("Api", "states:DescribeExecution"): f"POST /checks, breaker reset -> {_STARTS}",
    ("FinishRound", "states:DescribeExecution"): f"finish_round -> {_STARTS}",
    ("Intake", "states:DescribeExecution"): f"handle_signal -> {_STARTS}",
    ("Reconcile", "states:DescribeExecution"): f"reconcile_cluster -> {_STARTS}",
    ("Intake", "logs:FilterLogEvents"): f"handle_signal -> reconcile_cluster -> {_OBSERVES}",
    ("ClaimRound", "sagemaker:ListClusterOperations"): f"claim_round -> {_OPERATIONS}",
    ("Intake", "sagemaker:ListClusterOperations"): f"handle_signal -> reconcile_cluster -> {_OPERATIONS}",
    ("Reconcile", "sagemaker:ListClusterOperations"): f"reconcile_cluster -> {_OPERATIONS}",
    ("RecoverNodes", "sagemaker:ListClusterOperations"): "recover_nodes: a node due for recovery still shows "
    "DeepHealthCheckInProgress (the failed_status reading), so whether a check runs is asked (check_in_progress)",
    ("Intake", "sns:Publish"): "handle_signal -> _node_signal -> save -> publish: an Unhealthy report "
    "HyperPod confirms fails the node (node-failed)",
    ("StartCheck", "sns:Publish"): "start_check -> shadow_checks: dry-run announces the check it would start",
    ("Api", "logs:FilterLogEvents"): "GET /clusters/{cluster}/nodes/{node}/capture -> capture_check: the node's "
    "result log events (hpdhc readings capture)",
    ("StartCheck", "kms:GenerateDataKey"): "the topic's key, with StartCheck's sns:Publish",
    ("StartCheck", "kms:Decrypt"): "the topic's key, with StartCheck's sns:Publish",
}


class IamTwin(Twin):
    """The twin, with Powertools' parameter cache kept per function, as each function has its own Lambda
    process (in-process they would share one: only the first reader would ever call SSM); and any function
    named in `failing` made to fail, to see a given-up invocation dead-lettered."""

    failing: frozenset[str] = frozenset()

    def _wrap_invocation(self, function_name: str, handler: Any) -> Any:
        from aws_lambda_powertools.utilities.parameters import SSMProvider
        from aws_lambda_powertools.utilities.parameters.base import DEFAULT_PROVIDERS

        inner = super()._wrap_invocation(function_name, handler)
        stores = self.__dict__.setdefault("_parameter_stores", {})

        def run(event: dict, context: Any) -> Any:
            if "ssm" not in DEFAULT_PROVIDERS:
                DEFAULT_PROVIDERS["ssm"] = SSMProvider()
            DEFAULT_PROVIDERS["ssm"].store = stores.setdefault(function_name, {})  # this function's own cache
            if any(function_name.endswith(f) for f in self.failing):
                raise RuntimeError(f"{function_name} made to fail (test)")
            return inner(event, context)

        return run


RUNS: dict[str, dict] = {}  # scenario file -> its report's "iam", per test process


def run_file(template: ControllerTemplate, name: str) -> tuple[dict, float, float]:
    """(report, virtual horizon it ran with, wall seconds) of one scenario file, IAM enforced."""
    scenario, config = load_scenario(SCENARIOS / name, BASE_CONFIG)
    nodes = sum(g.count for g in scenario.groups)
    cap = HORIZON_CAP_S.get(name, LARGE_HORIZON_S if nodes > LARGE_NODES else scenario.horizon_s)
    scenario = scenario.model_copy(update={"horizon_s": min(cap, scenario.horizon_s)})
    with IamTwin(scenario, template, config) as twin:
        wall = twin.run()
        report = build_report(twin, wall)
    RUNS[name] = report["iam"]
    return report, scenario.horizon_s, wall


def _marks(name: str) -> list[Any]:
    return [pytest.mark.xdist_group(USAGE_GROUP)] if name in USAGE_FILES else []


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n), id=n.removesuffix(".json")) for n in FILES])
def test_every_scenario_file_runs_without_an_access_denied(controller_template, name):
    report, horizon, wall = run_file(controller_template, name)
    iam = report["iam"]
    print(f"{name}: horizon {horizon:.0f} s virtual, {wall:.1f} s wall, {iam['denied']} denied")
    assert iam["unmapped"] == [], f"{name}: requests with no IAM mapping: {iam['unmapped']}"
    assert iam["denied"] == 0, f"{name}: AWS would refuse: {iam['denials']}"
    assert iam["calls"], "nothing was authorized: the check is not wired in"


def _without(template: dict, function: str, action: str) -> dict:
    """A copy of the template where `function`'s role no longer grants `action`."""
    out = copy.deepcopy(template)
    resources = out["Resources"]
    (role,) = [
        r["Properties"]["Role"]["Fn::GetAtt"][0]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Handler", "").endswith(f".{function}.lambda_handler")
    ]
    removed = 0
    for r in resources.values():
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]:
            document = r["Properties"]["PolicyDocument"]
            kept = []
            for statement in document["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                removed += action in actions
                if [a for a in actions if a != action]:
                    kept.append({**statement, "Action": [a for a in actions if a != action]})
            document["Statement"] = kept
    assert removed, f"{function} was not granted {action}"
    return out


def test_a_check_started_without_its_grant_is_refused_and_the_round_fails(controller_template):
    template = ControllerTemplate(
        _without(controller_template.template, "start_check", "sagemaker:StartClusterHealthCheck")
    )
    scenario = Scenario.model_validate(
        {
            "version": 1,
            "name": "no-start-grant",
            "seed": 3,
            "horizon_s": 2 * 3600,
            "cluster": {"name": "iam", "node_recovery": "None"},
            "groups": [{"name": "workers", "count": 3, "arrival": {"start_s": 0, "spread_s": 600}}],
            "check_duration_s": FAST_CHECKS,
        }
    )
    with Twin(scenario, template, scenario.controller_config(BASE_CONFIG)) as twin:
        report = build_report(twin, twin.run())
        histories = [twin.history(e["executionArn"]) for e in twin.executions()]
    iam = report["iam"]
    assert iam["denied"] > 0
    assert all(
        d.startswith("StartCheck sagemaker:StartClusterHealthCheck on arn:aws:sagemaker:") for d in iam["denials"]
    )
    assert report["api_calls"].get("StartClusterHealthCheck", 0) == 0, "a refused request never reaches HyperPod"
    assert report["step_functions"]["executions"] and set(report["step_functions"]["statuses"]) <= {"FAILED"}
    entered = {e["stateEnteredEventDetails"]["name"] for h in histories for e in h if "stateEnteredEventDetails" in e}
    assert "Abandon round" in entered, "the controller's own failure path ran"
    assert report["verdicts"]["passed"] == 0, "no check, no verdict"


def _operator_and_dead_letters(twin: IamTwin) -> None:
    """What the scenario files do not do: every operator route, an Unhealthy node report, given-up
    invocations of Intake and Reconcile (dead-lettered with their role)."""
    cluster = twin.scenario.cluster.name
    node = next(r for r in twin.records(cluster).values() if r.state != NodeState.GONE and r.group != "controller")
    for path in ("/clusters", f"/clusters/{cluster}/groups", f"/clusters/{cluster}/nodes",
                 f"/clusters/{cluster}/nodes/{node.key}", f"/clusters/{cluster}/breakers"):  # fmt: skip
        status, body = twin.api("GET", path, principal=OPERATOR)
        assert status == 200, (path, body)
    status, body = twin.api("POST", f"/clusters/{cluster}/checks", {"groups": [node.group]}, principal=OPERATOR)
    assert status in (200, 202), body
    status, body = twin.api("POST", f"/clusters/{cluster}/breakers/reset", {"reason": "test"}, principal=OPERATOR)
    assert status < 500, body
    unhealthy = localize(load_event("node_health_unhealthy.json"))
    instance = twin.sim.node(cluster, node.key).instance_id
    unhealthy["detail"].update(ClusterName=cluster, ClusterArn=twin.cluster_model.arn, InstanceId=instance)
    unhealthy["resources"] = [twin.cluster_model.arn]
    twin.deliver(unhealthy)
    twin.failing = frozenset({"Intake", "Reconcile"})
    twin.deliver({**unhealthy, "id": "given-up"})
    twin.run_until(lambda: False, horizon_s=twin.reconcile_every_s + 600)  # both retried twice, then given up
    twin.failing = frozenset()
    given_up = {f["function"] for f in twin.failed_invocations}
    assert given_up >= {twin.function_name("Intake"), twin.function_name("Reconcile")}, given_up


def _run(template: ControllerTemplate, raw: dict, operator: bool = False) -> tuple[dict, dict[str, set[str]]]:
    """Run a scenario (with the operator's part, if `operator`); its report's "iam" and the actions each
    function is granted."""
    scenario = Scenario.model_validate({"version": 1, "check_duration_s": FAST_CHECKS, **raw})
    with IamTwin(scenario, template, scenario.controller_config(BASE_CONFIG)) as twin:
        if not operator:
            twin.run()
        else:
            twin.run_until(lambda: False, horizon_s=3 * 3600)
            _operator_and_dead_letters(twin)
            twin.sim.delete_cluster(scenario.cluster.name)  # Reconcile closes it out and forgets it
            twin.run_until(lambda: False, horizon_s=3 * twin.reconcile_every_s)
        return build_report(twin, 0.0)["iam"], twin.iam.granted_actions()


# What the scenario files leave out. A bad AMI watched as "all" (Reconcile lists clusters; the breaker trips,
# RecoverNodes holds and alerts, the operator resets it) next to a group with HyperPod's own on-start checks
# (observations that read result logs); then the operator's part. And a dry run (shadowed checks announced).
USAGE_RUNS = {
    "operator": {
        "name": "operator",
        "seed": 9,
        "horizon_s": 6 * 3600,
        "cluster": {"name": "ops", "node_recovery": "None"},
        "groups": [
            {"name": "p5", "count": 4, "arrival": {"start_s": 0, "spread_s": 600}},
            {
                "name": "native",
                "count": 3,
                "arrival": {"start_s": 0, "spread_s": 3600},
                "on_start_deep_health_checks": ["InstanceStress"],
            },
        ],
        "hardware": {"persistent_fault_rate": 1.0, "replacement_fault_rate": 1.0},
        "policy": {
            "clusters": "all",
            "defaults": {"gather_window_s": 120},
            "cluster_defaults": {"breaker": {"max_failure_pct": 50, "min_verdicts": 3, "window_h": 6}},
        },
    },
    "dry-run": {
        "name": "dry-run",
        "seed": 4,
        "horizon_s": 3 * 3600,
        "cluster": {"name": "shadow", "node_recovery": "None"},
        "groups": [{"name": "p5", "count": 3, "arrival": {"start_s": 0, "spread_s": 600}}],
        "hardware": {"transient_fault_rate": 0.5},
        "policy": {"defaults": {"dry_run": True}},
    },
}


@pytest.mark.xdist_group(USAGE_GROUP)
def test_every_grant_is_used_and_every_call_granted(controller_template):
    for name in USAGE_FILES:
        if name not in RUNS:
            run_file(controller_template, name)
    extra = {name: _run(controller_template, raw, operator=name == "operator") for name, raw in USAGE_RUNS.items()}
    granted = extra["operator"][1]
    runs = [*(RUNS[n] for n in USAGE_FILES), *(iam for iam, _ in extra.values())]
    for run in runs:
        assert run["denied"] == 0 and run["unmapped"] == [], run["denials"] + run["unmapped"]
    used: dict[str, set[str]] = {}
    for run in runs:
        for principal, calls in run["calls"].items():
            used.setdefault(principal, set()).update(calls)
    problems = []
    for function, actions in sorted(granted.items()):
        for action in sorted(actions):
            if action.startswith("dynamodb:"):
                continue  # one table grant for all: checked below, across functions
            pending = NOT_EXERCISED.get((function, action))
            if action not in used.get(function, set()) and pending is None:
                problems.append(f"{function} is granted {action} but never used it: drop the grant")
            if action in used.get(function, set()) and pending is not None:
                problems.append(f"{function} now uses {action}: remove it from NOT_EXERCISED")
    table_used = {a for f in granted for a in used.get(f, set()) if a.startswith("dynamodb:")}
    problems += [
        f"no function used {a} of the table grant (infra TABLE_ACTIONS)"
        for a in sorted(TABLE_ACTIONS)
        if a not in table_used
    ]
    for function, actions in sorted(used.items()):
        if function in granted:
            problems += [f"{function} used {a} without a grant" for a in sorted(actions - granted[function])]
    assert not problems, "\n".join(problems)
    assert used.get(STATE_MACHINE_PRINCIPAL) == {"lambda:InvokeFunction"}
    assert used.get(EVENTBRIDGE_PRINCIPAL) == {"lambda:InvokeFunction"}
