"""The safety layer: what may be done to a cluster's nodes right now (pure; no boto3, no clock).

Automated remediation loses operators' trust when it replaces healthy fleets, loops on one node or acts on
too many nodes at once. Before any reboot or replacement, `gate_recovery` applies, in this order:
1. the cluster's **breaker**: systemic failure (a bad AMI or driver fails every node) stops every action
   until an operator resets it;
2. the group's **bad-capacity hold**: replacements that keep failing their own check stop replacements in
   the group until an operator resets it;
3. **dry-run**: decide and record, never act;
4. the **replacement budgets** of the group and the cluster (absolute and percentage per rolling window);
5. the group's **out-of-service cap**: the share of the group the controller may hold out of service.
A node whose last seen status is one the API documents as a change in flight (Pending, ShuttingDown, ...) is being
acted on by someone else (HyperPod's recovery, an operator): it waits a few minutes instead of getting a conflicting
request. An undocumented status, or a node isolated after failing its check, may be acted on.
Held nodes keep their verdict and stay `recovery_due` with `held_by` saying why; breaker and capacity holds
stay until an operator resets them, budget and capacity-cap holds until the window or the cap frees up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hyperpod_dhc.deephealth.domain.breakers import SafetyState, Trip
from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.limits import (
    BudgetUse,
    breaker_reason,
    budget_use,
    capacity_reason,
    out_of_service,
    out_of_service_cap,
)
from hyperpod_dhc.deephealth.domain.nodes import (
    IN_PROGRESS,
    Action,
    Decision,
    NodeRecord,
    NodeState,
    Verdict,
    actionable,
    transition,
)
from hyperpod_dhc.deephealth.domain.policy import ClusterPolicy, GroupPolicy
from hyperpod_dhc.deephealth.domain.recovery import due_action

HOLD_BREAKER = "breaker"
HOLD_CAPACITY = "bad-capacity"
HOLD_GROUP_BUDGET = "replace-budget:group"
HOLD_CLUSTER_BUDGET = "replace-budget:cluster"
HOLD_OUT_OF_SERVICE = "out-of-service-cap"
HOLD_NODE_BUSY = "node-busy"  # the node is not Running/Failure (someone else is acting on it): look again soon
STICKY_HOLDS = frozenset({HOLD_BREAKER, HOLD_CAPACITY})  # only an operator's reset releases these
OUT_OF_SERVICE_RETRY_S = 600  # a node held by the out-of-service cap is looked at again after this
NODE_BUSY_RETRY_S = 300
UNTRACKED_REPLACEMENT = (
    "replacement refused: the cluster has no NodeLogicalIds (NodeProvisioningMode is not Continuous), so a "
    "replaced instance could not be told apart from a new node and its recovery history would be lost; "
    "replace it yourself (BatchReplaceClusterNodes) or let NodeRecovery=Automatic do it"
)


@dataclass(frozen=True)
class Alert:
    kind: str
    group: str
    subject: str
    detail: dict[str, Any]


@dataclass
class RecoveryPlan:
    """What `gate_recovery` decided: calls to make, record changes, a new safety state, alerts."""

    acts: dict[Action, list[NodeRecord]] = field(default_factory=lambda: {Action.REBOOT: [], Action.REPLACE: []})
    changes: list[tuple[NodeRecord, Decision]] = field(default_factory=list)
    safety: SafetyState | None = None  # set when a breaker or hold tripped
    alerts: list[Alert] = field(default_factory=list)


def is_held(record: NodeRecord) -> bool:
    """Held until an operator's reset (a due recovery under an open breaker or a bad-capacity hold)."""
    return record.state == NodeState.RECOVERY_DUE and record.held_by in STICKY_HOLDS


# -- recovery: the gate every reboot and replacement passes ---------------------------------------------------
class _Hold(NamedTuple):
    held_by: str  # HOLD_*
    until: float | None  # when the node is looked at again; None: keep its due time (sticky holds: a reset)
    why: str


