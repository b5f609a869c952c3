"""The twin's report: what actually happened, counted where it happened.

API calls are counted at the fake's boundary, state transitions read from the executions' histories,
verdicts from the controller's own table, ground truth from the simulation.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from deephealth.domain.nodes import Action, NodeRecord, NodeState
from tests.twin.simulation import CONTROLLER_GROUP, Twin

REPORT_VERSION = 1
VERDICT_CATEGORIES = (
    "passed", "passed_after_reboot", "replaced", "quarantined", "failed", "inconclusive", "gone", "no_verdict",
)  # fmt: skip


def outcome(record: NodeRecord | None, actions: list[str]) -> str:
    """The node's verdict category for the report."""
    if record is None or record.state not in (
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

    nodes = [n for n in sim.cluster(s.cluster.name).nodes.values() if n.group != CONTROLLER_GROUP]
    details, latencies, verdicts = [], [], Counter()
    for n in sorted(nodes, key=lambda n: (n.group, n.created, n.logical_id)):
        record = records.get(n.logical_id)
        kinds = [kind for kind, _ in actions_by_node.get(n.logical_id, [])]
        category = outcome(record, kinds)
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
            "hyperpod_reboot": sum(1 for _, k, _, a in sim.actions if a == "hyperpod" and k == "reboot"),
            "hyperpod_replace": sum(1 for _, k, _, a in sim.actions if a == "hyperpod" and k == "replace"),
        },
        "api_calls": dict(sorted(sim.calls.items())),
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
        },
        "checks": {
            "started_while_active": sim.started_while_active,
            "rejected_while_active": len(sim.rejected_while_active),
        },
        "latency_s": {"ready_to_verdict": percentiles(latencies), "check": percentiles(sim.check_durations)},
        "virtual_s": round(twin.clock.now() - t0, 1),
        "wall_s": round(wall_s, 2),
        "node_details": details,
    }
