"""One writer per cluster (pure): who holds a cluster's Slurm bridge fence after a pull, what is written for it, and
how far behind or silent a bridge is (`domain.bridge_fence`)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperpod_dhc.deephealth.domain.bridge_fence import (
    LEASE_S,
    SEEN_REFRESH_S,
    SILENT_S,
    BridgeLease,
    BridgeStatus,
    behind_s,
    decide_fence,
    silent_for,
)
from hyperpod_dhc.deephealth.domain.slurm import SYNC_INTERVAL_S

OLD, NEW = "ip-10-1-0-5:6f1c", "ip-10-1-0-9:a2d4"
NOW = 1_000_000.0
HELD = BridgeLease(holder=OLD, fence=3, seen_at=NOW - 10)


def test_the_lease_is_three_syncs_and_a_live_holder_is_refreshed_well_within_it():
    assert LEASE_S == 3 * SYNC_INTERVAL_S == 180
    assert SEEN_REFRESH_S + SYNC_INTERVAL_S < LEASE_S  # seen_at lags a live holder by about one sync at most
    assert SILENT_S > LEASE_S


# ---------------------------------------------------------------- no identity


@pytest.mark.parametrize("lease", [BridgeLease(), HELD, BridgeLease(OLD, 7, NOW - 10 * LEASE_S)])
@pytest.mark.parametrize("take_over", [False, True])
def test_a_bridge_that_says_no_identity_is_told_the_fence_never_holds_it_and_nothing_is_written(lease, take_over):
    decision = decide_fence(lease, None, take_over, NOW)
    assert decision == (lease.fence, False, None, None)


# ---------------------------------------------------------------- the holder


def test_the_holder_keeps_the_fence_and_seen_at_is_not_rewritten_while_fresh():
    for age in (0, 1, SEEN_REFRESH_S - 1):
        lease = BridgeLease(OLD, 3, NOW - age)
        assert decide_fence(lease, OLD, False, NOW) == (3, True, None, None), age


@pytest.mark.parametrize("age", [SEEN_REFRESH_S, SEEN_REFRESH_S + 1, LEASE_S + 1, 10 * SILENT_S])
def test_the_holder_refreshes_seen_at_once_it_is_seen_refresh_s_old_even_past_the_lease(age):
    """Nobody took it while it was silent: it still holds it, same fence."""
    decision = decide_fence(BridgeLease(OLD, 3, NOW - age), OLD, False, NOW)
    assert decision == (3, True, BridgeLease(OLD, 3, NOW), None)


def test_a_holder_never_seen_is_refreshed():
    assert decide_fence(BridgeLease(OLD, 3, None), OLD, False, NOW).write == BridgeLease(OLD, 3, NOW)


def test_take_over_by_the_holder_itself_changes_nothing():
    assert decide_fence(HELD, OLD, True, NOW) == (3, True, None, None)


# ---------------------------------------------------------------- another bridge


def test_the_first_bridge_takes_the_fence_nobody_held():
    decision = decide_fence(BridgeLease(), NEW, False, NOW)
    assert decision.fence == 1 and decision.holder is True
    assert decision.write == BridgeLease(NEW, 1, NOW)
    assert decision.why == "no bridge held the fence"


def test_nobody_holds_a_fence_left_by_a_registry_item_without_holder():
    decision = decide_fence(BridgeLease(None, 4, None), NEW, False, NOW)
    assert decision == (5, True, BridgeLease(NEW, 5, NOW), "no bridge held the fence")


@pytest.mark.parametrize("age", [0, 1, SEEN_REFRESH_S, LEASE_S - 1, LEASE_S])
def test_another_bridge_is_told_it_does_not_hold_the_fence_of_a_holder_within_its_lease(age):
    decision = decide_fence(BridgeLease(OLD, 3, NOW - age), NEW, False, NOW)
    assert decision == (3, False, None, None)


@pytest.mark.parametrize("age", [LEASE_S + 0.5, LEASE_S + 1, SILENT_S, 10 * SILENT_S])
def test_another_bridge_takes_over_from_a_holder_silent_longer_than_the_lease(age):
    decision = decide_fence(BridgeLease(OLD, 3, NOW - age), NEW, False, NOW)
    assert decision.fence == 4 and decision.holder is True and decision.write == BridgeLease(NEW, 4, NOW)
    assert decision.why == f"the holder was silent for {int(age)} s (lease {LEASE_S} s)"


def test_another_bridge_takes_over_from_a_holder_never_seen():
    decision = decide_fence(BridgeLease(OLD, 3, None), NEW, False, NOW)
    assert decision == (4, True, BridgeLease(NEW, 4, NOW), f"the holder was silent for ever (lease {LEASE_S} s)")


def test_take_over_takes_the_fence_from_a_live_holder():
    decision = decide_fence(HELD, NEW, True, NOW)
    assert decision == (4, True, BridgeLease(NEW, 4, NOW), "started with --take-over")


@given(
    holder=st.sampled_from([None, OLD, NEW]),
    fence=st.integers(0, 10**6),
    age=st.one_of(st.none(), st.floats(0, 10 * SILENT_S)),
    asker=st.sampled_from([None, OLD, NEW]),
    take_over=st.booleans(),
)
def test_the_fence_only_grows_and_only_a_written_take_over_grows_it(holder, fence, age, asker, take_over):
    lease = BridgeLease(holder, fence, None if age is None else NOW - age)
    decision = decide_fence(lease, asker, take_over, NOW)
    assert decision.fence in (fence, fence + 1)
    taken = decision.fence == fence + 1
    assert taken == (decision.why is not None)
    if taken:
        assert decision.holder and decision.write == BridgeLease(asker, fence + 1, NOW) and asker != holder
    if decision.write is not None:  # what is written is always the asker holding the fence it is told
        assert decision.holder and decision.write.holder == asker and decision.write.fence == decision.fence
    if decision.holder:
        assert asker is not None
    if asker is None or (asker == holder):
        assert not taken


# ---------------------------------------------------------------- how the bridge is doing


def test_silent_for_is_the_holders_time_since_its_last_pull():
    assert silent_for(BridgeLease(OLD, 3, NOW - 42), NOW) == 42
    assert silent_for(BridgeLease(OLD, 3, NOW + 5), NOW) == 0  # a clock a little ahead: never negative
    assert silent_for(BridgeLease(), NOW) is None  # no bridge ever identified itself
    assert silent_for(BridgeLease(OLD, 3, None), NOW) is None
    assert silent_for(BridgeLease(None, 3, NOW - 42), NOW) is None


def test_behind_is_the_time_since_slurm_last_matched_what_the_bridge_had_to_apply():
    assert behind_s(BridgeStatus(bridge=OLD, synced_at=NOW - 181), NOW) == 181
    assert behind_s(BridgeStatus(synced_at=NOW + 3), NOW) == 0  # the bridge's clock a little ahead
    assert behind_s(BridgeStatus(bridge=OLD), NOW) is None  # it did not say (never synced, or an older bridge)
    assert behind_s(BridgeStatus(), NOW) is None


def test_an_older_bridges_status_says_nothing():
    assert BridgeStatus() == BridgeStatus(None, None, None, None, False)