@dataclass
class _Room:
    """What the gate may still let through in one pass: replacements within the budgets, recoveries within each
    group's out-of-service cap. Used up by each action it lets through."""

    cluster_budget: BudgetUse
    group_budgets: dict[str, BudgetUse]
    busy: dict[str, int]  # nodes held out of service, per group
    sizes: dict[str, int]  # nodes not gone, per group

    @classmethod
    def of(
        cls,
        everyone: list[NodeRecord],
        by_group: dict[str, list[NodeRecord]],
        groups: dict[str, GroupContext],
        cluster_policy: ClusterPolicy,
        now: float,
    ) -> _Room:
        return cls(
            cluster_budget=budget_use(everyone, cluster_policy.replace_budget, now),
            group_budgets={g: budget_use(by_group.get(g, []), groups[g].policy.replace_budget, now) for g in groups},
            busy={g: out_of_service(by_group.get(g, [])) for g in groups},
            sizes={g: sum(1 for m in members if m.state != NodeState.GONE) for g, members in by_group.items()},
        )

    def hold(self, r: NodeRecord, action: Action, policy: GroupPolicy, now: float) -> _Hold | None:
        """The budget or cap that holds `action` on `r`, or None if there is room."""
        if action == Action.REPLACE and (b := self.group_budgets[r.group])["used"] >= b["limit"]:
            return _Hold(HOLD_GROUP_BUDGET, b["frees_at"], _budget_text("group " + r.group, b))
        if action == Action.REPLACE and self.cluster_budget["used"] >= self.cluster_budget["limit"]:
            cluster = self.cluster_budget
            return _Hold(HOLD_CLUSTER_BUDGET, cluster["frees_at"], _budget_text("cluster", cluster))
        size = self.sizes.get(r.group, 0)
        if self.busy[r.group] >= out_of_service_cap(size, policy.max_out_of_service_pct):
            cap = f"{policy.max_out_of_service_pct}% of {size}"
            why = f"{self.busy[r.group]} nodes out of service ({cap})"
            return _Hold(HOLD_OUT_OF_SERVICE, now + OUT_OF_SERVICE_RETRY_S, why)
        return None

    def take(self, r: NodeRecord, action: Action) -> None:
        self.busy[r.group] += 1
        if action == Action.REPLACE:
            self.group_budgets[r.group]["used"] += 1
            self.cluster_budget["used"] += 1


def gate_recovery(
    due: list[NodeRecord],
    records: dict[str, NodeRecord],
    groups: dict[str, GroupContext],
    cluster_policy: ClusterPolicy,
    safety: SafetyState,
    now: float,
    trigger: str | None,
    check_active: bool | None = None,
) -> RecoveryPlan:
    """Which due recoveries may be requested now; the others are recorded as held, shadowed or refused.

    `check_active` False: no on-demand check operation is in progress, so a node still showing
    `DeepHealthCheckInProgress` is isolated after its failed check, not busy (a reading the docs allow).

    What each node's recovery is (the action, or its settled state when the ladder has none) is
    `recovery.due_action`'s to say; the gate only decides whether it may happen now.
    """
    plan = RecoveryPlan()
    everyone = list(records.values())
    by_group: dict[str, list[NodeRecord]] = {}
    for r in everyone:
        by_group.setdefault(r.group, []).append(r)
    state = _tripped(safety, everyone, by_group, {r.group for r in due}, groups, cluster_policy, now, trigger, plan)
    room = _Room.of(everyone, by_group, groups, cluster_policy, now)
    alerted: set[tuple[str, str]] = set()
    for r in sorted(due, key=lambda r: (r.not_before or 0, r.key)):
        policy = groups[r.group].policy
        action = due_action(r, policy, now, trigger)
        if action is None:
            continue  # not due at `now`
        if not isinstance(action, Action):
            plan.changes.append(action)  # nothing to request: the ladder settled the node
            continue
        if _refused(r, action, policy, now, trigger, plan):
            continue
        hold = _safety_hold(r, action, state, now, check_active) or room.hold(r, action, policy, now)
        if hold is None:
            plan.acts[action].append(r)
            room.take(r, action)
            continue
        _held(r, action, hold, now, trigger, plan, alerted)
    return plan


def _tripped(
    safety: SafetyState,
    everyone: list[NodeRecord],
    by_group: dict[str, list[NodeRecord]],
    due_groups: set[str],
    groups: dict[str, GroupContext],
    cluster_policy: ClusterPolicy,
    now: float,
    trigger: str | None,
    plan: RecoveryPlan,
) -> SafetyState:
    """The safety state after tripping the cluster's breaker and the due groups' bad-capacity holds on the
    evidence (each trip alerts once and is set on `plan.safety`)."""
    state = safety
    if state.breaker is None and (
        reason := breaker_reason(everyone, cluster_policy.breaker, now, state.breaker_reset_at)
    ):
        state = state.model_copy(update={"breaker": Trip(at=now, reason=reason, trigger=trigger)})
        plan.alerts.append(
            Alert("breaker-tripped", "", f"hyperpod-dhc: breaker open on {safety.cluster}", {"reason": reason})
        )
    for group in sorted(due_groups):
        ctx = groups[group]
        reset_at = state.capacity_reset_at.get(group, 0.0)
        if group not in state.capacity_holds and (
            reason := capacity_reason(by_group.get(group, []), ctx.policy.bad_capacity, now, reset_at)
        ):
            holds = {**state.capacity_holds, group: Trip(at=now, reason=reason, trigger=trigger)}
            state = state.model_copy(update={"capacity_holds": holds})
            plan.alerts.append(
                Alert("capacity-hold", group, f"hyperpod-dhc: replacements stopped in {group}", {"reason": reason})
            )
    if state is not safety:
        plan.safety = state
    return state


