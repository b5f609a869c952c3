"""The controller end to end: the synthesized workflow, the real handlers, moto and the HyperPod fake."""

from collections import Counter

import pytest

from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES, NodeState, Verdict
from hyperpod_dhc.deephealth.domain.rounds import EXPECTED_CHECK_S, MEMBERS_LIST_S
from tests.fakes.hyperpod import GroupSpec
from tests.fakes.readings import Readings

RECHECK = {"clusters": ["demo"], "defaults": {"gather_window_s": 120, "recovery": "reboot-then-replace"}}


def _all_final(harness, cluster, expected):
    records = harness.records(cluster)
    return len(records) == expected and all(r.state in FINAL_STATES for r in records.values())


def _controller_actions(fake):
    return Counter((lid, kind) for _, kind, lid, actor in fake.actions if actor == "controller")


@pytest.mark.controller_config(RECHECK)
def test_forty_four_nodes_over_three_groups_all_end_with_a_verdict(harness, fake):
    fake.create_cluster(
        "demo",
        [
            GroupSpec("controller", "ml.m5.xlarge", count=1, node_type="Controller"),
            GroupSpec("p5", count=0),
            GroupSpec("p4d", "ml.p4d.24xlarge"),
            GroupSpec("g5", "ml.g5.8xlarge"),
        ],
    )
    arrivals = [("p5", 20), ("p4d", 14), ("g5", 10)]
    lids = {g: [fake.add_node("demo", g, ready_after_s=600 + 300 * i) for i in range(n)] for g, n in arrivals}
    transient = [lids["p5"][3], lids["p4d"][5], lids["g5"][1]]
    persistent = [lids["p5"][11], lids["g5"][7]]
    skipped = lids["p4d"][0]
    for lid in transient:
        fake.set_truth("demo", lid, "fail", cured_by="reboot")
    for lid in persistent:
        fake.set_truth("demo", lid, "fail", cured_by="replace")
    fake.set_truth("demo", skipped, "skip")

    harness.run_until(lambda: _all_final(harness, "demo", 44), horizon_s=24 * 3600)

    records = harness.records("demo")
    by_lid = {r.logical_id: r for r in records.values()}
    assert len(records) == 44, "the controller node is never recorded; every worker is"
    assert all(r.state in FINAL_STATES for r in records.values()), Counter(r.state for r in records.values())
    for lid in transient:
        assert by_lid[lid].state == NodeState.PASSED and by_lid[lid].attempts == 1
        assert _controller_actions(fake)[(lid, "reboot")] == 1 and not _controller_actions(fake)[(lid, "replace")]
    for lid in persistent:
        r = by_lid[lid]
        assert r.state == NodeState.PASSED and r.attempts == 2 and len(r.instance_ids) == 2
        assert _controller_actions(fake)[(lid, "reboot")] == 1 and _controller_actions(fake)[(lid, "replace")] == 1
    assert by_lid[skipped].state == NodeState.INCONCLUSIVE and by_lid[skipped].verdict == Verdict.SKIPPED
    healthy = set(by_lid) - set(transient) - set(persistent) - {skipped}
    assert all(by_lid[lid].state == NodeState.PASSED and by_lid[lid].attempts == 0 for lid in healthy)
    assert not any(lid in healthy for lid, _ in _controller_actions(fake)), "a healthy node was acted on"
    assert max(_controller_actions(fake).values()) == 1, "no node gets the same action twice for one failure"
    assert fake.started_while_active == 0 and not fake.rejected_while_active
    assert all(e["status"] == "SUCCEEDED" for e in harness.executions())
    assert not harness.unmatched, "every event HyperPod sent matched a deployed rule pattern"


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_node_recovery_automatic_hyperpod_replaces_and_the_controller_does_not_fight(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=3)], node_recovery="Automatic")
    bad = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", bad, "fail")
    harness.run_until(lambda: _all_final(harness, "demo", 3), horizon_s=12 * 3600)
    record = harness.records("demo")[bad]
    assert record.state == NodeState.PASSED and len(record.instance_ids) == 2
    assert any(h.reason.startswith("HyperPod replaced the instance") for h in record.history)
    assert not _controller_actions(fake), "HyperPod recovered the node; the controller made no call"
    assert [a for _, a, lid, actor in fake.actions if actor == "hyperpod"] == ["replace"]


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_node_replaced_by_hyperpod_mid_check_gets_its_replacement_checked(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=3)])
    victim = next(iter(fake.cluster("demo").nodes))
    first_instance = fake.node("demo", victim).instance_id
    replaced_at: list[float] = []

    def replace() -> None:
        replaced_at.append(fake.clock.now())
        fake.replace_now("demo", victim)

    harness.when(lambda: fake.node("demo", victim).status == "DeepHealthCheckInProgress", replace)
    harness.run_until(lambda: _all_final(harness, "demo", 3), horizon_s=12 * 3600)
    record = harness.records("demo")[victim]
    assert record.state == NodeState.PASSED and record.instance_ids[0] == first_instance
    assert record.instance_id == fake.node("demo", victim).instance_id != first_instance
    (noticed,) = [h.at for h in record.history if h.state == NodeState.PENDING and "replaced" in h.reason]
    # The windows miss its new launch time: the poll after the round's long sleep through the check (80 % of the
    # expected 45 min) looks at the whole cluster next, not the hourly whole look (3,540 s after, before).
    assert noticed - replaced_at[0] < EXPECTED_CHECK_S["InstanceStress"], (
        f"noticed {noticed - replaced_at[0]:.0f} s after"
    )
    assert fake.calls["StartClusterHealthCheck"] == 2, "the replacement got its own check"
    assert not _controller_actions(fake)


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_polls_list_the_rounds_launch_window_and_the_whole_cluster_every_five_minutes(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=4)])
    early = set(fake.cluster("demo").nodes)
    harness.run_until(lambda: _all_final(harness, "demo", 4), horizon_s=12 * 3600)
    (start,) = [t for t, op, _ in fake.requests if op == "StartClusterHealthCheck"]
    launched = [fake.node("demo", lid).launched for lid in early]
    listings = [(t, p) for t, op, p in fake.requests if op == "ListClusterNodes" and t > start]
    windowed = [p for _, p in listings if "CreationTimeBefore" in p]  # the round's members
    whole = [t for t, p in listings if "CreationTimeAfter" not in p]  # the rest: looks for arrivals, probes
    # Looks for arrivals after the first list only what was created since the one before (record_arrivals).
    probes = [p for _, p in listings if "CreationTimeAfter" in p and "CreationTimeBefore" not in p]
    assert windowed and len(windowed) > len(whole) and probes
    for p in windowed:
        assert p["InstanceGroupNameContains"] == "workers"
        assert p["CreationTimeAfter"] < min(launched) <= max(launched) < p["CreationTimeBefore"]  # epoch s on the wire
    # The whole cluster at most every 5 minutes, but for the one look that confirms the round is over.
    # Two listers, each at most every 5 minutes: the round (but for its confirming look) and the looks for arrivals
    # (Reconcile, Intake: usecases/record_arrivals), which skip a turn the round took but not the reverse.
    span = whole[-1] - whole[0]
    assert len(whole) <= 2 * (span // 300 + 1) + 1, f"the whole cluster {len(whole)} times in {span:.0f} s"
    assert {r.state for r in harness.records("demo").values()} == {NodeState.PASSED}


def test_a_rounds_polls_list_its_members_only_when_the_result_log_moves_and_judge_settled_ones_without_a_listing(
    harness, fake
):
    """Through the check's tail a poll a minute only counts the result log; the members are listed when a node's
    lines arrive (it left its check) or 10 minutes after the last listing, and a node whose lines settle with
    nothing new since is judged on the listing that found it out of its check."""
    fake.create_cluster("demo", [GroupSpec("workers", count=4)])
    harness.run_until(lambda: _all_final(harness, "demo", 4), horizon_s=12 * 3600)
    (start,) = [t for t, op, _ in fake.requests if op == "StartClusterHealthCheck"]
    listings = [t for t, op, _ in fake.requests if op == "ListClusterNodes"]
    windowed = [t for t, op, p in fake.requests if op == "ListClusterNodes" and "CreationTimeBefore" in p]
    tail = [t for t in windowed if t >= start + 0.8 * EXPECTED_CHECK_S["InstanceStress"]]
    span = tail[-1] - tail[0]
    assert span > 600, "the check's tail is long enough to tell a listing a minute from a listing on news"
    assert len(tail) <= 4 + span // MEMBERS_LIST_S + 1, f"{len(tail)} listings in {span:.0f} s: one per node out"
    records = harness.records("demo").values()
    assert {r.state for r in records} == {NodeState.PASSED}
    passed_at = [h.at for r in records for h in r.history if h.state == NodeState.PASSED]
    assert any(t not in listings for t in passed_at), "a settled node was judged without listing again"


def test_a_rounds_tail_listings_narrow_to_the_members_still_in_their_check(harness, fake):
    """Eight nodes launched a minute apart, in one round, leave their check at different times (the readings'
    check-start delay): each listing through the tail covers only the members still in it, so the windows shrink."""
    fake.create_cluster("demo", [GroupSpec("workers")])
    fake.readings = Readings(check_start_delay_s=(30.0, 1800.0))
    for i in range(8):
        harness.at(fake.clock.now() + 60.0 * i, lambda: fake.add_node("demo", "workers", ready_after_s=60))
    harness.run_until(lambda: _all_final(harness, "demo", 8), horizon_s=12 * 3600)
    assert fake.calls["StartClusterHealthCheck"] == 1, "one round"
    windows = [p for _, op, p in fake.requests if op == "ListClusterNodes" and "CreationTimeBefore" in p]
    spans = [p["CreationTimeBefore"] - p["CreationTimeAfter"] for p in windows]
    assert spans[0] >= 6 * 60, "the first listing spans every member's launch"
    assert spans == sorted(spans, reverse=True) and spans[-1] < spans[0], spans  # e.g. 422 s ... 362, 242
    assert {r.state for r in harness.records("demo").values()} == {NodeState.PASSED}


def test_nodes_a_round_left_settling_are_judged_by_the_next_rounds_poll_without_a_whole_look(harness, fake):
    """A round whose members are all out of the check ends at once when nodes wait for the next round; that round's
    poll judges them when their lines are due, on the whole look that found them out (nothing moved since)."""
    fake.create_cluster("demo", [GroupSpec("workers", count=4)])
    harness.at(fake.clock.now() + 1800, lambda: [fake.add_node("demo", "workers", ready_after_s=60) for _ in range(2)])
    harness.run_until(lambda: _all_final(harness, "demo", 6), horizon_s=12 * 3600)
    records = harness.records("demo").values()
    assert {r.state for r in records} == {NodeState.PASSED}
    firsts = [
        r for r in records if any(h.state == NodeState.CHECKING and h.trigger == "demo-r000000" for h in r.history)
    ]
    handed_on = [h.at for r in firsts for h in r.history if h.state == NodeState.PASSED and h.trigger == "demo-r000001"]
    assert len(firsts) == len(handed_on) == 4, "the first round's nodes were judged by the second's poll"
    whole = {t for t, op, p in fake.requests if op == "ListClusterNodes" and "CreationTimeAfter" not in p}
    assert not whole & set(handed_on), "judged without a whole look"


def test_start_check_lists_only_the_claimed_members_while_the_claims_whole_look_is_fresh(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=4)])
    harness.run_until(lambda: fake.calls["StartClusterHealthCheck"] >= 1, horizon_s=3600)
    (start,) = [i for i, (_, op, _) in enumerate(fake.requests) if op == "StartClusterHealthCheck"]
    *_, claim, members = [p for _, op, p in fake.requests[:start] if op == "ListClusterNodes"]
    assert "CreationTimeAfter" not in claim, "the Claim looked at the whole cluster"
    assert {"CreationTimeAfter", "CreationTimeBefore"} <= members.keys(), "Start check listed the members' window"


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_cluster_deleted_mid_round_closes_its_nodes_out(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=5)])
    harness.when(lambda: fake.cluster("demo").check is not None, lambda: fake.delete_cluster("demo"))
    harness.run_until(lambda: False, horizon_s=3 * 3600)
    records = harness.records("demo").values()
    assert {r.state for r in records} == {NodeState.GONE}
    assert all(any(h.state == NodeState.CHECKING for h in r.history) for r in records), "deleted mid-check"
    assert not harness.running()
    assert all(e["status"] in ("SUCCEEDED", "FAILED") for e in harness.executions())


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_busy_cluster_start_is_retried_until_the_other_check_ends(harness, fake):
    import boto3

    fake.create_cluster("demo", [GroupSpec("workers", count=4)])
    ids = [n.instance_id for n in fake.cluster("demo").nodes.values()]
    # Someone else's check (an operator's) is active when the controller's round starts.
    boto3.client("sagemaker", region_name="us-east-1").start_cluster_health_check(
        ClusterName="demo",
        DeepHealthCheckConfigurations=[
            {"InstanceGroupName": "workers", "InstanceIds": ids[:1], "DeepHealthChecks": ["InstanceStress"]}
        ],
    )
    harness.run_until(lambda: _all_final(harness, "demo", 4), horizon_s=8 * 3600)
    # Start check sees a node in a check it did not start and waits (ClusterBusy) without asking HyperPod.
    assert fake.started_while_active == 0 and not fake.rejected_while_active
    # The operator's, the controller's for the three others, then one for the node the operator's check held.
    assert fake.calls["StartClusterHealthCheck"] == 3
    assert {r.state for r in harness.records("demo").values()} == {NodeState.PASSED}
    starts = [e for e in harness.executions() if e["status"] == "SUCCEEDED"]
    history = [ev["type"] for e in starts for ev in harness.history(e["executionArn"])]
    assert "TaskFailed" in history or "LambdaFunctionFailed" in history  # ClusterBusy, then Retry


