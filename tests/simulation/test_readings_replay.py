"""What the controller saw a cluster do, as `hpdhc readings --as-fidelity` prints it (CLI -> the twin's API -> the
real Api handler), fed back to the twin as the scenario's `fidelity` block, gives the same verdicts: an operator's
first real cluster-hour becomes a scenario anyone can replay."""

import json

import pytest

from hpdhc.cli import main
from tests.twin.local_api import endpoint, serve
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin

from .conftest import BASE_CONFIG

PLAYED = {
    "result_stream": "hostname",
    "result_format": "doc-plain",
    "failure_line": "warn",
    "log_lag_s": [0, 120],
    "failed_status": "DeepHealthCheckInProgress",
}
SCENARIO = {
    "version": 1,
    "name": "replay",
    "seed": 5,
    "horizon_s": 12 * 3600,
    "cluster": {"name": "replay", "node_recovery": "None"},
    "groups": [{"name": "p5", "count": 8, "arrival": {"start_s": 0, "spread_s": 1200}}],
    "hardware": {"transient_fault_rate": 0.25, "persistent_fault_rate": 0.25},
    "check_duration_s": {"InstanceStress": [1200, 1500]},
    "policy": {"defaults": {"gather_window_s": 0}, "cluster_defaults": {"breaker": {"max_failure_pct": 90}}},
    "fidelity": PLAYED,
}

pytestmark = pytest.mark.xdist_group("readings_replay")


def _run_twin(template, raw):
    scenario = Scenario.model_validate(raw)
    return Twin(scenario, template, scenario.controller_config(BASE_CONFIG))


def test_readings_as_fidelity_replay_the_same_verdicts(controller_template, capsys):
    with _run_twin(controller_template, SCENARIO) as twin:
        first = build_report(twin, twin.run())
        server = serve(twin, 0)
        try:
            code = main(["readings", "replay", "--as-fidelity", "--endpoint", endpoint(server)])
            out = capsys.readouterr().out
        finally:
            server.shutdown()
    assert code == 0
    block = json.loads(out[out.index("{\n") :])
    lag = block.pop("log_lag_s")
    assert block == {k: v for k, v in PLAYED.items() if k != "log_lag_s"}, "every reading played was seen"
    assert 0 <= lag[0] <= lag[1] <= 120 and lag[1] > 60
    assert first["readings"]["as_fidelity"] == {**block, "log_lag_s": lag}, "the report shows the same block"

    with _run_twin(controller_template, {**SCENARIO, "fidelity": {**block, "log_lag_s": lag}}) as again:
        second = build_report(again, again.run())
    verdicts = {d["logical_id"]: d["verdict"] for d in first["node_details"]}
    assert verdicts == {d["logical_id"]: d["verdict"] for d in second["node_details"]}
    assert first["false_pass"] == second["false_pass"] == 0
    assert {"passed", "passed_after_reboot", "replaced"} <= set(verdicts.values()), "a scenario with every path"
