"""Reconcile's quiet sweep of a resting cluster: when the probe may stand in for a whole listing, and what it
counts as new."""

import pytest

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.late_evidence import SCAN_S
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState, Verdict
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy
from hyperpod_dhc.deephealth.domain.quiet_sweep import (
    ARRIVALS_LOOK_GAP_S,
    LOST_EVENT_GAP_S,
    PROBE_MARGIN_S,
    WHOLE_SWEEP_S,
    arrivals_look_gap,
    news,
    probe_after,
    resting,
)

GROUPS = {"gpu": GroupContext(GroupPolicy())}
NOW = 10_000_000.0


def rec(key: str, state: NodeState = NodeState.PASSED, **kw) -> NodeRecord:
    return NodeRecord(cluster="c", key=key, logical_id=key, group="gpu", instance_id=f"i-{key}", state=state,
                      status="Running", version=1, **kw)  # fmt: skip


def snap(key: str, instance: str | None = None, status: str = "Running") -> NodeSnapshot:
    return NodeSnapshot(group="gpu", logical_id=key, instance_id=instance or f"i-{key}", status=status)


def test_a_cluster_of_final_states_rests():
    records = [rec("a"), rec("b", NodeState.QUARANTINED), rec("c", NodeState.GONE), rec("d", NodeState.INCONCLUSIVE)]
    assert resting(records, GROUPS, NOW)


@pytest.mark.parametrize("state", [NodeState.PENDING, NodeState.CHECKING, NodeState.RECOVERY_DUE, NodeState.RECOVERING])
def test_a_node_that_waits_on_a_look_keeps_the_whole_listing(state):
    assert not resting([rec("a"), rec("b", state)], GROUPS, NOW)


def test_a_pass_whose_lines_are_still_read_keeps_the_whole_listing():
    """Its revisit (an hour) and its failure scan (a day) run in whole looks."""
    recent = rec("a", verdict=Verdict.PASSED, check_started_at=NOW - 7200, verdict_at=NOW - 600)
    assert not resting([recent], GROUPS, NOW)
    scanned = rec("a", verdict=Verdict.PASSED, check_started_at=NOW - SCAN_S, verdict_at=NOW - SCAN_S + 60)
    assert not resting([scanned], GROUPS, NOW)
    old = rec("a", verdict=Verdict.PASSED, check_started_at=NOW - 2 * SCAN_S, verdict_at=NOW - SCAN_S - 1)
    assert resting([old], GROUPS, NOW)


def test_the_probe_starts_before_the_last_whole_listing_and_never_stands_in_for_it_past_the_sweep():
    assert probe_after(None, NOW) is None  # never listed whole: list it whole
    assert probe_after(NOW - 300, NOW) == NOW - 300 - PROBE_MARGIN_S
    assert probe_after(NOW - WHOLE_SWEEP_S, NOW) is None


def test_news_is_what_the_records_do_not_already_say():
    records = {"a": rec("a"), "b": rec("b")}
    assert news([snap("a"), snap("b")], records) == []
    assert news([snap("a"), snap("n")], records) == ["n"]  # a node with no record
    assert news([snap("a", instance="i-new")], records) == ["a"]  # replaced
    assert news([snap("b", status="Failure")], records) == ["b"]  # its status moved


def test_reconcile_looks_for_arrivals_5_minutes_after_an_event_it_was_told_of_else_only_as_the_lost_event_net():
    assert arrivals_look_gap(noted_at=None, looked_at=1000.0) == LOST_EVENT_GAP_S
    assert arrivals_look_gap(noted_at=900.0, looked_at=1000.0) == LOST_EVENT_GAP_S  # that look recorded it
    assert arrivals_look_gap(noted_at=1000.0, looked_at=1000.0) == ARRIVALS_LOOK_GAP_S
    assert arrivals_look_gap(noted_at=1100.0, looked_at=None) == ARRIVALS_LOOK_GAP_S
    assert ARRIVALS_LOOK_GAP_S < LOST_EVENT_GAP_S
