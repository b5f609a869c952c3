import pytest

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.listing_windows import ListingWindow, listing_windows, narrowed_windows
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy, Mode
from hyperpod_dhc.deephealth.domain.rounds import (
    FIRST_POLL_S,
    MAX_CONFIGS_PER_CHECK,
    MAX_IDS_PER_CONFIG,
    SKIP_GRACE_S,
    RoundState,
    build_check_request,
    check_over,
    chunks,
    claimable,
    gather_delay,
    group_checks,
    next_wait,
    round_name,
    select_for_round,
)


def pending(i: int, group="g", ready_at=100.0, **kw) -> NodeRecord:
    fields = {"state": NodeState.PENDING, **kw}
    return NodeRecord(cluster="c", key=f"n{i}", group=group, instance_id=f"i-{i:017x}", ready_at=ready_at, **fields)


GROUPS = {"g": GroupContext(GroupPolicy(checks=("InstanceStress", "InstanceConnectivity"), gather_window_s=300))}


def test_chunks_respect_limits():
    assert [len(c) for c in chunks(list(range(60)), 25)] == [25, 25, 10]


def test_a_3000_node_round_fits_one_request_and_a_small_payload():
    nodes = [pending(i) for i in range(3000)]
    chosen = select_for_round(claimable(nodes, GROUPS), max_nodes=3000)
    configs = build_check_request(chosen, GROUPS)
    assert len(chosen) == 3000 and len(configs) == 6
    assert all(len(c["InstanceIds"]) <= MAX_IDS_PER_CONFIG for c in configs)
    assert sorted(i for c in configs for i in c["InstanceIds"]) == sorted(n.instance_id for n in nodes)
    payload = RoundState(cluster="c", round_seq=1, claimed=3000).model_dump_json()
    assert len(payload) < 1024  # node state lives in DynamoDB, not in the execution


def test_selection_stops_at_99_configurations():
    groups = {f"g{i}": GroupContext(GroupPolicy()) for i in range(120)}
    nodes = [pending(i, group=f"g{i}") for i in range(120)]
    chosen = select_for_round(claimable(nodes, groups), max_nodes=10_000)
    assert len(chosen) == MAX_CONFIGS_PER_CHECK
    assert len(build_check_request(chosen, groups)) == MAX_CONFIGS_PER_CHECK


def test_claimable_skips_off_controller_and_unready_nodes_but_not_pending_nodes_of_on_start_groups():
    """A pending node of an on-start group is one HyperPod will not check again (after our reboot, a health
    event, a skipped check): it gets an on-demand check, or it would wait forever (issue 11, defect 4)."""
    groups = {
        "g": GroupContext(GroupPolicy()),
        "native": GroupContext(GroupPolicy(), on_start_checks=("InstanceStress",)),
        "off": GroupContext(GroupPolicy(mode=Mode.OFF)),
        "ctl": GroupContext(GroupPolicy(), worker=False),
    }
    nodes = [
        pending(1),
        pending(2, group="native"),
        pending(3, group="off"),
        pending(4, group="ctl"),
        pending(5, ready_at=None),
        pending(6, state=NodeState.PASSED),
    ]
    assert [n.key for n in claimable(nodes, groups)] == ["n1", "n2"]


def test_connectivity_needs_two_nodes_of_the_group():
    assert group_checks(["InstanceStress", "InstanceConnectivity"], 1) == ["InstanceStress"]
    assert group_checks(["InstanceConnectivity"], 1) == ["InstanceStress"]
    assert group_checks(["InstanceStress", "InstanceConnectivity"], 2) == ["InstanceStress", "InstanceConnectivity"]


def test_gather_waits_for_the_oldest_nodes_window_only():
    assert gather_delay([pending(1, ready_at=1000.0)], GROUPS, now=1100.0) == 200
    assert gather_delay([pending(1, ready_at=1000.0)], GROUPS, now=2000.0) == 0
    assert gather_delay([], GROUPS, now=0) == 0


DENSE = {"g": GroupContext(GroupPolicy(gather_window_s=3600, gather_quiet_s=300))}