@pytest.mark.controller_config({"clusters": ["demo"]})
def test_on_start_group_is_observed_without_a_duplicate_check(harness, fake):
    fake.create_cluster("demo", [GroupSpec("native", on_start_checks=("InstanceStress",))])
    lids = [fake.add_node("demo", "native", ready_after_s=600) for _ in range(3)]
    fake.set_truth("demo", lids[0], "fail")
    harness.run_until(
        lambda: sum(r.state == NodeState.PASSED for r in harness.records("demo").values()) >= 2, horizon_s=6 * 3600
    )
    assert fake.calls["StartClusterHealthCheck"] == 0
    records = harness.records("demo")
    assert all(records[lid].state == NodeState.PASSED for lid in lids[1:])
    assert all(any("on-start" in h.reason for h in records[lid].history) for lid in lids[1:])


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_a_round_stopped_mid_check_is_moved_past_and_its_nodes_still_get_verdicts(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=3)])

    def stop_the_round():
        (execution,) = harness.running()
        harness.sfn.stop_execution(executionArn=execution["executionArn"], cause="operator stopped it")

    harness.when(lambda: fake.cluster("demo").check is not None and harness.running(), stop_the_round)
    # Well within the dead round's 6-hour lease: the reconciler must not wait for it to expire.
    harness.run_until(lambda: _all_final(harness, "demo", 3), horizon_s=3 * 3600)
    assert {r.state for r in harness.records("demo").values()} == {NodeState.PASSED}
    statuses = {e["name"]: e["status"] for e in harness.executions()}
    assert statuses["demo-r000000"] == "ABORTED", statuses


