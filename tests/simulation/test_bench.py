"""`make bench` stays runnable: every controller on a tiny scenario, through `tests/bench/run.py`'s own functions.

Nothing here is timed; the figures are in docs/BENCHMARKS.md. The floor itself: test_bench_floor.py."""

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


# One worker runs the module, so its one run of every controller (`tiny`) is made once, not once a worker.
pytestmark = pytest.mark.xdist_group("bench_tiny")

# Jobs on the nodes, so the exposure rows count something.
TINY_JOBS = {**TINY, "workload": {"utilisation": 0.6, "job_s": [600, 3600]}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, controller_template):
    path = tmp_path_factory.mktemp("bench") / "bench-tiny.json"
    path.write_text(json.dumps(TINY_JOBS))
    return run.run_scenario(str(path), controllers=run.CONTROLLERS, template=controller_template)


def test_every_controller_gives_every_node_a_verdict(tiny):
    assert set(tiny) == set(run.CONTROLLERS)
    for side in tiny.values():
        assert side.nodes == 6 and side.no_verdict == 0, side.controller
        assert sum(side.verdicts.values()) == 6
        assert side.latency_s.n == 6 and not side.latency_s.max_lb, "every latency is measured, none a lower bound"
        assert side.ratio.p50 >= 0.99, "no verdict before the check itself could end"
        assert side.floor_ratio_p95 is not None and side.over_floor is not None, side.controller
        assert set(side.exposure) >= {"schedulable_before_check_s", "jobs", "jobs_on_unvalidated", "skipped_by_job"}
        if side.controller == "on-start":
            continue
        assert side.calls > 0 and side.state_transitions > 0 and side.lambda_invocations > 0
        assert side.cost_per_1000()["total"] > 0
    naive_calls = tiny["naive"].api_calls
    assert naive_calls.get("BatchRebootClusterNodes") and naive_calls.get("BatchReplaceClusterNodes"), "faults"
    assert tiny["ours"].invocations_by_function, "the harness's own invocations and the tasks' are counted"
    assert tiny["ours"].exposure["jobs"] > 0, "the workload ran jobs"


def test_on_start_checks_alone_cost_nothing_and_tell_nothing(tiny):
    """HyperPod's own checks, no controller: no call, a node is never schedulable before its check, the verdict
    is the check's end (ratio 1.0), and the row says what an operator does not get."""
    side = tiny["on-start"]
    assert side.calls == 0 and side.state_transitions == 0 and side.executions == 0
    assert side.ratio.p50 == side.ratio.max == 1.0
    assert side.exposure["schedulable_before_check_s"]["max"] == 0
    assert set(side.verdicts) <= {"passed", "failed"} and side.verdicts.get("failed"), "faulty nodes stay failed"
    assert any("no recovery" in note or "nothing recovers" in note for note in side.notes)


def test_observe_on_start_watches_instead_of_starting_checks(tiny):
    """Every group's nodes pass or fail HyperPod's on-start check; ours starts checks only for what comes after."""
    observed, ours = tiny["observe-on-start"], tiny["ours"]
    assert observed.wait_s.p50 == 0, "the first check began the moment the node was ready"
    assert observed.api_calls.get("StartClusterHealthCheck", 0) < ours.api_calls.get("StartClusterHealthCheck", 0)


def test_the_table_and_the_targets_have_their_shape(tiny):
    rows = run.scenario_rows("bench-tiny", tiny)
    assert rows[0] == ["bench-tiny", *run.CONTROLLERS, "naive / ours"]
    assert all(len(r) == len(run.CONTROLLERS) + 2 for r in rows)
    labels = [r[0].strip() for r in rows]
    floor = tiny["ours"].floor_ratio_p95
    for label in (
        "nodes with a verdict",
        "ready->verdict p50 / p95 / max",
        f"p95 / floor {floor:.2f}",
        "schedulable before 1st check p50/p95/max",
        "jobs started / on unvalidated nodes",
        "job-hours / on failing hardware",
        "checks skipped by a job",
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
    assert f"(floor {floor:.2f}:" in text and "(on-start: HyperPod's own checks" in text
    targets = run.targets({"bench-tiny": tiny})
    assert {t.scenario for t in targets} == {"bench-128", "bench-tiny", "bench-10000", "bench-20000"}
    assert all(t.met is None for t in targets if t.scenario != "bench-tiny"), "scenarios not run are not judged"
    assert all(isinstance(t.met, bool) or "lower bound" in t.why for t in targets if t.scenario == "bench-tiny")
    doc = json.loads(json.dumps({c: s.to_json() for c, s in tiny.items()}))  # --json can always write it
    assert doc["ours"]["ratio_p95_over_floor"] == round(tiny["ours"].over_floor, 3)


def test_seeds_give_ours_against_the_floor_per_seed(tmp_path, capsys):
    path = tmp_path / "bench-tiny.json"
    path.write_text(json.dumps(TINY))
    assert run.main(["--scenario", str(path), "--seeds", "2", "--first-seed", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["seed"] for r in doc["seeds"]] == [5, 6]
    for r in doc["seeds"]:
        assert r["verdicts"] == r["nodes"] == 6
        assert r["over_floor"] == pytest.approx(r["ratio_p95"] / r["floor"], abs=0.01)
    assert doc["median"]["floor"] is not None and doc["median"]["over_floor"] is not None


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
