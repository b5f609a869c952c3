import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeState
from tests.fakes.hyperpod import GroupSpec


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_reconciler_finds_running_nodes_and_a_round_passes_them(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=4)])
    harness.run_until(lambda: False, horizon_s=2 * 3600)
    records = harness.records("demo")
    assert len(records) == 4
    assert {r.state for r in records.values()} == {NodeState.PASSED}, [r.history for r in records.values()]
    assert fake.calls["StartClusterHealthCheck"] == 1
