"""The round's clock (domain/rounds.py): when a node's result lines are read and when a round looks again, each
rule written once. These are the latency rules `make bench` measures against the floor."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import IN_PROGRESS, RUNNING, NodeRecord, NodeSnapshot, NodeState
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy
from hyperpod_dhc.deephealth.domain.rounds import (
    FIRST_POLL_S,
    LATE_LINES_LOOK_S,
    MEMBERS_LIST_S,
    RoundState,
    lines_due,
    members_due_at,
    members_look,
    next_look,
    poll_interval,
    settled,
    settling_elsewhere,
    split_dry_run,
    unchanged_since,
    wake_for,
)

GROUPS = {"g": GroupContext(GroupPolicy(poll_interval_s=60), measured_settle_s=30.0)}


def checking(key="n1", round_id="c-r000001", left=None, started=0.0, seen=True, group="g") -> NodeRecord:
    return NodeRecord(
        cluster="c",
        key=key,
        group=group,
        instance_id="i-0123456789abcdef0",
        state=NodeState.CHECKING,
        round_id=round_id,
        check_started_at=started,
        check_left_at=left,
        seen_in_progress=seen,
    )


def snap(status=RUNNING) -> NodeSnapshot:
    return NodeSnapshot(key="n1", group="g", instance_id="i-0123456789abcdef0", status=status)


def test_lines_are_read_settle_s_after_the_look_that_found_the_node_out_and_not_a_second_before():
    node = checking(left=1000.0)
    assert not settled(node, 30.0, 1029.9)
    assert settled(node, 30.0, 1030.0)
    assert not settled(checking(left=None), 0.0, 10**9)  # still in its check: never settled
    assert lines_due(node, snap(), 1030.0, 30.0, 2700.0)


def test_a_node_overdue_in_its_check_has_its_lines_read_though_it_never_left():
    """Isolated after a failure while HyperPod's operation stays open: its failure line must be read."""
    node = checking(left=None, started=0.0)
    assert not lines_due(node, snap(IN_PROGRESS), 2700.0 + 29.0, 30.0, 2700.0)
    assert lines_due(node, snap(IN_PROGRESS), 2700.0 + 30.0, 30.0, 2700.0)
    assert not lines_due(node, snap(RUNNING), 10**6, 30.0, 2700.0)  # out of the check but not seen out: no


def test_settling_elsewhere_is_the_earliest_settle_among_other_rounds_nodes_or_a_late_lines_look():
    mine = checking("a", round_id="c-r000002", left=900.0)
    other = checking("b", round_id="c-r000001", left=1000.0)
    later = checking("c", round_id=None, left=1010.0)  # HyperPod's on-start check: no round
    assert settling_elsewhere([mine, other, later], GROUPS, "c-r000002", 1005.0) == 1030.0
    # Due already and still waiting (a test's line is late): looked at again LATE_LINES_LOOK_S from now.
    assert settling_elsewhere([other], GROUPS, "c-r000002", 1100.0) == 1100.0 + LATE_LINES_LOOK_S
    assert settling_elsewhere([mine], GROUPS, "c-r000002", 1005.0) is None
    assert settling_elsewhere([checking("d", group="unknown", left=1.0)], GROUPS, "x", 5.0) is None


def test_nodes_settling_elsewhere_are_judged_on_the_last_whole_look_only_while_no_change_came_since():
    assert unchanged_since(1000.0, None)
    assert unchanged_since(1000.0, 999.0)
    assert not unchanged_since(1000.0, 1000.0)  # an event stamped with the look: it may have moved them
    assert not unchanged_since(None, None)  # no whole look yet


def test_poll_interval_is_the_most_demanding_groups_and_60_s_with_none():
    groups = {**GROUPS, "h": GroupContext(GroupPolicy(poll_interval_s=30))}
    assert poll_interval(groups) == 30
    assert poll_interval({}) == 60


@pytest.mark.parametrize(
    ("wait", "judge_at", "now", "expected"),
    [(300, None, 0.0, 300), (300, 100.0, 0.0, 100), (300, 100.5, 0.0, 101), (30, 100.0, 0.0, 30), (300, 0.0, 5.0, 1)],
)
def test_wake_for_cuts_a_wait_short_for_nodes_due_first_and_never_below_a_second(wait, judge_at, now, expected):
    assert wake_for(wait, judge_at, now) == expected


def test_split_dry_run_keeps_order():
    groups = {"g": GroupContext(GroupPolicy()), "dry": GroupContext(GroupPolicy(dry_run=True))}
    nodes = [checking("a"), checking("b", group="dry"), checking("c")]
    shadow, live = split_dry_run(nodes, groups)
    assert [r.key for r in shadow] == ["b"] and [r.key for r in live] == ["a", "c"]


