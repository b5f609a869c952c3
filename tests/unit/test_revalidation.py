"""Revalidation that never touches a job (pure): which passed nodes are due, and only while the bridge is live; at
most `revalidate_max_fraction` of a group out at once, oldest verdict first; in service while queued (a job that
reaches it wins), in the lock once a round claims it; its counters."""

import pytest
from pydantic import ValidationError

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import (
    JOB_WON,
    REVALIDATION,
    NodeRecord,
    NodeState,
    Outcome,
    Verdict,
    revalidated,
    revalidating,
    transition,
)
from hyperpod_dhc.deephealth.domain.notices import notices
from hyperpod_dhc.deephealth.domain.on_demand import REVALIDATION_RETRY_S, due_for_revalidation, queue_revalidations
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy
from hyperpod_dhc.deephealth.domain.recovery import apply_verdict
from hyperpod_dhc.deephealth.domain.slurm import (
    BUSY_FRESH_S,
    CHECK,
    OWNED_PREFIX,
    Desired,
    Feature,
    desired_state,
    revalidation_idle,
)

DAY = 86400.0
NOW = 100 * DAY


def rec(key: str, verdict_at: float | None = 0.0, state: NodeState = NodeState.PASSED, group: str = "gpu", **kw):
    iid = f"i-{int(key[1:]):017x}"
    outcomes = [Outcome(at=verdict_at or 0.0, verdict=Verdict.PASSED, instance_id=iid)]
    return NodeRecord(cluster="c", key=key, logical_id=key, group=group, instance_id=iid, state=state,
                      status="Running", verdict=Verdict.PASSED, verdict_at=verdict_at, outcomes=outcomes, version=1,
                      **kw)  # fmt: skip


def groups(**policy) -> dict[str, GroupContext]:
    return {"gpu": GroupContext(GroupPolicy(**policy))}


def by_key(*records: NodeRecord) -> dict[str, NodeRecord]:
    return {r.key: r for r in records}


def queued(record: NodeRecord, now: float = NOW) -> NodeRecord:
    ((out, _),) = queue_revalidations({record.key: record}, [record.key], now)
    return out


def test_policy_defaults_to_every_28_days_a_tenth_of_a_group_and_null_or_0_is_off():
    policy = GroupPolicy()
    assert policy.revalidate_every_days == 28 and policy.revalidate_max_fraction == 0.1
    assert GroupPolicy(revalidate_every_days=None).revalidate_every_days == 0  # configurations older than the default
    assert GroupPolicy(revalidate_every_days=0).revalidate_every_days == 0
    for bad in ({"revalidate_every_days": 366}, {"revalidate_max_fraction": 0}, {"revalidate_max_fraction": 1.5}):
        with pytest.raises(ValidationError):
            GroupPolicy(**bad)


def test_due_only_with_a_live_bridge_and_never_when_off():
    records = by_key(rec("n1"), rec("n2", verdict_at=NOW - DAY))
    assert due_for_revalidation(records, groups(), NOW, bridge_seen_at=NOW - 30) == ["n1"]
    assert due_for_revalidation(records, groups(), NOW) == []  # no bridge ever pulled: no revalidation
    assert due_for_revalidation(records, groups(), NOW, bridge_seen_at=NOW - BUSY_FRESH_S - 1) == []  # silent
    assert due_for_revalidation(records, groups(revalidate_every_days=0), NOW, bridge_seen_at=NOW) == []


def test_at_most_the_fraction_of_a_group_is_out_at_once_oldest_verdict_first():
    records = by_key(*(rec(f"n{i}", verdict_at=float(30 - i)) for i in range(1, 31)))  # n30 passed first
    due = due_for_revalidation(records, groups(), NOW, bridge_seen_at=NOW)
    assert due == ["n30", "n29", "n28"]  # floor(0.1 x 30)
    records |= {k: queued(records[k]) for k in due[:2]}  # two already out for it: room for one more
    assert due_for_revalidation(records, groups(), NOW, bridge_seen_at=NOW) == ["n28"]
    small = by_key(rec("n1"), rec("n2"))
    assert due_for_revalidation(small, groups(), NOW, bridge_seen_at=NOW) == ["n1"]  # at least one