def test_gather_follows_arrivals_while_they_are_dense_and_stops_when_they_pause():
    lone = [pending(1, ready_at=1000.0)]
    assert gather_delay(lone, DENSE, now=1000.0) == 300  # a lone node waits only the quiet time
    stream = [pending(i, ready_at=1000.0 + 120 * i) for i in range(10)]  # one every 2 min, the last at 2080
    assert gather_delay(stream, DENSE, now=2080.0) == 300  # still arriving: wait for the next
    assert gather_delay(stream, DENSE, now=2380.0) == 0  # 5 min without a new node: start
    endless = [pending(i, ready_at=1000.0 + 60 * i) for i in range(70)]  # arrivals never pause
    assert gather_delay(endless, DENSE, now=5140.0) == 0  # the oldest waited the window: start anyway
    assert gather_delay(endless[:50], DENSE, now=3940.0) == 300
    # Nodes back for a re-check keep their old ready time: they are not arrivals and do not hold the round.
    assert gather_delay([pending(1, ready_at=0.0), pending(2, ready_at=10.0)], DENSE, now=5000.0) == 0


@pytest.mark.parametrize(
    ("elapsed", "awaiting", "expected"),
    [
        (0, True, FIRST_POLL_S),  # confirm the nodes entered the check
        (FIRST_POLL_S, True, SKIP_GRACE_S - FIRST_POLL_S),  # one look once busy nodes are started or skipped
        (SKIP_GRACE_S - 30, True, 60),
        (FIRST_POLL_S, False, int(0.8 * 2700 - FIRST_POLL_S)),  # sleep through the bulk of the check
        (2500, False, 60),  # poll at the interval near the expected end
    ],
)
def test_adaptive_polling(elapsed, awaiting, expected):
    assert next_wait(0.0, float(elapsed), 2700, 60, awaiting) == expected


def test_round_names_are_deterministic_and_valid():
    assert round_name("my.cluster", 7) == "my-cluster-r000007"
    assert len(round_name("a" * 63, 999999)) <= 80


def _listed(group: str, launched_at: float | None) -> NodeSnapshot:
    return NodeSnapshot(group=group, instance_id="i-1", status="Running", launched_at=launched_at)


def _spans(windows) -> list[tuple[float, float, str | None]]:
    return [(w.launched_after, w.launched_before, w.group) for w in windows]


def test_a_rounds_listing_window_spans_its_members_launch_times_and_names_a_lone_group():
    members = [_listed("p5", 300.0), _listed("p5", 100.0), _listed("p5", 200.0)]
    assert _spans(listing_windows(members, members)) == [(100.0, 300.0, "p5")]


def test_members_launched_far_apart_are_listed_in_two_windows_when_that_costs_fewer_pages():
    """A node checked again (launched hours before the others) must not make each poll list everything between."""
    others = [_listed("p5", 1000.0 + i) for i in range(500)]  # not members: launched in between
    old, new = _listed("p5", 100.0), [_listed("p5", 5000.0 + i) for i in range(50)]
    windows = listing_windows([old, *new], [old, *others, *new])
    assert _spans(windows) == [(100.0, 100.0, "p5"), (5000.0, 5049.0, "p5")]  # 2 pages, not 6
    # Nothing in between: one window is the cheapest.
    assert _spans(listing_windows([old, *new], [old, *new])) == [(100.0, 5049.0, "p5")]


def test_members_of_two_groups_are_listed_per_group_when_the_group_filter_saves_pages():
    p5 = [_listed("p5", 100.0 + i) for i in range(80)]
    g5 = [_listed("g5", 100.0 + i) for i in range(80)]  # launched together with p5
    trn = [_listed("trn1", 100.0 + i) for i in range(300)]  # listed, not members
    assert _spans(listing_windows([*p5, *g5], [*p5, *g5, *trn])) == [(100.0, 179.0, "g5"), (100.0, 179.0, "p5")]
    # Without the others, one window across groups holds both in 2 pages, as two windows would.
    assert _spans(listing_windows([*p5, *g5], [*p5, *g5])) == [(100.0, 179.0, None)]


def test_without_every_launch_time_a_round_lists_the_whole_cluster():
    assert listing_windows([_listed("p5", 100.0), _listed("p5", None)], []) is None
    assert listing_windows([], []) is None


