"""The Slurm bridge's desired state per node record, one name per record, occupancy and its bound (pure). The
scontrol changes that reach it are the agent's: tests/bridge/test_bridge.py; the two vocabularies agree:
test_slurm_contract.py."""

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState, Outcome, Verdict
from hyperpod_dhc.deephealth.domain.slurm import (
    BUSY_FRESH_S,
    OWNED_PREFIX,
    Desired,
    Feature,
    ambiguous,
    desired_state,
    slurm_names,
    waits_for_job,
    with_occupancy,
)

IID = "i-0000000000000000a"


def rec(state, outcomes=(), instance_id=IID, evidence=(), key="n", hostname=None, **kw) -> NodeRecord:
    return NodeRecord(cluster="c", key=key, group="g", instance_id=instance_id, state=state, outcomes=list(outcomes),
                      evidence=list(evidence), hostname=hostname, **kw)  # fmt: skip


PASSED_HERE = Outcome(at=1.0, verdict=Verdict.PASSED, instance_id=IID)
FAILED_HERE = Outcome(at=2.0, verdict=Verdict.FAILED, instance_id=IID)
WAIT = f"{OWNED_PREFIX}wait deep health check not passed yet, {IID}; hpdhc history c n"
CHECK = f"{OWNED_PREFIX}check deep health check running, {IID}; hpdhc history c n"


@pytest.mark.parametrize(
    ("record", "isolate", "expected"),
    [
        (rec(NodeState.PENDING), True, Desired(WAIT, Feature.IN_PROGRESS)),
        (rec(NodeState.CHECKING), True, Desired(CHECK, Feature.IN_PROGRESS)),
        (rec(NodeState.PENDING), False, Desired(None, Feature.IN_PROGRESS)),  # the group opted out
        (rec(NodeState.PASSED, [PASSED_HERE]), True, Desired(None, Feature.PASSED)),
        (rec(NodeState.CHECKING, [PASSED_HERE]), True, Desired(None, Feature.PASSED)),  # revalidation: keeps jobs
        (rec(NodeState.CHECKING, [PASSED_HERE, FAILED_HERE]), True, Desired(CHECK, Feature.IN_PROGRESS)),
        (rec(NodeState.GONE), True, None),
        (rec(NodeState.SHADOWED), True, None),  # dry-run records, never acts
    ],
)  # fmt: skip
def test_desired_state(record, isolate, expected):
    assert desired_state(record, isolate) == expected


def test_a_new_instance_under_a_passed_logical_id_is_not_validated():
    record = rec(NodeState.PENDING, [PASSED_HERE], instance_id="i-0000000000000000b")
    assert desired_state(record, True).reason.startswith(OWNED_PREFIX + "wait ")


def test_reasons_tell_every_state_apart_in_sinfo_r_twenty_columns_and_say_where_to_look():
    records = [rec(NodeState.PENDING), rec(NodeState.CHECKING), rec(NodeState.INCONCLUSIVE),
               rec(NodeState.FAILED, evidence=["DCGM diagnostic health summary: ... rebootRequired: true"]),
               rec(NodeState.RECOVERING, evidence=["EFA Loopback check failed on rdmap0"])]  # fmt: skip
    reasons = [desired_state(r, True).reason for r in records] + [
        ambiguous("ip-1", [rec(NodeState.PENDING)] * 2).reason
    ]
    heads = [r[:20] for r in reasons]
    assert len(set(heads)) == len(heads), heads
    assert heads[:4] == ["hpdhc:wait deep heal", "hpdhc:check deep hea", "hpdhc:inconcl deep h", "hpdhc:FAIL dcgm fail"]
    assert heads[4].startswith("hpdhc:FAIL efa")
    assert all(IID in r and "hpdhc history c n" in r for r in reasons[:5])
    assert all(r.isprintable() and len(r) < 400 for r in reasons)


@pytest.mark.parametrize(
    "state", [NodeState.RECOVERY_DUE, NodeState.RECOVERING, NodeState.FAILED, NodeState.QUARANTINED]
)
def test_a_failed_node_is_drained_with_an_owned_reason_naming_its_state(state):
    desired = desired_state(rec(state), isolate_until_checked=False)
    assert desired.feature == Feature.FAILED and desired.reason.startswith(OWNED_PREFIX + "FAIL ")
    assert state.value.replace("_", " ") in desired.reason


def test_one_name_one_record_gone_ones_never_speak_and_two_live_ones_are_ambiguous():
    old = rec(NodeState.PASSED, [PASSED_HERE], key="old", hostname="ip-10-0-0-1.ec2.internal")
    new = rec(NodeState.PENDING, key="new", instance_id="i-0000000000000000b", hostname="ip-10-0-0-1.ec2.internal")
    assert slurm_names([old.model_copy(update={"state": NodeState.GONE}), new]) == {"ip-10-0-0-1": [new]}
    assert slurm_names([new, old]) == {"ip-10-0-0-1": [new, old]}  # both live: neither is believed
    desired = ambiguous("ip-10-0-0-1", [new, old])
    assert desired.reason.startswith("hpdhc:ambig") and desired.feature == Feature.IN_PROGRESS


def test_occupancy_writes_changes_claims_and_refreshes_only_and_bounds_the_deferral():
    pending = rec(NodeState.PENDING)
    busy = with_occupancy(pending, True, None, now=100.0)
    assert (busy.slurm_busy, busy.slurm_busy_at, busy.slurm_busy_since) == (True, 100.0, 100.0)
    assert with_occupancy(busy, True, None, now=150.0) is None  # unchanged and recent
    refreshed = with_occupancy(busy, True, None, now=500.0)
    assert refreshed.slurm_busy_since == 100.0  # the run of busy reports goes on
    assert waits_for_job(refreshed, 500.0, defer_max_s=3600)
    assert not waits_for_job(refreshed, 500.0 + BUSY_FRESH_S + 1)  # a stale report is not believed
    late = refreshed.model_copy(update={"slurm_busy_at": 100.0 + 3600})
    assert waits_for_job(late, 100.0 + 3600, defer_max_s=3600)
    assert not waits_for_job(late, 100.0 + 3601, defer_max_s=3600)  # fresh, but deferred past the bound
    idle = with_occupancy(refreshed, False, None, now=600.0)
    assert (idle.slurm_busy, idle.slurm_busy_since) == (False, None)
    held = with_occupancy(rec(NodeState.PASSED), False, "DOWN: bad dimm", now=1.0)
    assert held.slurm_held == "DOWN: bad dimm" and held.slurm_busy is None  # any state: operators see it
    assert with_occupancy(held, False, "DOWN: bad dimm", now=2.0) is None
    assert with_occupancy(held, False, None, now=3.0).slurm_held is None
