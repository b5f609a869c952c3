"""The safety layer: breaker, bad-capacity holds, replacement budgets, out-of-service caps, dry-run, lemons."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hyperpod_dhc.deephealth.domain.actions import action_refused, action_started
from hyperpod_dhc.deephealth.domain.breakers import BreakerReset, SafetyState, reset
from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.limits import breaker_reason, budget_use
from hyperpod_dhc.deephealth.domain.nodes import Action, ActionEntry, NodeRecord, NodeState, Outcome, Verdict
from hyperpod_dhc.deephealth.domain.observe import Observation, observe
from hyperpod_dhc.deephealth.domain.policy import Breaker, Budget, ClusterPolicy, GroupPolicy, Lemon, NodeRecovery
from hyperpod_dhc.deephealth.domain.recovery import apply_verdict, due_action, plan_recovery
from hyperpod_dhc.deephealth.domain.round_admission import admit_to_round
from hyperpod_dhc.deephealth.domain.safety import (
    HOLD_BREAKER,
    HOLD_CAPACITY,
    HOLD_CLUSTER_BUDGET,
    HOLD_GROUP_BUDGET,
    HOLD_OUT_OF_SERVICE,
    gate_recovery,
    release_holds,
)

NOW = 1_000_000.0
H = 3600.0


def node(key: str, group: str = "g", state: NodeState = NodeState.RECOVERY_DUE, **kw) -> NodeRecord:
    fields = {
        "cluster": "c",
        "key": key,
        "group": group,
        "logical_id": key,
        "instance_id": f"i-{key}",
        "instance_ids": [f"i-{key}"],
        "state": state,
        "version": 1,
        **kw,
    }
    if state == NodeState.RECOVERY_DUE:
        fields.setdefault("action", Action.REPLACE)
        fields.setdefault("attempts", 1)
        fields.setdefault("not_before", NOW - 1)
    return NodeRecord(**fields)


def passed(at: float = NOW - H) -> list[Outcome]:
    return [Outcome(at=at, verdict=Verdict.PASSED)]


def failed(at: float = NOW - H, instance: str | None = None) -> list[Outcome]:
    return [Outcome(at=at, verdict=Verdict.FAILED, instance_id=instance)]


def replaced(at: float) -> list[ActionEntry]:
    return [ActionEntry(at=at, action=Action.REPLACE, actor="controller")]


def groups(**policy) -> dict[str, GroupContext]:
    return {"g": GroupContext(GroupPolicy(**policy)), "h": GroupContext(GroupPolicy(**policy))}


LOOSE = ClusterPolicy(replace_budget=Budget(max_pct=100), breaker=Breaker(max_failure_pct=None))


def gate(due, records=None, ctx=None, cluster=LOOSE, safety=None):
    records = {r.key: r for r in (records if records is not None else due)}
    return gate_recovery(due, records, ctx or groups(), cluster, safety or SafetyState(cluster="c"), NOW, "c-r000001")


# -- breaker ----------------------------------------------------------------------------------------------------
def test_breaker_trips_on_a_failure_share_once_enough_nodes_were_checked():
    breaker = Breaker(max_failure_pct=50, min_verdicts=4, window_h=6)
    three = [node(f"n{i}", outcomes=failed()) for i in range(3)]
    assert breaker_reason(three, breaker, NOW, 0.0) is None, "3 verdicts are below min_verdicts"
    fleet = [*three, node("ok", state=NodeState.PASSED, outcomes=passed())]
    assert "3 of 4 nodes" in breaker_reason(fleet, breaker, NOW, 0.0)
    assert breaker_reason(fleet, breaker, NOW, reset_at=NOW - 1) is None, "failures before a reset do not count"
    old = [node(f"o{i}", outcomes=failed(at=NOW - 7 * H)) for i in range(4)]
    assert breaker_reason(old, breaker, NOW, 0.0) is None, "failures outside the window do not count"


def test_breaker_trips_on_an_absolute_count():
    fleet = [node(f"n{i}", outcomes=failed()) for i in range(5)]
    assert breaker_reason(fleet, Breaker(max_failures=5, max_failure_pct=None), NOW, 0.0).startswith("5 nodes")


def test_an_open_breaker_holds_every_action_and_alerts_once():
    due = [node(f"n{i}", outcomes=failed(), action=Action.REBOOT if i % 2 else Action.REPLACE) for i in range(10)]
    plan = gate(due, cluster=ClusterPolicy(breaker=Breaker(max_failure_pct=50, min_verdicts=10)))
    assert plan.acts == {Action.REBOOT: [], Action.REPLACE: []}
    assert plan.safety is not None and plan.safety.breaker is not None
    assert [a.kind for a in plan.alerts] == ["breaker-tripped"]
    assert {r.held_by for r, _ in plan.changes} == {HOLD_BREAKER}
    assert all(r.state == NodeState.RECOVERY_DUE for r, _ in plan.changes)


def test_reset_closes_the_breaker_releases_its_nodes_and_failures_before_it_no_longer_count():
    state = SafetyState(cluster="c", breaker={"at": NOW - H, "reason": "bad AMI"})
    held = [node("a", held_by=HOLD_BREAKER), node("b", held_by=HOLD_CAPACITY), node("c")]
    closed = reset(state, None, NOW, "arn:aws:iam::1:user/op", "AMI rolled back")
    assert closed.breaker is None and closed.breaker_reset_at == NOW and closed.resets[-1].by.endswith("op")
    released = release_holds(held, None, NOW, "api:1")
    assert [r.key for r, _ in released] == ["a"] and released[0][0].held_by is None
    assert released[0][0].not_before == NOW
    lifted = reset(SafetyState(cluster="c", capacity_holds={"g": {"at": 0, "reason": "x"}}), "g", NOW, "op", "ok")
    assert lifted.capacity_holds == {} and lifted.capacity_reset_at == {"g": NOW}
    assert (lifted.resets[-1].scope, lifted.resets[-1].group) == ("capacity-hold", "g")


def test_a_group_named_cluster_has_its_capacity_hold_lifted_not_the_breaker():
    """The reset names the group in its own field: a group called "cluster" no longer means the breaker."""
    state = SafetyState(
        cluster="c", breaker={"at": NOW - H, "reason": "bad AMI"}, capacity_holds={"cluster": {"at": 0, "reason": "x"}}
    )
    lifted = reset(state, "cluster", NOW, "op", "capacity is fine again")
    assert lifted.capacity_holds == {} and lifted.breaker is not None
    held = [node("a", group="cluster", held_by=HOLD_CAPACITY), node("b", held_by=HOLD_BREAKER)]
    assert [r.key for r, _ in release_holds(held, "cluster", NOW, "api:1")] == ["a"]
    assert BreakerReset.model_validate({"reason": "fine", "group": "cluster"}).group == "cluster"
    assert BreakerReset.model_validate({"reason": "fine"}).group is None


# -- bad capacity -------------------------------------------------------------------------------------------------
def test_failing_replacements_stop_replacements_in_the_group_but_not_reboots():
    bad = [
        node(
            f"r{i}",
            instance_id=f"i-new{i}",
            instance_ids=[f"i-old{i}", f"i-new{i}"],
            outcomes=failed(instance=f"i-new{i}"),
        )
        for i in range(3)
    ]
    reboot = node("boot", action=Action.REBOOT, attempts=0)
    plan = gate([*bad, reboot])
    assert [a.kind for a in plan.alerts] == ["capacity-hold"]
    assert set(plan.safety.capacity_holds) == {"g"}
    assert plan.acts[Action.REPLACE] == [] and [r.key for r in plan.acts[Action.REBOOT]] == ["boot"]
    assert {r.held_by for r, _ in plan.changes} == {HOLD_CAPACITY}


# -- budgets -----------------------------------------------------------------------------------------------------
def test_budget_limit_is_the_smaller_of_absolute_and_rounded_up_percentage():
    assert Budget(max_nodes=None, max_pct=10).limit(4) == 1, "a small group still gets one replacement"
    assert Budget(max_nodes=3, max_pct=50).limit(100) == 3
    assert Budget(max_nodes=None, max_pct=None).limit(7) == 7


def test_group_budget_holds_replacements_until_the_window_frees_a_slot():
    members = [node(f"n{i}", state=NodeState.PASSED) for i in range(8)]
    members[0] = members[0].model_copy(update={"actions": replaced(NOW - 20 * H)})
    due = [node(f"d{i}") for i in range(3)]
    ctx = groups(replace_budget=Budget(max_pct=25, window_h=24))  # 11 nodes -> 3 replacements per 24 h
    plan = gate(due, [*members, *due], ctx=ctx)
    assert len(plan.acts[Action.REPLACE]) == 2, "one of the three was already used 20 h ago"
    ((held, _),) = plan.changes
    assert held.held_by == HOLD_GROUP_BUDGET and held.not_before == NOW - 20 * H + 24 * H
    assert [a.kind for a in plan.alerts] == ["recovery-held"]


def test_cluster_budget_spans_groups():
    due = [node("a", group="g"), node("b", group="h")]
    plan = gate(due, cluster=ClusterPolicy(replace_budget=Budget(max_nodes=1), breaker=Breaker(max_failure_pct=None)))
    assert len(plan.acts[Action.REPLACE]) == 1
    assert [r.held_by for r, _ in plan.changes] == [HOLD_CLUSTER_BUDGET]


def test_budget_use_counts_only_the_controllers_replacements_in_the_window():
    records = [
        node("a", state=NodeState.PASSED, actions=replaced(NOW - H)),
        node("b", state=NodeState.PASSED, actions=[ActionEntry(at=NOW - H, action=Action.REPLACE, actor="hyperpod")]),
        node("c", state=NodeState.PASSED, actions=replaced(NOW - 30 * H)),
        node("d", state=NodeState.GONE),
    ]
    use = budget_use(records, Budget(max_nodes=None, max_pct=100, window_h=24), NOW)
    assert use == {"used": 1, "limit": 3, "window_h": 24, "frees_at": NOW - H + 24 * H}


@settings(max_examples=200, deadline=None)
@given(
    due_groups=st.lists(st.sampled_from(["g", "h"]), min_size=1, max_size=30),
    used=st.lists(st.tuples(st.sampled_from(["g", "h"]), st.floats(0, 48)), max_size=10),
    idle=st.integers(0, 20),
    group_pct=st.integers(0, 100),
    cluster_max=st.integers(0, 10),
    breaker_open=st.booleans(),
    dry_run=st.booleans(),
)
def test_the_gate_never_exceeds_a_budget_nor_acts_under_an_open_breaker_or_in_dry_run(
    due_groups, used, idle, group_pct, cluster_max, breaker_open, dry_run
):
    due = [node(f"d{i}", group=g) for i, g in enumerate(due_groups)]
    history = [
        node(f"u{i}", group=g, state=NodeState.PASSED, actions=replaced(NOW - h * H)) for i, (g, h) in enumerate(used)
    ]
    spare = [node(f"s{i}", group="g", state=NodeState.PASSED) for i in range(idle)]
    records = [*due, *history, *spare]
    budget = Budget(max_pct=group_pct, window_h=24)
    cluster = ClusterPolicy(
        replace_budget=Budget(max_nodes=cluster_max, max_pct=None), breaker=Breaker(max_failure_pct=None)
    )
    safety = SafetyState(cluster="c", breaker={"at": NOW, "reason": "x"} if breaker_open else None)
    plan = gate(due, records, groups(replace_budget=budget, dry_run=dry_run), cluster, safety)
    acted = plan.acts[Action.REPLACE]
    if breaker_open or dry_run:
        assert not acted
    for g in ("g", "h"):  # new replacements fit in what the window had left (history may already exceed it)
        members = [r for r in records if r.group == g]
        room = budget.limit(len(members)) - budget_use(members, budget, NOW)["used"]
        assert sum(r.group == g for r in acted) <= max(0, room)
    assert len(acted) <= max(0, cluster_max - budget_use(records, cluster.replace_budget, NOW)["used"])
    assert {r.key for r in acted} | {r.key for r, _ in plan.changes} <= {r.key for r in due}
    assert len({r.key for r in acted}) == len(acted), "one action per node"


# -- concurrency caps ------------------------------------------------------------------------------------------
def test_out_of_service_cap_limits_recoveries_in_flight():
    busy = [node(f"b{i}", state=NodeState.RECOVERING) for i in range(2)]
    rest = [node(f"p{i}", state=NodeState.PASSED) for i in range(6)]
    due = [node("d1", action=Action.REBOOT), node("d2", action=Action.REBOOT)]
    plan = gate(due, [*busy, *rest, *due], ctx=groups(max_out_of_service_pct=30))  # 10 nodes -> 3 at once
    assert [r.key for r in plan.acts[Action.REBOOT]] == ["d1"]
    assert [r.held_by for r, _ in plan.changes] == [HOLD_OUT_OF_SERVICE]


def test_round_admission_caps_nodes_per_round_and_rechecks_of_passed_nodes():
    new = [node(f"new{i}", state=NodeState.PENDING) for i in range(4)]
    again = [node(f"old{i}", state=NodeState.PENDING, outcomes=passed()) for i in range(4)]
    fleet = [*new, *again, *(node(f"p{i}", state=NodeState.PASSED, outcomes=passed()) for i in range(12))]
    capped = admit_to_round([*again, *new], fleet, groups(max_out_of_service_pct=10))  # 20 nodes -> 2 re-checks
    assert [r.key for r in capped] == ["old0", "old1", *(r.key for r in new)], "never-passed nodes are not in service"
    assert len(admit_to_round([*new, *again], fleet, groups(max_nodes_per_round=3))) == 3


# -- dry-run ------------------------------------------------------------------------------------------------------
def test_dry_run_records_what_it_would_do_and_does_nothing():
    plan = gate([node("d")], ctx=groups(dry_run=True))
    assert plan.acts == {Action.REBOOT: [], Action.REPLACE: []}
    ((record, decision),) = plan.changes
    assert record.state == NodeState.SHADOWED and decision.reason == "dry-run: would replace"
    failed_now, _ = plan_recovery(
        node("x", state=NodeState.CHECKING), GroupPolicy(dry_run=True), NodeRecovery.NONE, NOW, None
    )
    assert failed_now.state == NodeState.SHADOWED and "would reboot" in failed_now.history[-1].reason


def test_a_shadowed_node_is_checked_for_real_once_the_group_leaves_dry_run():
    from hyperpod_dhc.deephealth.domain.nodes import NodeSnapshot

    shadowed = node("s", state=NodeState.SHADOWED, status="Running")
    snap = NodeSnapshot(group="g", instance_id="i-s", logical_id="s", status="Running")
    obs = Observation(now=NOW, node_recovery=NodeRecovery.NONE, trigger="reconcile", groups=groups(dry_run=True))
    assert observe("c", shadowed, snap, obs) is None
    live = Observation(now=NOW, node_recovery=NodeRecovery.NONE, trigger="reconcile", groups=groups())
    record, _ = observe("c", shadowed, snap, live)
    assert record.state == NodeState.PENDING and record.ready_at == NOW


# -- lemons, flaps, ladders, attempt windows ----------------------------------------------------------------------
def test_a_node_failing_again_across_instances_is_quarantined_as_a_lemon():
    trail = [
        Outcome(at=NOW - 10 * 86400, verdict=Verdict.FAILED, instance_id="i-a"),
        Outcome(at=NOW - 5 * 86400, verdict=Verdict.PASSED, instance_id="i-b"),
        Outcome(at=NOW - 2 * 86400, verdict=Verdict.FAILED, instance_id="i-b"),
    ]
    record = node("n", state=NodeState.CHECKING, outcomes=trail, attempts=0, instance_id="i-c")
    policy = GroupPolicy(lemon=Lemon(max_failures=3, window_days=30), max_attempts=5)
    quarantined, decision = apply_verdict(record, Verdict.FAILED, ("log",), policy, NodeRecovery.NONE, NOW, "r")
    assert quarantined.state == NodeState.QUARANTINED
    assert "lemon: failed 3 times" in decision.reason and "i-a, i-b, i-c" in decision.reason
    assert [o.instance_id for o in quarantined.outcomes] == ["i-a", "i-b", "i-b", "i-c"]


def test_a_flapping_node_is_quarantined_even_when_it_passes():
    verdicts = [Verdict.PASSED, Verdict.FAILED, Verdict.PASSED, Verdict.FAILED]
    trail = [Outcome(at=NOW - (10 - i) * H, verdict=v) for i, v in enumerate(verdicts)]
    record = node("n", state=NodeState.CHECKING, outcomes=trail)
    policy = GroupPolicy(lemon=Lemon(max_failures=10, max_flaps=4))
    quarantined, decision = apply_verdict(record, Verdict.PASSED, (), policy, NodeRecovery.NONE, NOW, "r")
    assert quarantined.state == NodeState.QUARANTINED and decision.reason.startswith("flapping: 4")


def test_explicit_ladder_and_attempt_window():
    policy = GroupPolicy(ladder=("reboot", "reboot", "replace"), max_attempts=3, attempt_window_h=24)
    assert policy.steps() == ("reboot", "reboot", "replace")
    old = [ActionEntry(at=NOW - 48 * H, action=Action.REBOOT, actor="controller")] * 3
    record = node("n", state=NodeState.CHECKING, attempts=3, actions=old)
    due, _ = plan_recovery(record, policy, NodeRecovery.NONE, NOW, "r")
    assert due.state == NodeState.RECOVERY_DUE and due.action == Action.REBOOT, "old attempts left the window"
    lifetime, _ = plan_recovery(
        record, policy.model_copy(update={"attempt_window_h": None}), NodeRecovery.NONE, NOW, "r"
    )
    assert lifetime.state == NodeState.QUARANTINED


def test_a_refused_action_is_taken_back_from_attempts_and_budget():
    started, _ = action_started(node("n", attempts=0, action=Action.REPLACE), Action.REPLACE, NOW, "r")
    assert started.attempts == 1 and [a.actor for a in started.actions] == ["controller"]
    refused, _ = action_refused(started, Action.REPLACE, "InstanceIdInUse", "busy", NOW, "r")
    assert refused.attempts == 0 and refused.actions == [] and refused.state == NodeState.RECOVERY_DUE


# -- issue 11, defect 3: no round is chained (or started) that could change nothing ------------------------------
def test_a_replacement_budget_of_zero_holds_the_node_and_no_round_could_progress():
    from hyperpod_dhc.deephealth.domain.round_admission import progress_possible

    ctx = groups(recovery="replace", replace_budget=Budget(max_nodes=0))
    due = node("a", action=Action.REPLACE)
    plan = gate([due], ctx=ctx)
    assert not plan.acts[Action.REPLACE] and plan.changes[0][0].held_by == HOLD_GROUP_BUDGET
    held = plan.changes[0][0]
    assert progress_possible({"a": held}, ctx, LOOSE, SafetyState(cluster="c"), NOW) is None
    assert progress_possible({"a": due}, groups(), LOOSE, SafetyState(cluster="c"), NOW) is not None


def test_a_full_out_of_service_cap_with_queued_in_service_nodes_is_no_progress():
    from hyperpod_dhc.deephealth.domain.round_admission import progress_possible

    ctx = groups(max_out_of_service_pct=10)
    busy = node("busy", state=NodeState.RECOVERING, outcomes=passed())
    queued = node("q", state=NodeState.PENDING, ready_at=NOW - 60, outcomes=passed())  # a re-validation
    others = {f"p{i}": node(f"p{i}", state=NodeState.PASSED, outcomes=passed()) for i in range(8)}
    records = {"busy": busy, "q": queued, **others}
    assert progress_possible(records, ctx, LOOSE, SafetyState(cluster="c"), NOW) is None
    records["busy"] = node("busy", state=NodeState.PASSED, outcomes=passed())  # the recovery is done
    assert progress_possible(records, ctx, LOOSE, SafetyState(cluster="c"), NOW) is not None


def test_a_replacement_leaves_the_budget_window_at_exactly_its_frees_at_time():
    """The boundary was inclusive: at `frees_at` the node was held again with `not_before = now`, at once."""
    ctx = groups(recovery="replace", replace_budget=Budget(max_nodes=1, window_h=1))
    old = node("old", state=NodeState.PASSED, actions=replaced(NOW - H))
    use = budget_use([old], Budget(max_nodes=1, window_h=1), NOW)
    assert use["used"] == 0
    assert budget_use([old], Budget(max_nodes=1, window_h=1), NOW - 1)["frees_at"] == NOW
    assert gate([node("a")], records=[node("a"), old], ctx=ctx).acts[Action.REPLACE]


def test_an_instance_keyed_node_is_not_replaced_but_failed_with_the_reason():
    """Defect 7: without NodeLogicalIds a replacement is a new record, so ladder, lemon and capacity hold never
    trip; the controller refuses the replacement and says why."""
    due = node("i-0abc", logical_id=None, instance_id="i-0abc", action=Action.REPLACE)
    plan = gate([due])
    assert not plan.acts[Action.REPLACE]
    ((changed, decision),) = plan.changes
    assert changed.state == NodeState.FAILED and "no NodeLogicalIds" in decision.reason
    assert [a.kind for a in plan.alerts] == ["recovery-held"]
    assert gate([node("i-0abd", logical_id=None, action=Action.REBOOT)]).acts[Action.REBOOT]  # reboots still go


# -- the gate only gates: what a node's recovery is was decided before, by recovery.due_action --------------------
def test_the_gate_requests_or_holds_the_recorded_action_and_never_decides_it_again():
    """A node past its ladder (the policy changed since it failed) keeps the action it was due: the gate passes or
    holds it and never re-plans it into a quarantine."""
    beyond = node("b", action=Action.REPLACE, attempts=5)
    ctx = groups(max_attempts=1)
    assert gate([beyond], ctx=ctx).acts[Action.REPLACE] == [beyond]
    breaker = SafetyState(cluster="c", breaker={"at": NOW, "reason": "bad AMI"})
    ((held, decision),) = gate([beyond], ctx=ctx, safety=breaker).changes
    assert held.state == NodeState.RECOVERY_DUE and held.action == Action.REPLACE and held.held_by == HOLD_BREAKER
    assert decision.reason == "replace held: breaker open: bad AMI"


def test_a_node_with_nothing_left_to_request_gets_due_actions_answer_even_under_an_open_breaker():
    out_of_steps = node("q", action=Action.AWAIT_HYPERPOD, attempts=2)
    ctx = groups(max_attempts=2)
    breaker = SafetyState(cluster="c", breaker={"at": NOW, "reason": "x"})
    plan = gate([out_of_steps], ctx=ctx, safety=breaker)
    assert plan.changes == [due_action(out_of_steps, ctx["g"].policy, NOW, "c-r000001")]
    assert plan.changes[0][0].state == NodeState.QUARANTINED and not any(plan.acts.values())


def test_a_node_not_due_yet_is_left_to_its_due_time():
    later = node("l", action=Action.REBOOT, not_before=NOW + 60, action_retries=3)
    plan = gate([later])
    assert plan.changes == [] and not any(plan.acts.values())


def test_a_node_in_a_status_the_api_does_not_document_may_be_acted_on():
    plan = gate([node("odd", status="DeepHealthCheckFailed")])
    assert [r.key for r in plan.acts[Action.REPLACE]] == ["odd"]
    busy = gate([node("busy", status="ShuttingDown")])
    assert not busy.acts[Action.REPLACE] and busy.changes[0][0].held_by == "node-busy"


def test_a_node_isolated_in_its_check_after_its_own_failure_line_may_be_acted_on_while_the_operation_runs():
    failed_line = node("iso", status="DeepHealthCheckInProgress", verdict=Verdict.FAILED)
    records = {failed_line.key: failed_line}
    plan = gate_recovery([failed_line], records, groups(), LOOSE, SafetyState(cluster="c"), NOW, "r", True)
    assert [r.key for r in plan.acts[Action.REPLACE]] == ["iso"], "its failure line says its check is over"
    replaced_by_us = node("iso2", status="DeepHealthCheckInProgress", verdict=Verdict.REPLACED_BY_HYPERPOD)
    records = {replaced_by_us.key: replaced_by_us}
    plan = gate_recovery([replaced_by_us], records, groups(), LOOSE, SafetyState(cluster="c"), NOW, "r", True)
    assert not plan.acts[Action.REPLACE], "in a check that still runs, with no failure of its own: wait"