def test_next_look_confirms_the_start_then_waits_for_the_first_line_to_settle_once_every_member_is_out():
    members = [checking("a", left=3000.0), checking("b", left=3040.0)]
    assert next_look([checking("a", seen=False)], GROUPS, 0.0, 0.0, 2700, None) == FIRST_POLL_S
    # Every member out: nothing can change a verdict before a's lines settle at 3030.
    assert next_look(members, GROUPS, 0.0, 3001.0, 2700, None) == 60
    assert next_look(members, GROUPS, 0.0, 2941.0, 2700, None) == 89
    # One still in: the usual spacing, cut short to judge a the moment its lines settle.
    assert next_look([*members, checking("c")], GROUPS, 0.0, 3001.0, 2700, None) == 29
    assert next_look([*members, checking("c")], GROUPS, 0.0, 3031.0, 2700, None) == 39  # then b's
    # A member settled and still waiting (late lines) does not make the round poll every second.
    assert next_look([*members, checking("c")], GROUPS, 0.0, 3071.0, 2700, None) == 60


def test_members_are_due_when_the_next_one_out_settles():
    members = [checking("a", left=3000.0), checking("b", left=3040.0), checking("c")]
    assert members_due_at(members, GROUPS, 2999.0) == 3030.0
    assert members_due_at(members, GROUPS, 3030.0) == 3070.0
    assert members_due_at(members, GROUPS, 3070.0) is None
    assert members_due_at([checking("a", left=3000.0, group="unknown")], GROUPS, 0.0) is None


def listed(at=1000.0, lines=7, due=None) -> RoundState:
    return RoundState(cluster="c", round_seq=1, listed_at=at, lines_from=0.0, lines_seen=lines, members_due_at=due)


def test_a_poll_lists_the_members_only_when_something_says_one_moved():
    assert members_look(listed(), 7, None, 1060.0) == "none"  # nothing new: no listing
    assert members_look(listed(), 8, None, 1060.0) == "list"  # new result lines: a member may have left its check
    assert members_look(listed(), 6, None, 1060.0) == "list"  # fewer (retention): any change lists
    assert members_look(listed(), 7, None, 1000.0 + MEMBERS_LIST_S) == "list"  # one that leaves silently is found
    assert members_look(listed(at=None), 7, None, 1060.0) == "list"  # never listed
    assert members_look(listed(), None, None, 1060.0) == "list"  # lines not counted: list


def test_a_member_whose_lines_settle_is_judged_without_a_listing_unless_something_moved_since():
    assert members_look(listed(due=1050.0), 7, None, 1049.0) == "none"
    assert members_look(listed(due=1050.0), 7, None, 1050.0) == "judge"
    assert members_look(listed(due=1050.0), 7, 990.0, 1050.0) == "judge"  # the event came before that listing
    assert members_look(listed(due=1050.0), 7, 1000.0, 1050.0) == "list"  # an event since: its status may have moved
    assert members_look(listed(due=1050.0), 8, None, 1050.0) == "list"  # new lines: list, and judge on that


@given(
    started=st.floats(0, 10_000),
    elapsed=st.floats(0, 20_000),
    expected=st.integers(0, 6 * 3600),
    judge_in=st.one_of(st.none(), st.floats(-5_000, 20_000)),
    lefts=st.lists(st.one_of(st.none(), st.floats(-3_000, 3_000)), min_size=1, max_size=5),
    settle=st.floats(0, 3600),
    awaiting=st.booleans(),
)
def test_next_look_never_wakes_after_judge_at_and_never_before_a_second(
    started, elapsed, expected, judge_in, lefts, settle, awaiting
):
    now = started + elapsed
    groups = {"g": GroupContext(GroupPolicy(), measured_settle_s=settle)}
    members = [
        checking(f"n{i}", left=None if left is None else now + left, seen=not awaiting) for i, left in enumerate(lefts)
    ]
    judge_at = None if judge_in is None else now + judge_in
    wait = next_look(members, groups, started, now, expected, judge_at)
    assert wait >= 1
    if judge_at is not None:
        assert wait <= max(1, math.ceil(judge_at - now))


def test_a_round_watches_the_on_start_checks_no_live_round_watches():
    """Nodes in HyperPod's on-start check are taken by a round (its polls judge them): those no round holds,
    or an ended round (a lower sequence number) left; not another live one's, not a node of an on-demand check."""
    from hyperpod_dhc.deephealth.domain.rounds import watchable

    def watched(key, round_id, observe_only=True):
        return checking(key, round_id=round_id).model_copy(update={"observe_only": observe_only})

    records = [
        watched("free", None),
        watched("left", "c-r000003"),
        watched("mine", "c-r000005"),
        watched("ours", "c-r000004", observe_only=False),
        checking("x").model_copy(update={"state": NodeState.PASSED, "observe_only": True}),
    ]
    assert [r.key for r in watchable(records, round_seq=5)] == ["free", "left"]


def test_listing_windows_need_every_member_listed():
    from hyperpod_dhc.deephealth.domain.listing_windows import listing_windows

    launched = snap().model_copy(update={"launched_at": 10.0})
    later = launched.model_copy(update={"launched_at": 20.0})
    assert listing_windows([launched, later], [launched, later])[0].launched_before == 20.0
    assert listing_windows([launched, None], [launched]) is None  # one not listed: list the whole cluster
