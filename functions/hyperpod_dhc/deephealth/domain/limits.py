"""What the safety limits count, over a cluster's node records (pure): failures for the breaker, failed
replacement instances for a group's bad-capacity hold, the controller's replacements against a budget, and the
nodes held out of service. `domain.safety` compares these with the policy."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypedDict

from hyperpod_dhc.deephealth.domain.nodes import Action, NodeRecord, NodeState, Verdict
from hyperpod_dhc.deephealth.domain.policy import BadCapacity, Breaker, Budget
from hyperpod_dhc.deephealth.domain.recovery import FAILING


def failure_counts(records: Iterable[NodeRecord], since: float) -> tuple[int, int]:
    """(nodes that failed, nodes that got a pass or fail verdict) since `since`."""
    failed = verdicted = 0
    for r in records:
        recent = [o.verdict for o in r.outcomes if o.at >= since and (o.verdict in FAILING or o.verdict == "passed")]
        verdicted += bool(recent)
        failed += any(v in FAILING for v in recent)
    return failed, verdicted


def breaker_reason(records: Iterable[NodeRecord], breaker: Breaker, now: float, reset_at: float) -> str | None:
    since = max(now - breaker.window_h * 3600, reset_at)
    failed, verdicted = failure_counts(records, since)
    if breaker.max_failures is not None and failed >= breaker.max_failures:
        return f"{failed} nodes failed in {breaker.window_h} h (limit {breaker.max_failures})"
    if (
        breaker.max_failure_pct is not None
        and verdicted >= breaker.min_verdicts
        and failed * 100 >= breaker.max_failure_pct * verdicted
    ):
        return (
            f"{failed} of {verdicted} nodes checked in {breaker.window_h} h failed "
            f"({failed * 100 // verdicted}% >= {breaker.max_failure_pct}%): systemic failure suspected"
        )
    return None


def failed_replacements(records: Iterable[NodeRecord], since: float) -> list[tuple[str, str]]:
    """(node, instance) of replacement instances that failed their own check since `since`."""
    return [
        (r.key, o.instance_id)
        for r in records
        for o in r.outcomes
        if o.at >= since and o.verdict in FAILING and o.instance_id in r.instance_ids[1:]
    ]


def capacity_reason(records: Iterable[NodeRecord], policy: BadCapacity, now: float, reset_at: float) -> str | None:
    failed = failed_replacements(records, max(now - policy.window_h * 3600, reset_at))
    if len(failed) < policy.failed_replacements:
        return None
    return (
        f"{len(failed)} replacement instances failed their own check in {policy.window_h} h "
        f"({', '.join(i for _, i in failed[:5])}): bad capacity suspected, replacements stopped"
    )


def replacements(records: Iterable[NodeRecord], since: float) -> list[float]:
    """Times of the controller's replacements after `since` (HyperPod's own do not use our budget).

    The window is open at `since`: a replacement leaves it at exactly `at + window` (`frees_at` below), so a
    node held until then is not held again at that instant.
    """
    return sorted(
        a.at
        for r in records
        for a in r.actions
        if a.actor == "controller" and a.action == Action.REPLACE and a.at > since
    )


class BudgetUse(TypedDict):
    used: int
    limit: int
    window_h: int
    frees_at: float | None


def budget_use(records: list[NodeRecord], budget: Budget, now: float) -> BudgetUse:
    """Used and allowed replacements of a budget over `records`, and when the oldest use leaves the window."""
    window_s = budget.window_h * 3600
    used = replacements(records, now - window_s)
    size = sum(1 for r in records if r.state != NodeState.GONE)
    return {
        "used": len(used),
        "limit": budget.limit(size),
        "window_h": budget.window_h,
        "frees_at": (used[0] + window_s) if used else None,
    }


def in_service(record: NodeRecord) -> bool:
    """The node had passed its last check: checking or rebooting it takes capacity away from jobs."""
    return bool(record.outcomes) and record.outcomes[-1].verdict == Verdict.PASSED


def out_of_service(records: Iterable[NodeRecord]) -> int:
    """Nodes the controller holds out of service: re-checks of passed nodes, recoveries in flight."""
    return sum(
        1
        for r in records
        if r.state == NodeState.RECOVERING or (r.state == NodeState.CHECKING and not r.observe_only and in_service(r))
    )


def out_of_service_cap(size: int, pct: int) -> int:
    return max(1, math.floor(size * pct / 100))
