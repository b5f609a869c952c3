"""Revalidation that never touches a job, on the twin: passed nodes re-checked every day while the bridge reports
them idle, with jobs on 70% of every node's time. bench-128-jobs-revalidate.json is the 7-day run of this
(docs/BENCHMARKS.md)."""

from __future__ import annotations

from typing import Any

import pytest

SCENARIO: dict[str, Any] = {
    "name": "revalidate",
    "seed": 7,
    "horizon_s": 2.5 * 86400,
    "run_to_horizon": True,
    "cluster": {"name": "reval", "node_recovery": "None"},
    "groups": [{"name": "p5", "count": 24, "arrival": {"start_s": 0, "spread_s": 1800}}],
    "hardware": {"transient_fault_rate": 0.03, "persistent_fault_rate": 0.015},
    "check_duration_s": {"InstanceStress": [1200, 2400]},
    "workload": {"utilisation": 0.7, "job_s": [1800, 14400], "slurm_bridge": True},
    "policy": {"defaults": {"revalidate_every_days": 1, "revalidate_max_fraction": 0.1}},
}


@pytest.mark.heavy(160)
def test_revalidation_rechecks_passed_nodes_only_when_idle_and_no_job_pays_for_it(simulate):
    report = simulate(SCENARIO)  # the shared invariants: no false or untested pass, every node has its verdict
    revalidation, exposure = report["revalidation"], report["exposure"]
    # 24 nodes due from day 1, at most 2 out at once: a node re-checked for every node of the group.
    assert revalidation["revalidated"] >= 24 and revalidation["failed"] == 0, revalidation
    assert revalidation["job_won"] > 0, revalidation  # queued in service: jobs that reached one first won it back
    assert revalidation["jobs_moved"] > 0, revalidation  # a job that found one in its check ran on another node
    assert revalidation["jobs_preempted"] == 0, revalidation  # no job killed
    assert revalidation["jobs_delayed"] == 0, revalidation  # none waited longer than one bridge interval
    assert exposure["jobs_on_unvalidated"] == 0 and exposure["job_hours_on_failed"] == 0, exposure
    assert report["exposure"]["skipped_by_job"] == 0  # no revalidation check queued behind a job
