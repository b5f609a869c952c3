"""Jobs in the twin (`workload.utilisation`) and what they expose: the report's `exposure`."""

from __future__ import annotations

import math
from typing import Any

from tests.fakes.hyperpod import Clock, GroupSpec
from tests.simulation.invariants import assert_invariants
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import CONTROLLER_GROUP, SimulatedHyperPod, Twin

from .conftest import BASE_CONFIG

SMALL: dict[str, Any] = {
    "name": "jobs",
    "seed": 1,
    "horizon_s": 12 * 3600,
    "cluster": {"name": "jobs"},
    "groups": [{"name": "p5", "count": 10, "arrival": {"start_s": 0, "spread_s": 1800}}],
    "hardware": {"faulty_nodes": {"transient": 1, "persistent": 1}},
    "check_duration_s": {"InstanceStress": [1200, 1500]},
}
JOBS = {"utilisation": 0.7, "job_s": [300, 1800]}


def _without(report: dict, *keys: str) -> dict:
    return {k: v for k, v in report.items() if k not in keys}


def test_utilisation_0_changes_nothing(simulate):
    """Off by default: the busy_rate workload and every draw stay as they were (the report, wall time aside)."""
    busy = {**SMALL, "workload": {"busy_rate": 0.5, "job_s": [300, 1500]}}
    before = simulate(busy)
    after = simulate({**busy, "workload": {**busy["workload"], "utilisation": 0}})
    assert _without(before, "wall_s") == _without(after, "wall_s")
    exposure = after["exposure"]
    assert exposure["jobs"] == sum(d["jobs"] for d in after["node_details"]) > 0  # busy_rate's jobs, counted
    assert exposure["jobs_on_unvalidated"] == exposure["jobs"]  # each started at ready, before any check
    assert exposure["schedulable_before_check_s"]["max"] > 0


def test_jobs_land_only_on_schedulable_nodes_and_their_exposure_is_reported(controller_template):
    scenario = Scenario.model_validate({"version": 1, **SMALL, "workload": JOBS})
    drained: list[str] = []
    with Twin(scenario, controller_template, scenario.controller_config(BASE_CONFIG)) as twin:
        sim = twin.sim
        arrive = sim.arrive

        def arrive_first_drained(group: str) -> str | None:
            lid = arrive(group)
            if lid is not None and not drained:
                twin.drain(lid)  # drained before it is ever ready: it must never run a job
                drained.append(lid)
            return lid

        sim.arrive = arrive_first_drained  # type: ignore[method-assign]
        report = build_report(twin, twin.run())
        jobs, check_runs, actions = list(sim.jobs), dict(sim.check_runs), list(sim.action_instances)
        skips = sum(1 for _, _, outcome in sim.check_outcomes if outcome == "skip")
        ready, first_check = dict(sim.ready_at), dict(sim.first_check_at)
    assert_invariants(report)

    exposure = report["exposure"]
    assert exposure["jobs"] == len(jobs) > 10 and all(j.kind == "steady" for j in jobs)
    assert exposure["jobs_on_unvalidated"] > 0 and exposure["schedulable_before_check_s"]["p95"] > 0
    assert exposure["job_hours_on_failed"] > 0  # the faulty nodes ran jobs before anyone knew
    assert exposure["skipped_by_job"] == skips > 0  # every skip here is a job that outlasted the 10 min wait

    details = {d["logical_id"]: d for d in report["node_details"]}
    (lid,) = drained
    assert details[lid]["jobs"] == 0 and details[lid]["exposure_s"] == 0
    assert not [j for j in jobs if j.logical_id == lid]
    for d in details.values():  # never more than the time from ready to the first check
        assert 0 <= d["exposure_s"] <= first_check.get(d["logical_id"], math.inf) - ready[d["logical_id"]] + 0.1
    for job in jobs:  # a job never shares its node with a check, nor outlives a reboot or replacement
        assert job.end > job.start
        for began, duration in check_runs.get(job.logical_id, []):
            assert job.end <= began or job.start >= began + duration, (job, began, duration)
        for t, kind, node, _, _ in actions:
            assert node != job.logical_id or not job.start < t < job.end, (job, kind, t)


def test_drain_resume_and_a_replacement_end_jobs():
    """The twin's Slurm without the controller: drained nodes take no job, resumed ones do, and a job in progress
    ends when HyperPod takes its instance away."""
    scenario = Scenario.model_validate({"version": 1, **SMALL, "workload": {"utilisation": 0.9, "job_s": [600, 600]}})
    sim = SimulatedHyperPod(scenario, Clock())
    name = scenario.cluster.name
    sim.create_cluster(name, [GroupSpec(CONTROLLER_GROUP, count=1, node_type="Controller"), GroupSpec("p5")])
    a, b = sim.arrive("p5"), sim.arrive("p5")
    assert a and b
    sim.drain(a)
    sim.advance(6 * 3600)
    assert not [j for j in sim.jobs if j.logical_id == a]
    on_b = [j for j in sim.jobs if j.logical_id == b]
    busy = sum(j.end - j.start for j in on_b) / (sim.clock.now() - sim.ready_at[b])
    assert 0.75 < busy <= 1.0, busy  # about the utilisation
    assert sim.schedulable[a] == [] and len(sim.schedulable[b]) == 1

    sim.resume(a)
    sim.advance(3600)
    assert [j for j in sim.jobs if j.logical_id == a]

    while sim.node(name, b).busy_until <= sim.clock.now():
        sim.advance(30)
    job = next(j for j in reversed(sim.jobs) if j.logical_id == b)
    old = sim.node(name, b).instance_id
    sim.replace_now(name, b)
    assert job.end == sim.clock.now() and sim.node(name, b).busy_until <= sim.clock.now()
    sim.advance(3 * 3600)  # replaced, Running again: jobs go on, on the new instance
    after = [j for j in sim.jobs if j.logical_id == b and j.start > job.end]
    assert after and all(j.instance_id not in ("", old) for j in after)
    assert len(sim.schedulable[b]) == 2
