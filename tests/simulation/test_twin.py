"""The twin itself: it runs exactly the deployed definition, and its CLI and scenario file behave."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpdhc.cli import main
from tests.harness.asl import round_definition
from tests.twin.__main__ import DEMO_SCENARIO, REPO_ROOT
from tests.twin.scenario import ScenarioError, load_scenario
from tests.twin.simulation import Twin

from .conftest import BASE_CONFIG

ASL_FILE = REPO_ROOT / "infra" / "statemachines" / "check_round.asl.json"
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
        for f in controller_template.functions:  # deephealth.handlers.claim_round -> ${ClaimRoundFunctionArn}
            task = "".join(w.capitalize() for w in f.handler.split(".")[-2].split("_"))
            expected = expected.replace("${" + task + "FunctionArn}", twin.function_arns[f.logical_id])
        assert deployed == expected, "the ASL file, only its ARN placeholders filled in"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"colour": "blue"}, "colour"),
        ({"groups": [{"name": "p5", "count": 3, "arival": {}}]}, "groups.0.arival"),
        ({"hardware": {"transient_fault_rate": 2}}, "hardware.transient_fault_rate"),
        ({"faults": {"second_check_request": "queue"}}, "faults.second_check_request"),
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
    assert report["version"] == 3 and report["scenario"] == "tiny" and report["nodes"] == 3
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
    }
    assert report["verdicts"]["passed"] == 3 and report["api_calls"]["StartClusterHealthCheck"] >= 1
    assert report["step_functions"]["state_transitions"] > 0
    assert {"logical_id", "group", "truth", "ready_at_s", "verdict", "verdict_at_s", "actions", "instance_ids"} <= set(
        report["node_details"][0]
    )
