"""The controller side of the Slurm bridge (pure): which groups isolate new nodes, a node's Slurm name, what an
occupancy report writes, and when a round waits for a node's job."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState
from hyperpod_dhc.deephealth.domain.observe import Observation, observe
from hyperpod_dhc.deephealth.domain.policy import ConfigError, GroupPolicy, NodeRecovery, parse_config
from hyperpod_dhc.deephealth.domain.slurm import (
    BUSY_FRESH_S,
    JOB_WAIT_S,
    MAX_REPORTED_NODES,
    OCCUPANCY_REFRESH_S,
    SYNC_INTERVAL_S,
    Desired,
    Feature,
    OccupancyReport,
    desired_state,
    job_wait,
    reason,
    slurm_names,
    waits_for_job,
    with_occupancy,
)

A, B = "i-0000000000000000a", "i-0000000000000000b"
HOST_A, HOST_B = "ip-10-1-2-3.ec2.internal", "ip-10-1-9-9.ec2.internal"


def rec(state=NodeState.PENDING, **kw) -> NodeRecord:
    return NodeRecord(**{"cluster": "c", "key": "lid", "group": "gpu", "instance_id": A, "state": state, **kw})


# ---------------------------------------------------------------- isolate_until_checked


@pytest.mark.parametrize(
    ("policy", "isolating"),
    [
        ({}, True),  # on-demand: the controller checks every new node, so it waits drained for its check
        ({"dry_run": True}, False),  # never checked: never drained
        ({"mode": "off"}, False),
        ({"mode": "observe-on-start"}, False),  # HyperPod's own checks run before the node is in service
        ({"isolate_until_checked": False}, False),
        ({"mode": "observe-on-start", "isolate_until_checked": True}, True),
    ],
)
def test_a_group_isolates_its_new_nodes_as_set_else_when_the_controller_checks_them(policy, isolating):
    assert GroupPolicy.model_validate(policy).isolating is isolating
    assert GroupContext(GroupPolicy.model_validate(policy)).isolating is isolating


def test_a_controller_or_login_group_never_isolates_even_when_its_policy_says_so():
    assert not GroupContext(GroupPolicy(isolate_until_checked=True), worker=False).isolating


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"defaults": {"mode": "off", "isolate_until_checked": True}}, 'mode is "off"'),
        ({"groups": {"gpu": {"dry_run": True, "isolate_until_checked": True}}}, "dry_run never starts a check"),
        # The default says isolate; a group that turns dry-run on must say false too.
        ({"defaults": {"isolate_until_checked": True}, "groups": {"c/gpu": {"dry_run": True}}}, "policy of c/gpu"),
        ({"defaults": {"isolate_until_checked": "sometimes"}}, "defaults.isolate_until_checked"),
    ],
)
def test_isolating_nodes_that_are_never_checked_fails_naming_the_key(raw, named):
    with pytest.raises(ConfigError, match="isolate_until_checked") as err:
        parse_config(raw)
    assert named in str(err.value)


def test_a_dry_run_group_that_sets_it_false_is_valid_and_unset_inherits_the_default():
    config = parse_config({"defaults": {"isolate_until_checked": False}, "groups": {"gpu": {"dry_run": True}}})
    assert not config.policy_for("c", "gpu").isolating and not config.policy_for("c", "cpu").isolating
    assert parse_config({}).policy_for("c", "cpu").isolating


def test_a_pending_node_of_a_group_that_does_not_isolate_keeps_taking_jobs():
    groups = {"on-demand": GroupPolicy(), "dry-run": GroupPolicy(dry_run=True)}
    states = {name: desired_state(rec(), GroupContext(p).isolating) for name, p in groups.items()}
    assert states == {
        "on-demand": Desired(reason("wait", rec(), "deep health check not passed yet"), Feature.IN_PROGRESS),
        "dry-run": Desired(None, Feature.IN_PROGRESS),
    }


# ---------------------------------------------------------------- the node's Slurm name


GROUPS = {"gpu": GroupContext(GroupPolicy())}


def look(now=1000.0) -> Observation:
    return Observation(now=now, node_recovery=NodeRecovery.NONE, trigger="t", may_judge=False, groups=GROUPS)


def snap(iid=A, host: str | None = HOST_A, status="Running") -> NodeSnapshot:
    return NodeSnapshot(group="gpu", instance_id=iid, logical_id="lid", status=status, hostname=host)


def test_a_new_record_carries_its_hostname_and_a_replacement_brings_its_own():
    record, _ = observe("c", None, snap(), look())
    assert record.hostname == HOST_A
    record = record.model_copy(update={"version": 1})
    replaced, decision = observe("c", record, snap(B, HOST_B), look(1100.0))
    assert (replaced.instance_id, replaced.hostname, replaced.state) == (B, HOST_B, NodeState.PENDING)
    assert "replaced" in decision.reason


def test_a_record_older_than_the_field_gets_its_hostname_once_and_no_other_change():
    stored = {"cluster": "c", "key": "lid", "group": "gpu", "logical_id": "lid", "instance_id": A, "version": 3}
    old = NodeRecord.model_validate_json(json.dumps({**stored, "state": "passed", "status": "Running"}))
    assert (old.hostname, old.slurm_busy, old.slurm_busy_at) == (None, None, None)  # old items still load
    learned, decision = observe("c", old, snap(), look())
    assert learned.hostname == HOST_A and learned.state == NodeState.PASSED
    assert (decision.from_state, decision.to_state, decision.reason) == ("passed", "passed", f"hostname {HOST_A}")
    assert observe("c", learned, snap(), look(1100.0)) is None  # once
    assert observe("c", learned, snap(host=None), look(1100.0)) is None  # a listing without one keeps it


# ---------------------------------------------------------------- occupancy reports


def test_a_report_names_nodes_by_their_short_hostname_and_a_reused_name_is_the_live_nodes():
    gone = rec(NodeState.GONE, key="old", hostname=HOST_A, updated_at=2000.0)
    live = rec(key="new", hostname=HOST_A, updated_at=1000.0)
    other = rec(NodeState.PASSED, key="other", hostname=HOST_B)
    unnamed = rec(key="unnamed")
    assert {n: [r.key for r in rs] for n, rs in slurm_names([live, gone, other, unnamed]).items()} == {
        "ip-10-1-2-3": ["new"],
        "ip-10-1-9-9": ["other"],
    }


def test_only_a_waiting_node_is_written_when_its_occupancy_changes_or_is_due_a_refresh():
    now = 10_000.0
    assert with_occupancy(rec(NodeState.PASSED), True, None, now) is None  # only a node waiting for a round uses it
    assert with_occupancy(rec(NodeState.CHECKING), False, None, now) is None
    first = with_occupancy(rec(), True, None, now)
    assert (first.slurm_busy, first.slurm_busy_at) == (True, now)
    assert with_occupancy(first, True, None, now + SYNC_INTERVAL_S) is None  # unchanged: nothing to write
    assert with_occupancy(first, False, None, now + SYNC_INTERVAL_S).slurm_busy is False  # changed: written at once
    refreshed = with_occupancy(first, True, None, now + OCCUPANCY_REFRESH_S)
    assert (refreshed.slurm_busy, refreshed.slurm_busy_at) == (True, now + OCCUPANCY_REFRESH_S)
    assert refreshed.version == first.version  # the write is conditional on the version read


@given(st.floats(0, 3 * 3600), st.booleans())
def test_a_bridge_that_reports_every_sync_keeps_a_busy_node_waiting(age, busy):
    """Whatever the age of the last write, the next report either leaves a record that still waits or writes one."""
    record = rec(slurm_busy=busy, slurm_busy_at=0.0)
    now = age + SYNC_INTERVAL_S
    written = with_occupancy(record, True, None, now)
    assert waits_for_job(written or record, now)


def test_a_busy_node_waits_only_while_the_report_is_fresh():
    assert waits_for_job(rec(slurm_busy=True, slurm_busy_at=0.0), BUSY_FRESH_S)
    assert not waits_for_job(rec(slurm_busy=True, slurm_busy_at=0.0), BUSY_FRESH_S + 0.5)  # a dead bridge
    assert not waits_for_job(rec(slurm_busy=False, slurm_busy_at=0.0), 1.0)
    assert not waits_for_job(rec(), 1.0)  # never reported: as before the bridge
    assert BUSY_FRESH_S > OCCUPANCY_REFRESH_S + SYNC_INTERVAL_S  # a live bridge's refresh arrives in time


def test_a_round_waits_for_busy_nodes_until_the_first_report_goes_stale_at_most_job_wait_s():
    now = 10_000.0
    fresh = rec(slurm_busy=True, slurm_busy_at=now)
    old = rec(slurm_busy=True, slurm_busy_at=now - BUSY_FRESH_S + 10.5)
    assert job_wait([fresh], now) == JOB_WAIT_S
    assert job_wait([fresh, old], now) == 11 and not waits_for_job(old, now + 11)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"nodes": []}, "too_short"),
        ({"nodes": [{"node": f"ip-10-0-{i // 250}-{i % 250}", "busy": True} for i in range(1001)]}, "too_long"),
        ({"nodes": [{"node": "ip-10-1-2-3.ec2.internal", "busy": True}]}, "string_pattern_mismatch"),
        ({"nodes": [{"node": "ip-10-1-2-3; scontrol", "busy": True}]}, "string_pattern_mismatch"),
        ({"nodes": [{"node": "-ip", "busy": True}]}, "string_pattern_mismatch"),
        ({"nodes": [{"node": "ip-10-1-2-3", "busy": "yes"}]}, "bool_type"),
        ({"nodes": [{"node": "ip-10-1-2-3", "busy": 1}]}, "bool_type"),
        ({"nodes": [{"node": "ip-10-1-2-3", "busy": True, "jobs": 3}]}, "extra_forbidden"),
        ({"nodes": [{"node": "ip-10-1-2-3", "busy": True}], "cluster": "x"}, "extra_forbidden"),
        ({"nodes": [{"node": "ip-10-1-2-3", "busy": True}, {"node": "ip-10-1-2-3", "busy": False}]}, "value_error"),
    ],
)
def test_a_bad_report_is_refused_naming_the_problem(body, problem):
    with pytest.raises(ValidationError) as err:
        OccupancyReport.model_validate(body)
    assert problem in {e["type"] for e in err.value.errors()}


def test_a_full_report_is_valid():
    body = {"nodes": [{"node": f"ip-10-0-{i // 250}-{i % 250}", "busy": i % 2 == 0} for i in range(1000)]}
    assert len(OccupancyReport.model_validate(body).nodes) == MAX_REPORTED_NODES
