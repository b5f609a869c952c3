"""Fault tolerance, end to end on the twin: one scenario per fault, each checked against the same invariants.

Each scenario is small (12 nodes, fast checks) and asserts, from the report alone, that the invariants hold
(`invariants.assert_invariants`) and that the fault was really exercised (an incident fired, faults counted).
"""

import json
import random
import types
from unittest import mock

import boto3
import botocore.endpoint
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.harness import moto_patches
from tests.twin.__main__ import REPO_ROOT
from tests.twin.faults import ApiFaults
from tests.twin.report import build_report
from tests.twin.scenario import Scenario, load_scenario
from tests.twin.simulation import Twin

from .conftest import BASE_CONFIG
from .invariants import assert_invariants, fired
from .test_scenarios import FAST_CHECKS

BASE = {
    "seed": 4,
    "horizon_s": 24 * 3600,
    "cluster": {"name": "ft", "node_recovery": "None"},
    "groups": [{"name": "p5", "count": 12, "arrival": {"start_s": 0, "spread_s": 1800}}],
    "hardware": {"transient_fault_rate": 0.25, "persistent_fault_rate": 0.15},
    "check_duration_s": FAST_CHECKS,
}


def scenario(name: str, **changes: object) -> dict:
    return {**BASE, "name": name, **changes}


SCENARIOS = {
    "duplicate-events": scenario("duplicate-events", faults={"duplicate_event_rate": 0.2}),
    "dropped-events": scenario("dropped-events", faults={"dropped_event_rate": 0.05}),
    "throttling": scenario("throttling", faults={"throttle_rate": 0.1}),
    "server-errors": scenario("server-errors", faults={"server_error_rate": 0.01}),
    "events-out-of-order": scenario("events-out-of-order", faults={"delayed_event_rate": 0.3}),
    "hyperpod-replaces-mid-check": scenario(
        "hyperpod-replaces-mid-check", incidents=[{"kind": "hyperpod-replaces-mid-check", "nodes": 2}]
    ),
    # Every node of the first check is replaced by HyperPod, so the poll that sees them leave it ends the check
    # and Recover nodes runs while the replacements are still in flight.
    "hyperpod-replaces-whole-check": scenario(
        "hyperpod-replaces-whole-check",
        groups=[{"name": "p5", "count": 8, "arrival": {"start_s": 0, "spread_s": 300}}],
        incidents=[{"kind": "hyperpod-replaces-mid-check", "nodes": 8}],
    ),
    "cluster-deleted-mid-round": scenario(
        "cluster-deleted-mid-round", incidents=[{"kind": "cluster-deleted-mid-round"}]
    ),
    "recover-nodes-crash": scenario(
        "recover-nodes-crash", incidents=[{"kind": "lambda-crash", "function": "RecoverNodes", "after_writes": 1}]
    ),
    "poll-check-crash": scenario(
        "poll-check-crash", incidents=[{"kind": "lambda-crash", "function": "PollCheck", "after_writes": 1}]
    ),
    "redeploy-mid-round": scenario("redeploy-mid-round", incidents=[{"kind": "redeploy-mid-round"}]),
    "lease-expiry": scenario("lease-expiry", incidents=[{"kind": "lease-expiry", "after_s": 1800}]),
    # Two waves: the operator re-checks a node of the first while the second waits for its check.
    "foreign-check": scenario(
        "foreign-check",
        groups=[{"name": "p5", "count": 12, "arrival": {"start_s": 0, "spread_s": 7200}}],
        incidents=[{"kind": "foreign-check", "group": "p5", "after_s": 5400}],
    ),
    # `clusters = "all"` (the example file's "every cluster in the region, present and future") and an EKS cluster
    # created after deploy, while the Slurm cluster's first round runs.
    "eks-cluster-created": scenario(
        "eks-cluster-created",
        horizon_s=8 * 3600,
        policy={"clusters": "all"},
        incidents=[{"kind": "eks-cluster-created", "nodes": 4, "after_s": 600}],
    ),
}


def test_duplicate_events_change_nothing(simulate):
    report = simulate(SCENARIOS["duplicate-events"])
    assert_invariants(report)
    assert report["events"]["duplicated"] > 0


def test_dropped_events_only_delay_nodes(simulate):
    report = simulate(SCENARIOS["dropped-events"])
    assert_invariants(report)
    assert report["events"]["dropped"] > 0


def test_throttling_on_every_api(simulate):
    report = simulate(SCENARIOS["throttling"])
    assert_invariants(report)
    # Which services the seeded draws hit depends on the call mix; every service's error shape is tested directly.
    assert {"dynamodb", "sagemaker"} <= set(report["api_faults"]), report["api_faults"]


