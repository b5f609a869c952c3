"""`make bench` stays runnable: both controllers on a tiny scenario, through `tests/bench/run.py`'s own functions.

Nothing here is timed; the figures are in docs/BENCHMARKS.md."""

import io
import json

import pytest

from tests.bench import run
from tests.bench.naive import NaiveController
from tests.simulation.conftest import BASE_CONFIG
from tests.twin.scenario import Scenario

TINY = {
    "version": 1,
    "name": "bench-tiny",
    "seed": 11,
    "horizon_s": 24 * 3600,
    "cluster": {"name": "tiny", "node_recovery": "None"},
    "groups": [{"name": "p5", "count": 6, "arrival": {"start_s": 0, "spread_s": 1800}}],
    # Faults on purpose, so both controllers reboot, replace and re-check.
    "hardware": {"transient_fault_rate": 0.25, "persistent_fault_rate": 0.2, "replacement_fault_rate": 0.3},
    "check_duration_s": {"InstanceStress": [600, 900]},
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, controller_template):
    path = tmp_path_factory.mktemp("bench") / "bench-tiny.json"
    path.write_text(json.dumps(TINY))
    return run.run_scenario(str(path), template=controller_template)


def test_both_controllers_give_every_node_a_verdict(tiny):
    assert set(tiny) == {"ours", "naive"}
    for side in tiny.values():
        assert side.nodes == 6 and side.no_verdict == 0, side.controller
        assert sum(side.verdicts.values()) == 6
        assert side.latency_s.n == 6 and not side.latency_s.max_lb, "every latency is measured, none a lower bound"
        assert side.ratio.p50 >= 1.0, "no verdict before the check itself could end"
        assert side.calls > 0 and side.state_transitions > 0 and side.lambda_invocations > 0
        assert side.cost_per_1000()["total"] > 0
    naive_calls = tiny["naive"].api_calls
    assert naive_calls.get("BatchRebootClusterNodes") and naive_calls.get("BatchReplaceClusterNodes"), "faults"
    assert tiny["ours"].invocations_by_function, "the harness's own invocations and the tasks' are counted"


def test_the_table_and_the_targets_have_their_shape(tiny):
    rows = run.scenario_rows("bench-tiny", tiny)
    assert rows[0] == ["bench-tiny", "ours", "naive", "naive / ours"]
    assert all(len(r) == 4 for r in rows)
    labels = [r[0].strip() for r in rows]
    for label in (
        "nodes with a verdict",
        "ready->verdict p50 / p95 / max",
        "SageMaker calls per node",
        "StartClusterHealthCheck",
        "state transitions per node",
        "Lambda invocations per node",
        "est. cost per 1,000 nodes (USD)",
        "wall time (s)",
    ):
        assert label in labels, label
    out = io.StringIO()
    run.render({"bench-tiny": tiny}, run.header(), out)
    text = out.getvalue()
    assert "targets" in text and "bench-tiny" in text
    targets = run.targets({"bench-tiny": tiny})
    assert {t.scenario for t in targets} == {"bench-128", "bench-tiny", "bench-10000"}
    assert all(t.met is None for t in targets if t.scenario != "bench-tiny"), "scenarios not run are not judged"
    assert all(isinstance(t.met, bool) or "lower bound" in t.why for t in targets if t.scenario == "bench-tiny")
    json.dumps({c: s.to_json() for c, s in tiny.items()})  # --json can always write it


def test_coalesced_refusals_count_exactly_what_real_calls_would():
    """The naive baseline's speed-up changes nothing it measures: same calls, verdicts, times and model."""
    scenario = Scenario.model_validate({**TINY, "groups": [{**TINY["groups"][0], "count": 10}]})
    config = scenario.controller_config(BASE_CONFIG)
    fast = NaiveController(scenario, config, coalesce=True).run()
    exact = NaiveController(scenario, config, coalesce=False).run()
    assert fast.coalesced_refusals > 0 and exact.coalesced_refusals == 0
    assert fast.sim.calls == exact.sim.calls
    assert (fast.transitions, fast.invocations) == (exact.transitions, exact.invocations)

    def verdicts(result):
        return sorted((r.logical_id, r.verdict, r.verdict_at, r.actions) for r in result.runs.values())

    assert verdicts(fast) == verdicts(exact)
