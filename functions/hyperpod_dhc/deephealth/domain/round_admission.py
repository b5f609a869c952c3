"""What a round may take now, and whether one could change anything (pure; no boto3, no clock).

A round admits waiting nodes within each group's per-round limit and out-of-service cap (`admit_to_round`). One is
started or chained only when it could change something (`progress_possible`): nodes the caps admit, or a due
recovery the safety gate (`domain/safety.py`) would let through (`recoveries_possible`); held work waits for its
next due time and Reconcile.
"""

from __future__ import annotations

from collections.abc import Iterable

from hyperpod_dhc.deephealth.domain.breakers import SafetyState
from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.limits import in_service, out_of_service, out_of_service_cap
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState
from hyperpod_dhc.deephealth.domain.policy import ClusterPolicy
from hyperpod_dhc.deephealth.domain.rounds import claimable, watchable
from hyperpod_dhc.deephealth.domain.safety import STICKY_HOLDS, gate_recovery
from hyperpod_dhc.deephealth.domain.slurm import waits_for_job


def admit_to_round(
    candidates: list[NodeRecord], records: Iterable[NodeRecord], groups: dict[str, GroupContext]
) -> list[NodeRecord]:
    """Candidates within each group's `max_nodes_per_round` and out-of-service cap, in their order.

    A node that never passed a check is not in service yet, so only re-checks of passed nodes use the cap.
    """
    members: dict[str, list[NodeRecord]] = {}
    for r in records:
        members.setdefault(r.group, []).append(r)
    taken: dict[str, int] = {}
    slots: dict[str, int] = {}
    admitted = []
    for r in candidates:
        policy = groups[r.group].policy
        if policy.max_nodes_per_round is not None and taken.get(r.group, 0) >= policy.max_nodes_per_round:
            continue
        if in_service(r):
            if r.group not in slots:
                group = [m for m in members.get(r.group, []) if m.state != NodeState.GONE]
                slots[r.group] = out_of_service_cap(len(group), policy.max_out_of_service_pct) - out_of_service(group)
            if slots[r.group] <= 0:
                continue
            slots[r.group] -= 1
        taken[r.group] = taken.get(r.group, 0) + 1
        admitted.append(r)
    return admitted


def due_recoveries(records: Iterable[NodeRecord], groups: dict[str, GroupContext], now: float) -> list[NodeRecord]:
    """Failed worker nodes whose recovery is due now (sticky holds wait for an operator's reset)."""
    return [
        r
        for r in records
        if r.state == NodeState.RECOVERY_DUE
        and (r.not_before or 0) <= now
        and r.held_by not in STICKY_HOLDS
        and (ctx := groups.get(r.group)) is not None
        and ctx.worker
    ]


def progress_possible(
    records: dict[str, NodeRecord],
    groups: dict[str, GroupContext],
    cluster_policy: ClusterPolicy,
    safety: SafetyState,
    now: float,
) -> str | None:
    """What a round started now would do, or None when it could change nothing.

    A round is started (Reconcile) or chained (Finish round) only for this: waiting nodes the caps admit, or a
    due recovery the gate lets through. Work that exists but is held (a budget of 0, a full out-of-service
    cap, a window that frees later) is left to the next due time and Reconcile, never to a round that would
    find it held again at once.
    """
    # A node busy with a Slurm job waits for it: a round now could not claim it (the bridge's idle report starts one).
    bound = {name: g.policy.job_defer_max_s for name, g in groups.items()}
    waiting = [r for r in claimable(records.values(), groups) if not waits_for_job(r, now, bound[r.group])]
    shadowed = [r for r in waiting if groups[r.group].policy.dry_run]
    if shadowed:
        return f"{len(shadowed)} node(s) of dry-run groups to record"
    admitted = admit_to_round(waiting, records.values(), groups)
    if admitted:
        return f"{len(admitted)} node(s) waiting for a check"
    if watching := watchable(records.values()):  # asked when no round is live
        return f"{len(watching)} node(s) in HyperPod's on-start check to watch"
    due = due_recoveries(records.values(), groups, now)
    if recoveries := recoveries_possible(due, records, groups, cluster_policy, safety, now):
        return f"{recoveries} recovery action(s) due"
    return None


def recoveries_possible(
    due: list[NodeRecord],
    records: dict[str, NodeRecord],
    groups: dict[str, GroupContext],
    cluster_policy: ClusterPolicy,
    safety: SafetyState,
    now: float,
    check_active: bool | None = None,
) -> int:
    """How many of the `due` recoveries the gate would request or settle now (0: every one is held, so a step
    that recovers them would change nothing)."""
    if not due:
        return 0
    plan = gate_recovery(due, records, groups, cluster_policy, safety, now, None, check_active)
    settled = [c for c, _ in plan.changes if c.state != NodeState.RECOVERY_DUE]
    return sum(len(v) for v in plan.acts.values()) + len(settled)
