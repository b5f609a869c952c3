"""The twin's report: what actually happened, counted where it happened.

API calls are counted at the fake's boundary (only those that reached HyperPod; injected API faults are
counted apart, per service, in `api_faults`), state transitions read from the executions' histories,
verdicts from the controller's own table, ground truth from the simulation, notifications from the topic's
subscribed queue (`Harness.notifications`).

Version 2 added `actions.duplicate`, `api_faults`, `events.{delayed, retried_invocations,
failed_invocations}`, `checks.{foreign, started_while_foreign_active}`, `incidents`, `alerts`,
`notifications` and `inconclusive_without_alert`; then the verdict categories `held` (failed, its recovery
held by a breaker, a capacity hold or a budget) and `shadowed` (dry-run), and `safety` (breaker, capacity
holds, replacement budgets: the most replacements the controller made in any rolling window against the
policy's limit).

Version 3 added `iam` (`tests/harness/iam.py`): every authorization AWS would make for the controller, evaluated
against the synthesized role policies. `calls` is keyed by principal: a function's construct id (`ClaimRound`:
its own requests, and what the Lambda service does with its role: log stream and log events, traces, a
given-up asynchronous invocation sent to its dead-letter queue), `RoundWorkflow` (the state machine's role
invoking the Task Lambdas) and `EventBridge` (a rule delivering to Intake or Reconcile through a Lambda
permission); under each, IAM action -> authorizations evaluated, denied ones included. `denied` counts the
refused ones, `denials` lists them (`<principal> <action> on <resource>: <count>`), `unmapped` the requests
the check could not map to IAM (each one also failed its call).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from deephealth.adapters.node_table import NodeTable
from deephealth.domain.nodes import Action, NodeRecord, NodeState
from deephealth.domain.policy import Budget, parse_config
from tests.harness.engine import TABLE_NAME
from tests.twin.simulation import CONTROLLER_GROUP, Twin

REPORT_VERSION = 3
INCONCLUSIVE_ALERT = "node-inconclusive"  # the notification an operator gets for a node left inconclusive
VERDICT_CATEGORIES = (
    "passed", "passed_after_reboot", "replaced", "quarantined", "failed", "inconclusive", "gone", "held",
    "shadowed", "no_verdict",
)  # fmt: skip


def outcome(record: NodeRecord | None, actions: list[str]) -> str:
    """The node's verdict category for the report."""
    if record is not None and record.state == NodeState.RECOVERY_DUE and record.held_by:
        return "held"  # failed; its recovery waits (a breaker or capacity hold until a reset, or a budget window)
    if record is None or record.state not in (
        NodeState.SHADOWED,
        NodeState.PASSED,
        NodeState.QUARANTINED,
        NodeState.FAILED,
        NodeState.INCONCLUSIVE,
        NodeState.GONE,
    ):
        return "no_verdict"
    if record.state == NodeState.PASSED:
        if "replace" in actions:
            return "replaced"
        return "passed_after_reboot" if "reboot" in actions else "passed"
    return record.state.value


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 1), "p95": round(p95, 1), "max": round(ordered[-1], 1)}


