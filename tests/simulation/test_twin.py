"""The twin itself: it runs exactly the deployed definition, and its CLI and scenario file behave."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hyperpod_dhc.hpdhc.cli import main
from tests.fakes.hyperpod import Clock, GroupSpec
from tests.harness.asl import round_definition
from tests.twin.__main__ import DEMO_SCENARIO, REPO_ROOT
from tests.twin.scenario import ScenarioError, load_scenario
from tests.twin.simulation import CONTROLLER_GROUP, SimulatedHyperPod, Twin

from .conftest import BASE_CONFIG

ASL_FILE = REPO_ROOT / "infra" / "hyperpod_dhc" / "infra" / "statemachines" / "check_round.asl.json"
TINY = {
    "version": 1,
    "name": "tiny",
    "seed": 1,
    "horizon_s": 6 * 3600,
    "cluster": {"name": "tiny"},
    "groups": [{"name": "p5", "count": 3, "arrival": {"start_s": 0, "spread_s": 600}}],
    "check_duration_s": {"InstanceStress": [1200, 1500]},
}


def test_the_twin_runs_the_synthesized_definition_byte_for_byte(controller_template):
    scenario, config = load_scenario(DEMO_SCENARIO, BASE_CONFIG)
    with Twin(scenario, controller_template, config) as twin:
        deployed = twin.sfn.describe_state_machine(stateMachineArn=twin.state_machine_arn)["definition"]
        assert deployed == round_definition(controller_template.template, twin.function_arns)
        expected = ASL_FILE.read_text()
        for (
            f
        ) in controller_template.functions:  # hyperpod_dhc.deephealth.handlers.claim_round -> ${ClaimRoundFunctionArn}
            task = "".join(w.capitalize() for w in f.handler.split(".")[-2].split("_"))
            expected = expected.replace("${" + task + "FunctionArn}", twin.function_arns[f.logical_id])
        assert deployed == expected, "the ASL file, only its ARN placeholders filled in"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"colour": "blue"}, "colour"),
        ({"groups": [{"name": "p5", "count": 3, "arival": {}}]}, "groups.0.arival"),
        ({"hardware": {"transient_fault_rate": 2}}, "hardware.transient_fault_rate"),
        ({"fidelity": {"second_check_request": "queue"}}, "fidelity.second_check_request"),
        ({"faults": {"second_check_request": "merge"}}, "faults.second_check_request"),  # a reading now
        ({"fidelity": {"result_streams": "opaque"}}, "fidelity.result_streams"),
        ({"fidelity": {"log_lag_s": [180, 0]}}, "fidelity.log_lag_s"),
        ({"fidelity": {"transient_failure_rate": 1.5}}, "fidelity.transient_failure_rate"),
        ({"fidelity": {"busy_error": {"status": 200}}}, "fidelity.busy_error.status"),
        ({"fidelity": {"unsupported_types": {"behaviour": "ignore"}}}, "fidelity.unsupported_types.behaviour"),
        ({"fidelity": {"auto_recovery": {"delay_s": [60, 0]}}}, "fidelity.auto_recovery.delay_s"),
        ({"workload": {"busy_rate": 2}}, "workload.busy_rate"),
        ({"workload": {"job_s": [600, 60]}}, "workload.job_s"),
        ({"workload": {"jobs": 3}}, "workload.jobs"),
        ({"workload": {"utilisation": 1.5}}, "workload.utilisation"),
        ({"workload": {"utilisation": 0.5, "job_s": [0, 0]}}, "workload"),
        ({"hardware": {"faulty_nodes": {"persistent": 4}}}, "hardware.faulty_nodes"),
        ({"hardware": {"faulty_nodes": {"broken": 1}}}, "hardware.faulty_nodes.broken"),
        (
            {"incidents": [{"kind": "move-nodes", "from_group": "p5", "to_group": "g5"}]},
            "incidents.0.to_group",
        ),
        (
            {"incidents": [{"kind": "move-nodes", "from_group": "g5", "to_group": "p5"}]},
            "incidents.0.from_group",
        ),
        ({"check_duration_s": {"InstanceStress": [900, 100]}}, "check_duration_s"),
        ({"policy": {"defaults": {"mode": "sometimes"}}}, "policy: defaults.mode"),
        ({"version": 2}, "version"),
        ({"faults": {"delayed_event_rate": 1.5}}, "faults.delayed_event_rate"),
        ({"incidents": [{"kind": "earthquake"}]}, "incidents.0"),
        ({"incidents": [{"kind": "lambda-crash", "function": "Reconcile"}]}, "incidents.0.lambda-crash.function"),
        ({"incidents": [{"kind": "foreign-check", "group": "g5"}]}, "incidents.0.group"),
    ],
)
def test_bad_scenarios_exit_2_naming_the_key(tmp_path, capsys, change, named):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**TINY, **change}))
    with pytest.raises(ScenarioError, match=named.replace(".", r"\.")):
        load_scenario(path, BASE_CONFIG)
    assert main(["simulate", "--scenario", str(path)]) == 2
    assert named.split(":")[0].split(".")[0] in capsys.readouterr().err


def test_simulate_json_prints_one_report_and_nothing_else(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("hpdhc")), "simulate", "--scenario", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=tmp_path,
    )
    report = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert report["version"] == 9 and report["scenario"] == "tiny" and report["nodes"] == 3
    assert set(report) >= {
        "verdicts",
        "actions",
        "api_calls",
        "step_functions",
        "latency_s",
        "virtual_s",
        "wall_s",
        "node_details",
        "seed",
        "false_pass",
        "untested_pass",
        "false_fail",
        "by_group",
        "exposure",
    }
    assert report["false_pass"] == report["untested_pass"] == report["false_fail"] == 0
    assert report["by_group"] == {"p5": {"false_pass": 0, "untested_pass": 0, "false_fail": 0}}
    assert report["verdicts"]["passed"] == 3 and report["api_calls"]["StartClusterHealthCheck"] >= 1
    assert report["step_functions"]["state_transitions"] > 0
    assert {"logical_id", "group", "truth", "ready_at_s", "verdict", "verdict_at_s", "actions", "instance_ids"} <= set(
        report["node_details"][0]
    )
    assert {"false_pass", "untested_pass", "false_fail", "evidence", "exposure_s", "jobs"} <= set(
        report["node_details"][0]
    )
    exposure = report["exposure"]
    assert exposure["jobs"] == exposure["skipped_by_job"] == 0 and exposure["schedulable_before_check_s"]["p95"] > 0


def test_a_fidelity_block_reaches_the_fake_and_exact_fault_counts_hold(tmp_path):
    path = tmp_path / "exact.json"
    raw = {
        **TINY,
        "groups": [{"name": "p5", "count": 20}],
        "hardware": {"faulty_nodes": {"persistent": 8, "transient": 2}},
        "fidelity": {"log_lag_s": [0, 180], "second_check_request": "merge"},
        "workload": {"busy_rate": 0.3, "job_s": [600, 1200]},
    }
    path.write_text(json.dumps(raw))
    scenario, _ = load_scenario(path, BASE_CONFIG)
    assert scenario.fidelity.log_lag_s == (0.0, 180.0) and scenario.workload.busy_rate == 0.3
    sim = SimulatedHyperPod(scenario, Clock())
    assert sim.readings is scenario.fidelity
    sim.create_cluster("tiny", [GroupSpec(CONTROLLER_GROUP, count=1, node_type="Controller"), GroupSpec("p5")])
    for _ in range(20):
        sim.arrive("p5")
    assert Counter(sim.truth.values()) == {"persistent": 8, "transient": 2, "healthy": 10}
    sim.advance(60)  # instances launched: their truth is recorded per instance id
    fail = [n.instance_id for n in sim.cluster("tiny").nodes.values() if n.truth == "fail"]
    assert len(fail) == 10 and all(sim.truth_at(i, sim.clock.now()) == "fail" for i in fail)