def test_a_node_someone_holds_or_a_job_just_won_back_is_not_due():
    held = rec("n1", slurm_held="DOWN admin")
    won, _ = transition(queued(rec("n2")), NOW, NodeState.PASSED, JOB_WON, "r1")
    records = by_key(held, won)
    assert due_for_revalidation(records, groups(revalidate_max_fraction=1), NOW, bridge_seen_at=NOW) == []
    later = NOW + REVALIDATION_RETRY_S
    assert due_for_revalidation(records, groups(revalidate_max_fraction=1), later, bridge_seen_at=later) == ["n2"]


def test_queued_it_stays_in_service_and_claimed_it_is_locked_for_the_check():
    record = queued(rec("n1", slurm_busy=True, slurm_busy_at=NOW - 10))
    assert record.state == NodeState.PENDING and record.history[-1].trigger == REVALIDATION and revalidating(record)
    assert record.slurm_busy is None and record.slurm_busy_at is None  # only reports from now on count
    assert desired_state(record, True) == Desired(None, Feature.PASSED)  # a job may still take it: the job wins
    claimed, _ = transition(record, NOW + 60, NodeState.CHECKING, "claimed for a check round", "r1")
    assert revalidating(claimed)
    desired = desired_state(claimed, False)  # locked whatever the group isolates
    assert desired is not None and desired.feature == Feature.IN_PROGRESS
    assert desired.reason is not None and desired.reason.startswith(f"{OWNED_PREFIX}{CHECK} revalidation running")
    # An operator's on-demand check of a validated node still keeps its jobs.
    other, _ = transition(rec("n2"), NOW, NodeState.PENDING, "on-demand check requested", "api:1:me")
    other, _ = transition(other, NOW + 60, NodeState.CHECKING, "claimed for a check round", "r1")
    assert not revalidating(other) and desired_state(other, True) == Desired(None, Feature.PASSED)


def test_the_bridge_reports_since_queueing_decide_claim_release_or_wait():
    record = queued(rec("n1"))
    assert revalidation_idle(record, NOW + 30) is None  # no report yet: wait
    idle = record.model_copy(update={"slurm_busy": False, "slurm_busy_at": NOW + 60})
    busy = record.model_copy(update={"slurm_busy": True, "slurm_busy_at": NOW + 60})
    assert revalidation_idle(idle, NOW + 90) is True
    assert revalidation_idle(busy, NOW + 90) is False
    assert revalidation_idle(idle, NOW + 61 + BUSY_FRESH_S) is None  # stale
    before = record.model_copy(update={"slurm_busy": False, "slurm_busy_at": NOW - 1})
    assert revalidation_idle(before, NOW + 30) is None  # a report from before the queueing says nothing


def test_counters_nodes_revalidated_and_deferred_by_job():
    record = queued(rec("n1"))
    won, decision = transition(record, NOW + 60, NodeState.PASSED, JOB_WON, "r1", ready_at=None)
    assert revalidated(won) and won.verdict_at == 0.0  # its verdict, and its turn, unchanged
    assert [m.name for n in notices(won, decision) for m in n.metrics] == ["RevalidationDeferredByJob"]
    claimed, _ = transition(record, NOW + 60, NodeState.CHECKING, "claimed for a check round", "r1")
    done, decision = apply_verdict(claimed, Verdict.PASSED, ("passed",), GroupPolicy(), "None", NOW + 3600, "r1")
    assert done.state == NodeState.PASSED and done.verdict_at == NOW + 3600 and revalidated(done)
    assert "NodesRevalidated" in [m.name for n in notices(done, decision) for m in n.metrics]
    # A first check's verdict is no revalidation.
    fresh, _ = transition(rec("n2", verdict_at=None), NOW, NodeState.CHECKING, "claimed for a check round", "r1")
    passed, first = apply_verdict(fresh, Verdict.PASSED, ("passed",), GroupPolicy(), "None", NOW + 3600, "r1")
    assert not revalidated(passed)
    assert "NodesRevalidated" not in [m.name for n in notices(passed, first) for m in n.metrics]
