"""On-demand checks: an operator asks for whole instance groups or specific nodes to be checked.

The request only queues nodes for the next round (the one-active-check rule still holds); a node already
waiting or being checked is not queued twice, and a node in recovery or quarantine is left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import (
    JOB_WON,
    REVALIDATION,
    Decision,
    NodeRecord,
    NodeState,
    revalidating,
    transition,
)
from hyperpod_dhc.deephealth.domain.policy import GROUP_NAME_PATTERN, CheckType
from hyperpod_dhc.deephealth.domain.slurm import BUSY_FRESH_S

# An EC2 instance id, or a NodeLogicalId (botocore model patterns).
NODE_REF_PATTERN = r"^(i-[0-9a-f]{8}(?:[0-9a-f]{9})?|[a-zA-Z0-9][a-zA-Z0-9-]{0,126}[a-zA-Z0-9])$"
NodeRef = Annotated[str, Field(pattern=NODE_REF_PATTERN)]
GroupName = Annotated[str, Field(pattern=GROUP_NAME_PATTERN)]


class CheckRequest(BaseModel):
    """POST /clusters/{cluster}/checks: whole instance groups, or specific nodes, and optional check types."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: list[GroupName] = Field(default_factory=list, max_length=100)
    instances: list[NodeRef] = Field(default_factory=list, max_length=3000)
    checks: tuple[CheckType, ...] | None = Field(default=None, min_length=1, max_length=3)

    @field_validator("checks")
    @classmethod
    def _unique(cls, checks: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if checks is not None and len(set(checks)) != len(checks):
            raise ValueError("checks must not repeat a check type")
        return checks

    @model_validator(mode="after")
    def _one_selection(self) -> CheckRequest:
        if bool(self.groups) == bool(self.instances):
            raise ValueError("give exactly one of groups or instances")
        return self


# A node a job won back from its revalidation (the job reached it before its check began) is queued again no sooner:
# about a job's length, so a busy node costs a few transitions a day (and its history stays readable).
REVALIDATION_RETRY_S = 4 * 3600
# Running jobs are not pre-empted: HyperPod waits up to 10 minutes for a job, then skips the node.
JOBS_NOTE = (
    "Running jobs are not pre-empted: HyperPod waits up to 10 minutes for a node's job to finish, then skips "
    "the node; a skipped node is recorded as skipped and re-checked, never treated as failed."
)
NOT_QUEUED = {
    NodeState.PENDING: "already waiting for a check round",
    NodeState.CHECKING: "already being checked",
    NodeState.RECOVERY_DUE: "recovery in progress; it is re-checked after the recovery",
    NodeState.RECOVERING: "recovery in progress; it is re-checked after the recovery",
    NodeState.QUARANTINED: "quarantined: no automated actions",
    NodeState.GONE: "the node no longer exists",
}


@dataclass(frozen=True)
class Refusal:
    node: str
    reason: str


def find(records: dict[str, NodeRecord], ref: str) -> NodeRecord | None:
    """A node by logical id (the record key) or by any instance id it has had."""
    return records.get(ref) or next((r for r in records.values() if r.instance_id == ref), None)


def queue_checks(
    records: dict[str, NodeRecord],
    groups: dict[str, GroupContext],
    *,
    group_names: list[str],
    nodes: list[str],
    checks: tuple[str, ...] | None,
    now: float,
    trigger: str,
) -> tuple[list[tuple[NodeRecord, Decision]], list[Refusal]]:
    """The transitions that queue the selected nodes, and why any selected node was not queued."""
    selected: list[tuple[str, NodeRecord | None]] = []
    refused: list[Refusal] = []
    for name in group_names:
        ctx = groups.get(name)
        if ctx is None:
            refused.append(Refusal(name, "no such instance group in the cluster"))
        elif not ctx.watched:
            refused.append(Refusal(name, "the group is not checked (controller/login group, or mode off)"))
        elif ctx.observe_only:
            refused.append(Refusal(name, "the group runs HyperPod's on-start checks; the controller only observes"))
        else:
            selected += [(r.key, r) for r in sorted(records.values(), key=lambda r: r.key) if r.group == name]
    selected += [(ref, find(records, ref)) for ref in nodes]

    queued: list[tuple[NodeRecord, Decision]] = []
    seen: set[str] = set()
    for ref, record in selected:
        if record is None:
            refused.append(Refusal(ref, "unknown node (not yet seen Running by the controller)"))
            continue
        if record.key in seen:
            continue
        seen.add(record.key)
        ctx = groups.get(record.group)
        if ctx is None or not ctx.watched or ctx.observe_only:
            refused.append(Refusal(record.key, "the node's group is not checked on demand"))
        elif record.state in NOT_QUEUED:
            refused.append(Refusal(record.key, NOT_QUEUED[record.state]))
        else:
            queued.append(
                transition(
                    record,
                    now,
                    NodeState.PENDING,
                    f"on-demand check requested ({', '.join(checks or ctx.policy.checks)})",
                    trigger,
                    ready_at=now if record.status == "Running" else None,
                    requested_checks=checks,
                    seen_in_progress=False,
                    check_started_at=None,
                    round_id=None,
                )
            )
    return queued, refused


def due_for_revalidation(
    records: dict[str, NodeRecord], groups: dict[str, GroupContext], now: float, bridge_seen_at: float | None = None
) -> list[str]:
    """Passed nodes whose group re-validates them (`revalidate_every_days`, 0: off) and whose verdict is older than
    that, oldest verdict first, as many per group as keep its nodes out for revalidation (queued or in a check)
    within `revalidate_max_fraction` of its live nodes (at least one). Only while the cluster's Slurm bridge is
    live (`bridge_seen_at`, its last pull, within BUSY_FRESH_S): the bridge's occupancy reports are what keep the
    check off a busy node (no bridge: no revalidation). Not a node someone else holds in Slurm, nor one a job won
    back within REVALIDATION_RETRY_S."""
    if bridge_seen_at is None or now - bridge_seen_at > BUSY_FRESH_S:
        return []
    by_group: dict[str, list[NodeRecord]] = {}
    for r in records.values():
        by_group.setdefault(r.group, []).append(r)
    due: list[str] = []
    for name, members in sorted(by_group.items()):
        ctx = groups.get(name)
        if ctx is None or not ctx.watched or ctx.observe_only or ctx.policy.dry_run:
            continue
        days = ctx.policy.revalidate_every_days
        if not days:
            continue
        live = [r for r in members if r.state not in (NodeState.GONE, NodeState.SHADOWED)]
        cap = max(1, math.floor(ctx.policy.revalidate_max_fraction * len(live))) if live else 0
        room = cap - sum(1 for r in live if revalidating(r))
        stale = [
            r
            for r in live
            if r.state == NodeState.PASSED
            and r.verdict_at is not None
            and r.verdict_at <= now - days * 86400
            and r.slurm_held is None
            and not _job_won_lately(r, now)
        ]
        stale.sort(key=lambda r: (r.verdict_at or 0.0, r.key))
        due += [r.key for r in stale[: max(0, room)]]
    return due


def queue_revalidations(
    records: dict[str, NodeRecord], keys: list[str], now: float
) -> list[tuple[NodeRecord, Decision]]:
    """The transitions that queue these passed nodes for revalidation: pending (still in service: the bridge keeps
    no drain on them) and their occupancy forgotten, so only the bridge's reports from now on can let a round claim
    them (`domain.slurm.revalidation_idle`)."""
    out = []
    for key in keys:
        r = records[key]
        days = now - (r.verdict_at or now)
        out.append(
            transition(
                r,
                now,
                NodeState.PENDING,
                f"revalidation: passed {days / 86400:.1f} days ago; checked once the Slurm bridge reports it idle",
                REVALIDATION,
                ready_at=now if r.status == "Running" else None,
                requested_checks=None,
                seen_in_progress=False,
                check_started_at=None,
                round_id=None,
                slurm_busy=None,
                slurm_busy_at=None,
                slurm_busy_since=None,
            )
        )
    return out


def _job_won_lately(record: NodeRecord, now: float) -> bool:
    last = record.history[-1] if record.history else None
    return last is not None and last.reason == JOB_WON and now - last.at < REVALIDATION_RETRY_S