def _refused(
    r: NodeRecord, action: Action, policy: GroupPolicy, now: float, trigger: str | None, plan: RecoveryPlan
) -> bool:
    """Dry-run records what it would do; a replacement the controller could not track is refused for good."""
    if policy.dry_run:
        plan.changes.append(
            transition(r, now, NodeState.SHADOWED, f"dry-run: would {action.value}", trigger, held_by=None)
        )
        return True
    if action == Action.REPLACE and not r.logical_id:
        # Without a NodeLogicalId the replacement would be a new node to us: its ladder, lemon trail and the
        # group's bad-capacity evidence would start again from zero, so a bad slot could be replaced forever.
        plan.changes.append(transition(r, now, NodeState.FAILED, UNTRACKED_REPLACEMENT, trigger, held_by=None))
        plan.alerts.append(
            Alert(
                "recovery-held",
                r.group,
                f"hyperpod-dhc: {r.key} needs a replacement the controller will not make",
                {"node": r.key, "reason": UNTRACKED_REPLACEMENT},
            )
        )
        return True
    return False


def _safety_hold(
    r: NodeRecord, action: Action, state: SafetyState, now: float, check_active: bool | None
) -> _Hold | None:
    """The breaker, someone else's action in flight, or the group's bad-capacity hold (replacements only)."""
    if state.breaker is not None:
        return _Hold(HOLD_BREAKER, None, f"breaker open: {state.breaker.reason}")
    # Left in DeepHealthCheckInProgress after its check: isolated, not busy, once no check operation runs, or once
    # its own failure line says its check is over (an isolated node may hold the operation open).
    isolated = r.status == IN_PROGRESS and (check_active is False or r.verdict == Verdict.FAILED)
    if not actionable(r.status) and not isolated:
        return _Hold(HOLD_NODE_BUSY, now + NODE_BUSY_RETRY_S, f"node is {r.status}: another action is in flight")
    if action == Action.REPLACE and r.group in state.capacity_holds:
        return _Hold(HOLD_CAPACITY, None, state.capacity_holds[r.group].reason)
    return None


def _held(
    r: NodeRecord,
    action: Action,
    hold: _Hold,
    now: float,
    trigger: str | None,
    plan: RecoveryPlan,
    alerted: set[tuple[str, str]],
) -> None:
    """Record the hold (unless the node already has it) and alert once per group and hold kind."""
    held_by, until, why = hold
    if r.held_by != held_by or r.not_before != (until or r.not_before):
        plan.changes.append(
            transition(
                r,
                now,
                NodeState.RECOVERY_DUE,
                f"{action.value} held: {why}",
                trigger,
                held_by=held_by,
                not_before=until if until is not None else r.not_before,
            )
        )
    quiet = held_by in STICKY_HOLDS or held_by == HOLD_NODE_BUSY  # sticky holds alerted when they tripped
    if not quiet and (r.group, held_by) not in alerted and r.held_by != held_by:
        alerted.add((r.group, held_by))
        plan.alerts.append(
            Alert("recovery-held", r.group, f"hyperpod-dhc: recovery held in {r.group}", {"reason": why})
        )


def release_holds(
    records: Iterable[NodeRecord], group: str | None, now: float, trigger: str
) -> list[tuple[NodeRecord, Decision]]:
    """After an operator's reset: the nodes the breaker (`group` None) or a group's hold kept waiting are due."""
    held = HOLD_BREAKER if group is None else HOLD_CAPACITY
    return [
        transition(
            r,
            now,
            NodeState.RECOVERY_DUE,
            f"{held} reset by an operator: recovery due",
            trigger,
            held_by=None,
            not_before=now,
        )
        for r in records
        if is_held(r) and r.held_by == held and (group is None or r.group == group)
    ]


def _budget_text(scope: str, use: BudgetUse) -> str:
    return f"replacement budget of the {scope} used up ({use['used']}/{use['limit']} in {use['window_h']} h)"