def _node(i: int, group: str, launched_at: float | None) -> NodeSnapshot:
    return NodeSnapshot(group=group, instance_id=f"i-{i:017x}", status="Running", launched_at=launched_at)


def test_a_rounds_tail_lists_fewer_pages_as_its_members_leave_the_check():
    """Launched over 10 minutes, 500 members leave their check in launch order: the members still in it are the
    latest launched, and the next listing narrows to them inside the last windows, never wider."""
    members = [_node(i, "p5", 1000.0 + i) for i in range(500)]
    others = [_node(1000 + i, "p5", 1200.5 + i) for i in range(300)]  # not members: launched among them
    listed = [*members, *others]
    windows = listing_windows(members, listed)
    assert _spans(windows) == [(1000.0, 1499.0, "p5")]  # 8 pages
    still = members[450:]
    narrowed = narrowed_windows(windows, still, listed)
    assert _spans(narrowed) == [(1450.0, 1499.0, "p5")]  # 1 page
    # Members in two windows: each window narrows on its own, and one left empty is dropped.
    old, new = [_node(2000 + i, "p5", 100.0 + i) for i in range(5)], members[-50:]
    two = listing_windows([*old, *new], [*old, *listed])
    assert _spans(two) == [(100.0, 104.0, "p5"), (1450.0, 1499.0, "p5")]
    assert _spans(narrowed_windows(two, [old[3], *new[-2:]], [*old, *listed])) == [
        (103.0, 103.0, "p5"), (1498.0, 1499.0, "p5")]  # fmt: skip
    assert _spans(narrowed_windows(two, new[-2:], [*old, *listed])) == [(1498.0, 1499.0, "p5")]


def test_a_narrowed_window_keeps_the_group_filter_of_the_window_it_narrows():
    """InstanceGroupNameContains "gpu" lists "gpu-spare" too: narrowed across both, the window must still filter by
    "gpu", or it would list every group launched in that span (counted on what the "gpu" window listed)."""
    gpu = [_node(i, "gpu", 1000.0 + i) for i in range(60)]
    spare = [_node(100 + i, "gpu-spare", 1000.0 + i) for i in range(60)]
    trn = [_node(200 + i, "trn1", 1000.0 + i) for i in range(300)]  # not listed by the "gpu" window
    window = ListingWindow(launched_after=1000.0, launched_before=1059.0, group="gpu")
    narrowed = narrowed_windows([window], [gpu[-1], spare[-1]], [*gpu, *spare, *trn])
    assert narrowed is not None and {w.group for w in narrowed} <= {"gpu", "gpu-spare"}


def test_a_tail_listing_keeps_its_windows_when_a_member_is_outside_them_or_unknown():
    members = [_node(i, "p5", 1000.0 + i) for i in range(10)]
    windows = listing_windows(members, members)
    replaced = _node(99, "p5", 5000.0)  # replaced mid-check: a new launch time, outside the windows
    assert narrowed_windows(windows, [members[0], replaced], members) is None
    assert narrowed_windows(windows, [members[0], _node(98, "p5", None)], members) is None  # provisioning
    assert narrowed_windows(windows, [members[0], None], members) is None  # not listed
    assert narrowed_windows(windows, [], members) is None  # none left in the check: keep the last ones


def test_a_round_may_end_once_its_check_is_over_but_not_past_an_isolated_failed_node():
    left = [pending(i, state=NodeState.CHECKING, check_left_at=100.0, status="Running") for i in range(2)]
    assert check_over(left, left)
    assert not check_over([], left)  # nothing of its own in the check: the usual end applies
    still_in = [*left[:1], left[1].model_copy(update={"check_left_at": None})]
    assert not check_over(still_in, still_in)
    # A failed node still showing DeepHealthCheckInProgress, due for recovery or about to be judged: the check
    # operation must end before it can be told isolated from busy and recovered.
    isolated = pending(9, state=NodeState.RECOVERY_DUE, status="DeepHealthCheckInProgress")
    assert not check_over(left, [*left, isolated])
    leaving = pending(8, state=NodeState.CHECKING, check_left_at=90.0, status="DeepHealthCheckInProgress")
    assert not check_over(left, [*left, leaving])
