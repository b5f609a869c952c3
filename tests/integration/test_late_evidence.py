"""Late evidence end to end, through the deployed controller and CloudWatch Logs as moto plays it (its filter
patterns as CloudWatch documents them, tests/harness/moto_patches.py): a failure of a passed node's own, delivered
hours after its revisit ended, is found by the whole looks' server-filtered scan and takes the pass back; a
failure on a stream that is no node's costs the nodes it falls on one re-check."""

import json

import pytest

from hyperpod_dhc.deephealth.adapters.result_logs import FAILURE_FILTER
from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES, NodeState
from tests.fakes.hyperpod import GroupSpec
from tests.fakes.readings import Readings
from tests.harness.moto_patches import CloudWatchFilter

CONFIG = {"clusters": ["demo"], "defaults": {"gather_window_s": 0}}
FAULT = "Encountered FaultyInstance. Replace the Instance. ERROR: Bandwidth has less than threshold"


def _final(harness, expected):
    records = harness.records("demo")
    return len(records) == expected and all(r.state in FINAL_STATES for r in records.values())


def _log(fake, stream: str, stamp: float, message: str) -> None:
    cluster = fake._clusters["demo"]
    fake._append_log(f"/aws/sagemaker/Clusters/demo/{cluster.cluster_id}", f"DeepHealthCheckResults/{stream}", stamp,
                     message)  # fmt: skip


@pytest.mark.controller_config(CONFIG)
def test_a_failure_delivered_three_hours_late_is_caught_by_the_scan(harness, fake, monkeypatch):
    patterns: list[str] = []
    init = CloudWatchFilter.__init__
    monkeypatch.setattr(CloudWatchFilter, "__init__", lambda self, p: (patterns.append(p), init(self, p))[1])
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    harness.run_until(lambda: _final(harness, 2), horizon_s=6 * 3600)
    passed = sorted(harness.records("demo").values(), key=lambda r: r.key)
    assert {r.state for r in passed} == {NodeState.PASSED}
    node = passed[0]
    harness.advance(3 * 3600)  # the revisit (1 h) is long over
    assert harness.records("demo")[node.key].state == NodeState.PASSED
    # Stamped inside its window, delivered now: 3 h late.
    _log(fake, node.instance_id, node.check_left_at, json.dumps({"level": "error", "msg": FAULT}))
    harness.run_until(lambda: harness.records("demo")[node.key].state != NodeState.PASSED, horizon_s=1800)
    reversed_ = harness.records("demo")[node.key]
    assert reversed_.state != NodeState.PASSED and reversed_.reversals == 1
    assert any(h.reason.startswith("verdict reversed") for h in reversed_.history)
    assert harness.records("demo")[passed[1].key].state == NodeState.PASSED, "the other node's pass stands"
    assert FAILURE_FILTER in patterns, "the scan asks CloudWatch to filter: a prefilter, never a judge"


@pytest.mark.controller_config(CONFIG)
def test_a_failure_on_a_stream_that_is_no_nodes_costs_one_recheck_and_is_said(harness, fake):
    fake.readings = Readings(foreign_lines=True)
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    harness.run_until(lambda: _final(harness, 2), horizon_s=8 * 3600)
    records = harness.records("demo").values()
    assert {r.state for r in records} == {NodeState.PASSED}
    assert all(r.anonymous_rechecks == 1 for r in records), "each checked twice: one re-check, no more"
    assert all(r.inconclusive_count == 0 for r in records), "not counted against max_inconclusive"
    said = [n for n in harness.notifications() if "foreign_stream" in n["message"]]
    assert len(said) == 1 or len({n["message"]["foreign_stream"] for n in said}) == len(said), "once per stream"