def test_server_errors_on_every_api(simulate):
    report = simulate(SCENARIOS["server-errors"])
    assert_invariants(report)
    assert sum(report["api_faults"].values()) > 0


def test_events_out_of_order(simulate):
    report = simulate(SCENARIOS["events-out-of-order"])
    assert_invariants(report)
    assert report["events"]["delayed"] > 0


def test_hyperpod_replaces_nodes_mid_check(simulate):
    report = simulate(SCENARIOS["hyperpod-replaces-mid-check"])
    assert_invariants(report)
    replaced = fired(report, "hyperpod-replaces-mid-check")["nodes"]
    assert len(replaced) == 2
    details = {d["logical_id"]: d for d in report["node_details"]}
    for node in replaced:  # the replacement was re-checked, not judged by its predecessor's check
        assert "replace (hyperpod)" in details[node]["actions"] and len(details[node]["instance_ids"]) >= 2


def test_hyperpod_replaces_every_node_of_a_check(simulate):
    report = simulate(SCENARIOS["hyperpod-replaces-whole-check"], invariants=False)  # the failing one first, below
    assert fired(report, "hyperpod-replaces-mid-check")["nodes"]
    assert report["actions"]["conflicting"] == 0, "the failing invariant, first"
    assert_invariants(report)


def test_cluster_deleted_mid_round(simulate):
    report = simulate(SCENARIOS["cluster-deleted-mid-round"])
    assert_invariants(report)
    assert fired(report, "cluster-deleted-mid-round")["nodes_in_check"] > 0
    assert report["verdicts"]["gone"] == report["nodes"], "every node of a deleted cluster is closed out"
    assert report["actions"]["reboot"] == report["actions"]["replace"] == 0


def test_an_eks_cluster_created_after_deploy_gets_no_action_and_one_alert(simulate):
    report = simulate(SCENARIOS["eks-cluster-created"])
    eks = fired(report, "eks-cluster-created")
    assert eks["actions"] == 0, "no check, reboot or replacement asked of a cluster that is not Slurm"
    assert eks["alerts"] == 1, "one alert per cluster, however many functions and passes meet it"
    assert report["verdicts"]["no_verdict"] == 0, "the Slurm cluster is checked as before"


def test_recover_nodes_dies_after_its_first_write(simulate):
    report = simulate(SCENARIOS["recover-nodes-crash"])
    assert_invariants(report)
    (crash,) = fired(report, "lambda-crash")["crashes"]
    assert crash["writes"] == 1, "died mid-way: one node marked recovering, the others not yet"
    # Mid-round (Recover decided nodes) the round goes on polling; at its end (Recover nodes) it is abandoned.
    # Either way nothing is lost: the invariants above hold.
    assert report["step_functions"]["statuses"].get("FAILED", 0) <= 1


def test_poll_check_dies_mid_check(simulate):
    report = simulate(SCENARIOS["poll-check-crash"], invariants=False)  # the failing one first, below
    (crash,) = fired(report, "lambda-crash")["crashes"]
    assert crash["writes"] == 1
    assert report["checks"]["started_while_active"] == 0, "the failing invariant, first"
    assert_invariants(report)


def test_redeploy_mid_round(simulate):
    report = simulate(SCENARIOS["redeploy-mid-round"])
    assert_invariants(report)
    incident = fired(report, "redeploy-mid-round")
    assert incident["rounds_running"] and incident["warm_handlers"] > 0
    assert set(report["step_functions"]["statuses"]) == {"SUCCEEDED"}, "the running round went on"


def test_lease_expiry_while_a_round_is_live(simulate):
    report = simulate(SCENARIOS["lease-expiry"])
    assert_invariants(report)
    assert fired(report, "lease-expiry")["round"]


