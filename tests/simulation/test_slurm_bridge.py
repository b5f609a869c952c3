"""The Slurm bridge in the twin (`workload.slurm_bridge`): the real agent's sync against the twin's Slurm, through
the real Api function, and `hpdhc gate node-boot`'s rule in each new node's lifecycle. What it must buy: no job on
an unvalidated node, even with the API down; no check skipped because of a job; Slurm ends up with what each
verdict says."""

from __future__ import annotations

from typing import Any

from hyperpod_dhc.deephealth.domain.nodes import NodeState
from tests.simulation.invariants import assert_invariants
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin

from .conftest import BASE_CONFIG

SYNC_S = 60.0
JOBS: dict[str, Any] = {
    "name": "bridge",
    "seed": 3,
    "horizon_s": 12 * 3600,
    "cluster": {"name": "bridge"},
    "groups": [{"name": "p5", "count": 10, "arrival": {"start_s": 0, "spread_s": 1800}}],
    "hardware": {"faulty_nodes": {"transient": 1, "persistent": 1}},
    "check_duration_s": {"InstanceStress": [1200, 1500]},
    "workload": {"utilisation": 0.8, "job_s": [1800, 3600], "sync_interval_s": SYNC_S},
}


def _run(controller_template: Any, bridge: bool) -> tuple[dict, dict[str, Any], dict[str, Any]]:
    raw = {**JOBS, "workload": {**JOBS["workload"], "slurm_bridge": bridge}}
    scenario = Scenario.model_validate({"version": 1, **raw})
    with Twin(scenario, controller_template, scenario.controller_config(BASE_CONFIG)) as twin:
        report = build_report(twin, twin.run())
        if twin.bridge:
            twin.bridge.sync()  # the run ends at the last verdict: Slurm hears of it at the bridge's next pass
        records = twin.records("bridge")
        slurm = twin.bridge.slurm if twin.bridge else None
        cluster = twin.cluster_model
        finals = {
            key: (
                r.state,
                cluster.nodes[key].logical_id in twin.sim.drained,
                slurm.reasons.get(cluster.nodes[key].instance_id) if slurm else None,
                slurm.features.get(cluster.nodes[key].instance_id, ()) if slurm else (),
                cluster.nodes[key].logical_id in twin.sim.locked,
            )
            for key, r in records.items()
            if key in cluster.nodes
        }
        counts = {
            "syncs": twin.bridge.syncs if twin.bridge else 0,
            "failed": twin.bridge.failed_syncs if twin.bridge else 0,
        }
    assert_invariants(report)
    return report, finals, counts


def test_the_bridge_keeps_jobs_off_unvalidated_nodes_and_slurm_ends_with_each_verdict(controller_template):
    without, _, _ = _run(controller_template, bridge=False)
    report, finals, counts = _run(controller_template, bridge=True)
    exposed, bridged = without["exposure"], report["exposure"]
    # Without it, a node takes jobs for as long as it waits for its round; with it (and the gate at boot), never.
    assert exposed["schedulable_before_check_s"]["max"] > 10 * SYNC_S and exposed["jobs_on_unvalidated"] > 0
    assert bridged["schedulable_before_check_s"]["max"] == 0
    assert bridged["jobs_on_unvalidated"] == 0 and bridged["skipped_by_job"] == 0
    assert report["false_pass"] == 0 and counts["syncs"] > 0 and counts["failed"] == 0
    for state, drained, reason, features, locked in finals.values():
        if state == NodeState.PASSED:
            assert not drained and not locked and "HealthCheck:Passed" in features
        else:  # replaced then failed again, quarantined...: locked and drained, with a reason the controller owns
            assert locked and drained and reason is not None and reason.startswith("hpdhc:")
            assert "HealthCheck:Failed" in features or "HealthCheck:Skipped" in features
    assert any(state == NodeState.PASSED for state, *_ in finals.values())


def test_with_the_controller_unreachable_new_nodes_stay_drained_and_nothing_is_resumed(controller_template,
                                                                                       monkeypatch):  # fmt: skip
    from tests.twin import slurm

    def unreachable(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the API is unreachable")

    monkeypatch.setattr(slurm.TwinController, "_call", unreachable)
    report, finals, counts = _run(controller_template, bridge=True)
    assert counts["syncs"] > 0 and counts["failed"] == counts["syncs"]
    # Fail closed: each new node was locked and drained at boot (the gate needs no API); no pass reaches Slurm.
    assert all(drained and locked for _, drained, _, _, locked in finals.values())
    assert not any(features for _, _, _, features, _ in finals.values())
    assert report["false_pass"] == 0 and report["exposure"]["jobs_on_unvalidated"] == 0
