"""What the controller saw a cluster do, as `hpdhc readings --as-fidelity` prints it (CLI -> the twin's API -> the
real Api handler), fed back to the twin as the scenario's `fidelity` block, gives the same verdicts: an operator's
first real cluster-hour becomes a scenario anyone can replay, the lines no rule places included."""

import json

import pytest

from hyperpod_dhc.hpdhc.cli import main
from tests.twin.local_api import endpoint, serve
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin

from .conftest import BASE_CONFIG

PLAYED = {
    "result_stream": "hostname",
    "result_format": "doc-2026-lines",
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


def _replayed(controller_template, capsys, raw):
    with _run_twin(controller_template, raw) as twin:
        first = build_report(twin, twin.run())
        server = serve(twin, 0)
        try:
            code = main(["readings", "replay", "--as-fidelity", "--endpoint", endpoint(server)])
            out = capsys.readouterr().out
        finally:
            server.shutdown()
    assert code == 0
    return first, json.loads(out[out.index("{\n") :])


def test_a_line_no_rule_places_is_carried_into_the_replay(controller_template, capsys):
    odd = "2026-03-29T18:40:00Z  info  GPU burn-in 8/8 complete (gpu_burn 60 s)"
    raw = {**SCENARIO, "fidelity": {"result_format": "doc-2026-lines", "extra_lines": [odd]}}
    first, block = _replayed(controller_template, capsys, raw)
    assert block["extra_lines"] == [odd] and block["result_format"] == "doc-2026-lines"
    with _run_twin(controller_template, {**SCENARIO, "fidelity": block}) as again:
        second = build_report(again, again.run())
    verdicts = {d["logical_id"]: d["verdict"] for d in first["node_details"]}
    assert verdicts == {d["logical_id"]: d["verdict"] for d in second["node_details"]}
    assert "inconclusive" in verdicts.values(), "the line keeps nodes from passing, in the replay too"


def test_readings_as_fidelity_replay_the_same_verdicts(controller_template, capsys):
    first, block = _replayed(controller_template, capsys, SCENARIO)
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
