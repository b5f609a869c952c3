import json

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeState
from tests.fakes.hyperpod import GroupSpec


@pytest.mark.heavy(70)
@pytest.mark.controller_config({"clusters": ["big"], "defaults": {"gather_window_s": 0, "poll_interval_s": 300}})
def test_a_3000_node_round_runs_with_node_state_out_of_the_payload(harness, fake):
    fake.check_duration_s["InstanceStress"] = 900.0  # keep the poll count (and the wall time) small
    fake.create_cluster("big", [GroupSpec("p5", count=1700), GroupSpec("p4d", "ml.p4d.24xlarge", count=1300)])
    harness.reconcile_every_s = 10**9
    harness.reconcile()
    harness.wait_for_executions(timeout_s=600)

    (start,) = [params for _, op, params in fake.requests if op == "StartClusterHealthCheck"]
    configs = start["DeepHealthCheckConfigurations"]
    assert sorted(len(c["InstanceIds"]) for c in configs) == [200, 300, 500, 500, 500, 500, 500]
    records = harness.records("big")
    assert len(records) == 3000 and {r.state for r in records.values()} == {NodeState.PASSED}
    (execution,) = harness.executions()
    largest = max(len(json.dumps(e, default=str)) for e in harness.history(execution["executionArn"]))
    assert largest < 4096, "every state payload stays tiny (the cap is 256 KB)"
