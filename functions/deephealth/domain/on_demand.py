"""On-demand checks: an operator asks for whole instance groups or specific nodes to be checked.

The request only queues nodes for the next round (the one-active-check rule still holds); a node already
waiting or being checked is not queued twice, and a node in recovery or quarantine is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deephealth.domain.nodes import Decision, NodeRecord, NodeState, transition
from deephealth.domain.policy import GROUP_NAME_PATTERN, CheckType, GroupContext

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


def due_for_revalidation(records: dict[str, NodeRecord], groups: dict[str, GroupContext], now: float) -> list[str]:
    """Passed nodes whose group asks for periodic re-validation and whose verdict is older than that."""
    due = []
    for r in records.values():
        ctx = groups.get(r.group)
        days = ctx.policy.revalidate_every_days if ctx else None
        if days and r.state == NodeState.PASSED and r.verdict_at is not None and r.verdict_at <= now - days * 86400:
            due.append(r.key)
    return sorted(due)