def test_foreign_check_makes_the_controller_wait(controller_template):
    """An operator's check is active (HyperPod lists its DeepHealthCheck operation InProgress) when the second
    wave's round is ready to ask: the round waits without asking (a request would only be refused), then checks
    the nodes that waited once the operation ended."""
    scenario = Scenario.model_validate({"version": 1, **SCENARIOS["foreign-check"]})
    with Twin(scenario, controller_template, scenario.controller_config(BASE_CONFIG)) as twin:
        report = build_report(twin, twin.run())
        sim = twin.sim
        (foreign,) = sim.foreign_checks
        assert foreign.ended is not None, "the foreign check ended"
        starts = [
            (at, {i for c in p["DeepHealthCheckConfigurations"] for i in c["InstanceIds"]})
            for at, op, p in sim.requests  # the controller's: the operator's request is not among them
            if op == "StartClusterHealthCheck"
        ]
        # Nodes ready before the foreign check ended, not in it and not checked before it began: the ones that
        # waited (by their instance then: a node replaced later is left out).
        checked_before = set().union(*(ids for at, ids in starts if at < foreign.requested))
        replaced = {lid for _, kind, lid, _, _ in sim.action_instances if kind == "replace"}
        waiting = (
            {
                n.instance_id
                for n in twin.cluster_model.nodes.values()
                if sim.ready_at.get(n.logical_id, foreign.ended) < foreign.ended and n.logical_id not in replaced
            }
            - checked_before
            - {i for c in foreign.configurations for i in c["InstanceIds"]}
        )
    assert_invariants(report)
    fired(report, "foreign-check")
    checks = report["checks"]
    assert checks["foreign"] == 1
    meanwhile = [at for at, _ in starts if foreign.requested <= at < foreign.ended]
    assert not meanwhile, "the controller asked for a check while the foreign one was in progress"
    assert checks["started_while_foreign_active"] == checks["rejected_while_active"] == 0
    after = [ids for at, ids in starts if at >= foreign.ended]
    assert waiting, "nodes were ready while the foreign check ran: the scenario exercised the wait"
    assert after and waiting <= after[0], "the first request after the foreign check named every node that waited"


def test_failed_event_invocations_are_retried_twice_then_given_up(simulate):
    """Every AWS call a Lambda makes is throttled: Intake and Reconcile fail, Lambda retries each event twice,
    then gives it up; the harness's own reads still work (the report is built)."""
    report = simulate(
        {
            **BASE,
            "name": "all-throttled",
            "horizon_s": 3600,
            "groups": [{"name": "p5", "count": 2}],
            "faults": {"throttle_rate": 1.0},
        },
        invariants=False,  # nodes without a verdict are the point
    )
    events = report["events"]
    assert events["failed_invocations"] > 0
    assert events["retried_invocations"] >= 2 * events["failed_invocations"]
    assert report["verdicts"]["no_verdict"] == 2 and report["step_functions"]["executions"] == 0
    assert "ssm" in report["api_faults"]


CALLS = [
    ("dynamodb", lambda c: c.describe_table(TableName="t"), "ProvisionedThroughputExceededException"),
    ("stepfunctions", lambda c: c.list_state_machines(), "ThrottlingException"),
    ("logs", lambda c: c.describe_log_groups(), "ThrottlingException"),
    ("ssm", lambda c: c.get_parameter(Name="p"), "ThrottlingException"),
    ("sagemaker", lambda c: c.list_clusters(), "ThrottlingException"),
    ("sns", lambda c: c.list_topics(), "Throttling"),
]


@pytest.mark.parametrize(("service", "call", "code"), CALLS, ids=[c[0] for c in CALLS])
def test_api_faults_speak_each_service_protocol_and_spare_the_harness(service, call, code):
    faults = ApiFaults(throttle_rate=1.0, server_error_rate=0.0, rng=random.Random(0))
    once = Config(retries={"mode": "standard", "total_max_attempts": 1})
    with mock_aws(), moto_patches.faulted_requests(faults):
        client = boto3.client(service, region_name="us-east-1", config=once)
        with moto_patches.invocation("SomeFunction"), pytest.raises(ClientError) as err:
            call(client)
        assert err.value.response["Error"]["Code"] == code
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        try:
            call(client)  # outside any invocation: moto answers (an ordinary error for a missing resource)
        except ClientError as outside:
            assert outside.response["Error"]["Code"] != code
    assert sum(faults.counts.values()) == 1


def test_server_errors_are_500s_botocore_retries():
    faults = ApiFaults(throttle_rate=0.0, server_error_rate=1.0, rng=random.Random(0))
    no_sleep = types.SimpleNamespace(sleep=lambda s: None)
    with mock_aws(), moto_patches.faulted_requests(faults), mock.patch.object(botocore.endpoint, "time", no_sleep):
        sns = boto3.client(
            "sns", region_name="us-east-1", config=Config(retries={"mode": "standard", "total_max_attempts": 2})
        )
        with moto_patches.invocation("SomeFunction"), pytest.raises(ClientError) as err:
            sns.list_topics()
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert faults.counts["sns"] == 2, "botocore retried the 5xx once"


def test_the_faults_example_scenario_is_valid():
    scenario, _ = load_scenario(REPO_ROOT / "tests" / "scenarios" / "faults.json", BASE_CONFIG)
    assert scenario.incidents and scenario.faults.delayed_event_rate > 0
    assert json.loads((REPO_ROOT / "tests" / "scenarios" / "faults.json").read_text())["version"] == 1