def build_report(twin: Twin, wall_s: float) -> dict[str, Any]:
    s = twin.scenario
    sim = twin.sim
    t0 = twin.started_at
    records = {k: r for k, r in twin.records(s.cluster.name).items() if r.group != CONTROLLER_GROUP}
    actions_by_node: dict[str, list[tuple[str, str]]] = {}
    for _, kind, lid, actor in sim.actions:
        actions_by_node.setdefault(lid, []).append((kind, actor))

    nodes = [n for n in twin.cluster_model.nodes.values() if n.group != CONTROLLER_GROUP]
    details: list[dict[str, Any]] = []
    latencies: list[float] = []
    verdicts: Counter[str] = Counter()
    for n in sorted(nodes, key=lambda n: (n.group, n.created, n.logical_id)):
        record = records.get(n.logical_id)
        kinds = [kind for kind, _ in actions_by_node.get(n.logical_id, [])]
        category = outcome(record, kinds)
        deleting_at = twin.cluster_model.deleting_at
        ready_at = sim.ready_at.get(n.logical_id)
        if record is None and deleting_at is not None and (ready_at is None or ready_at >= deleting_at):
            # Still provisioning when its cluster was deleted, or ready only after: never a node to judge.
            category = "gone"
        verdicts[category] += 1
        ready = sim.ready_at.get(n.logical_id)
        verdict_at = record.verdict_at if record and category != "no_verdict" else None
        if ready is not None and verdict_at is not None:
            latencies.append(verdict_at - ready)
        details.append(
            {
                "logical_id": n.logical_id,
                "group": n.group,
                "truth": sim.truth.get(n.logical_id, "healthy"),
                "ready_at_s": None if ready is None else round(ready - t0, 1),
                "verdict": category,
                "state": record.state.value if record else None,
                "verdict_at_s": None if verdict_at is None else round(verdict_at - t0, 1),
                "actions": [
                    f"{kind}" if actor == "controller" else f"{kind} (hyperpod)"
                    for kind, actor in actions_by_node.get(n.logical_id, [])
                ],
                "instance_ids": list(n.instance_ids),
            }
        )

    executions = twin.executions()
    transitions = sum(
        1 for e in executions for ev in twin.history(e["executionArn"]) if ev["type"].endswith("StateEntered")
    )
    controller_actions = Counter(kind for _, kind, _, actor in sim.actions if actor == "controller")
    notifications = [
        {
            "kind": n["attributes"].get("kind"),
            "group": n["attributes"].get("group"),
            "node": n["message"].get("node"),
        }
        for n in twin.notifications()
    ]
    alerted = {n["node"] for n in notifications if n["kind"] == INCONCLUSIVE_ALERT}
    inconclusive = sorted(k for k, r in records.items() if r.state == NodeState.INCONCLUSIVE)
    foreign_while_active = sim.started_while_foreign_active
    return {
        "version": REPORT_VERSION,
        "scenario": s.name,
        "seed": s.seed,
        "nodes": len(nodes),
        "verdicts": {k: verdicts.get(k, 0) for k in VERDICT_CATEGORIES},
        "actions": {
            "reboot": controller_actions.get(Action.REBOOT.value, 0),
            "replace": controller_actions.get(Action.REPLACE.value, 0),
            "conflicting": len(sim.conflicting),
            "duplicate": len(sim.duplicate),
            "hyperpod_reboot": sum(1 for _, k, _, a in sim.actions if a == "hyperpod" and k == "reboot"),
            "hyperpod_replace": sum(1 for _, k, _, a in sim.actions if a == "hyperpod" and k == "replace"),
        },
        "api_calls": dict(sorted(sim.calls.items())),
        "api_faults": dict(sorted(twin.api_faults.counts.items())),
        "step_functions": {
            "executions": len(executions),
            "state_transitions": transitions,
            "statuses": dict(Counter(e["status"] for e in executions)),
        },
        "events": {
            "delivered": len(twin.delivered),
            "unmatched": len(twin.unmatched),
            "dropped": len(twin.dropped),
            "duplicated": twin.duplicated,
            "delayed": twin.delayed,
            "retried_invocations": twin.retried_invocations,
            "failed_invocations": len(twin.failed_invocations),
        },
        "checks": {
            # The controller's own requests while its own check was active; a foreign check is no fault of its.
            "started_while_active": sim.started_while_active - foreign_while_active,
            "rejected_while_active": len(sim.rejected_while_active),
            "foreign": len(sim.foreign_checks),
            "started_while_foreign_active": foreign_while_active,
        },
        "incidents": [i.report(t0) for i in twin.incidents],
        "alerts": dict(sorted(Counter(n["kind"] for n in notifications).items())),
        "notifications": notifications,
        "inconclusive_without_alert": [k for k in inconclusive if k not in alerted],
        "safety": safety_report(twin, records, t0),
        "iam": twin.iam.report(),
        "latency_s": {"ready_to_verdict": percentiles(latencies), "check": percentiles(sim.check_durations)},
        "virtual_s": round(twin.clock.now() - t0, 1),
        "wall_s": round(wall_s, 2),
        "node_details": details,
    }


def peak_in_window(times: list[float], window_s: float) -> int:
    """The most events within any rolling window of `window_s`."""
    ordered, peak, start = sorted(times), 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - window_s:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def safety_report(twin: Twin, records: dict[str, NodeRecord], t0: float) -> dict[str, Any]:
    """The breaker and holds as the controller stored them, and the replacement budgets as HyperPod saw them used."""
    cluster = twin.scenario.cluster.name
    config = parse_config(twin.config)
    group_of = {n.logical_id: n.group for n in twin.cluster_model.nodes.values()}
    replaced = [
        (t, group_of.get(lid, ""))
        for t, kind, lid, actor in twin.sim.actions
        if actor == "controller" and kind == "replace"
    ]
    alive = [r for r in records.values() if r.state != NodeState.GONE]

    def budget(budget: Budget, times: list[float], size: int) -> dict[str, int]:
        return {
            "peak": peak_in_window(times, budget.window_h * 3600),
            "limit": budget.limit(size),
            "window_h": budget.window_h,
        }

    groups = sorted({r.group for r in records.values()})
    state = NodeTable(TABLE_NAME).safety(cluster)
    controller_times = [t for t, _, _, actor in twin.sim.actions if actor == "controller"]
    return {
        "breaker_open": state.breaker is not None,
        "breaker_at_s": None if state.breaker is None else round(state.breaker.at - t0, 1),
        "resets": len(state.resets),
        "capacity_holds": sorted(state.capacity_holds),
        "last_action_at_s": round(max(controller_times) - t0, 1) if controller_times else None,
        "replace_budget": {
            "cluster": budget(config.cluster_policy(cluster).replace_budget, [t for t, _ in replaced], len(alive)),
            **{
                f"group {g}": budget(
                    config.policy_for(cluster, g).replace_budget,
                    [t for t, grp in replaced if grp == g],
                    sum(1 for r in alive if r.group == g),
                )
                for g in groups
            },
        },
    }
