"""Read models for operators: per cluster, per instance group, per node (pure functions over records)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES, NodeRecord, NodeState

# Accelerators per instance, for GPU-hours spent in checks (instance types not listed count as 1).
ACCELERATORS = {
    "ml.p5.48xlarge": 8, "ml.p5e.48xlarge": 8, "ml.p5en.48xlarge": 8, "ml.p4d.24xlarge": 8,
    "ml.p4de.24xlarge": 8, "ml.p6-b200.48xlarge": 8, "ml.g5.48xlarge": 8, "ml.g5.24xlarge": 4,
    "ml.g5.12xlarge": 4, "ml.g6.48xlarge": 8, "ml.g6.12xlarge": 4, "ml.trn1.32xlarge": 16,
    "ml.trn1n.32xlarge": 16, "ml.trn2.48xlarge": 16,
}  # fmt: skip


def state_counts(records: list[NodeRecord]) -> dict[str, int]:
    counts = Counter(r.state.value for r in records)
    return {state.value: counts.get(state.value, 0) for state in NodeState}


def check_seconds(record: NodeRecord) -> float:
    """Time this node spent in checks, from its history (claimed or watched -> the next state)."""
    total, since = 0.0, None
    for entry in record.history:
        if entry.state == NodeState.CHECKING:
            since = since if since is not None else entry.at
        elif since is not None:
            total += entry.at - since
            since = None
    return total


def group_views(records: list[NodeRecord], live_round: str | None) -> list[dict[str, Any]]:
    out = []
    for group in sorted({r.group for r in records}):
        members = [r for r in records if r.group == group]
        checked = [r for r in members if r.state in FINAL_STATES and r.verdict_instance_id == r.instance_id]
        last = sorted((r for r in members if r.verdict_at), key=lambda r: r.verdict_at or 0, reverse=True)[:5]
        gpu_hours = sum(check_seconds(r) * ACCELERATORS.get(r.instance_type or "", 1) for r in members) / 3600
        out.append(
            {
                "group": group,
                "nodes": len(members),
                "states": state_counts(members),
                "current_round": live_round if any(r.round_id == live_round for r in members) else None,
                "progress": {"checked": len(checked), "total": len(members)},
                "last_verdicts": [{"node": r.key, "verdict": r.verdict, "at": r.verdict_at} for r in last],
                "gpu_hours_in_checks": round(gpu_hours, 2),
            }
        )
    return out


def node_summary(record: NodeRecord) -> dict[str, Any]:
    return {
        "node": record.key,
        "group": record.group,
        "state": record.state.value,
        "verdict": record.verdict,
        "evidence": record.evidence,
        "attempts": record.attempts,
        "instance_id": record.instance_id,
        "status": record.status,
        "ready_at": record.ready_at,
        "verdict_at": record.verdict_at,
        "check_seconds": round(check_seconds(record), 1),
        # Someone else's claim in Slurm, which the bridge leaves alone: "held by Slurm/admin: <claim>".
        "slurm": f"held by Slurm/admin: {record.slurm_held}" if record.slurm_held else None,
    }


def node_detail(record: NodeRecord) -> dict[str, Any]:
    """Everything, including the trail across instance ids: every verdict and every reboot/replacement by whom
    (what lemon and flap tracking, budgets and the breaker count), and the transition history."""
    return {
        **node_summary(record),
        "logical_id": record.logical_id,
        "instance_ids": record.instance_ids,
        "instance_type": record.instance_type,
        "inconclusive_count": record.inconclusive_count,
        "held_by": record.held_by,
        "outcomes": [o.model_dump(mode="json") for o in record.outcomes],
        "actions": [a.model_dump(mode="json") for a in record.actions],
        "history": [h.model_dump(mode="json") for h in record.history],
    }