def test_a_resting_cluster_is_probed_for_new_nodes_and_listed_whole_hourly(harness, fake):
    """Reconcile's quiet sweep (domain/quiet_sweep.py): once every node rests (passed more than a day ago), a pass
    lists only what was created since the last whole listing, and the whole cluster once an hour; a node that
    arrives is still recorded within one pass."""
    from hyperpod_dhc.deephealth.domain.late_evidence import SCAN_S
    from hyperpod_dhc.deephealth.domain.quiet_sweep import WHOLE_SWEEP_S

    fake.create_cluster("demo", [GroupSpec("workers", count=4)])
    harness.run_until(lambda: _all_final(harness, "demo", 4), horizon_s=12 * 3600)
    harness.advance(SCAN_S + 3600)  # past every pass's revisit and failure scan: the cluster rests
    start = fake.clock.now()
    harness.advance(2 * WHOLE_SWEEP_S)
    listings = [p for t, op, p in fake.requests if op == "ListClusterNodes" and t > start]
    probes = [p for p in listings if "CreationTimeAfter" in p and "CreationTimeBefore" not in p]
    whole = [p for p in listings if "CreationTimeAfter" not in p]
    passes = 2 * WHOLE_SWEEP_S // harness.reconcile_every_s
    assert len(whole) <= 3 and len(probes) >= passes - 3, (len(whole), len(probes), passes)

    lid = fake.add_node("demo", "workers", ready_after_s=60)
    harness.advance(harness.reconcile_every_s + 60)
    assert lid in {r.logical_id for r in harness.records("demo").values()}, "the probe missed an arrival"
