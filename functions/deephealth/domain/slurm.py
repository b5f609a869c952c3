"""What Slurm should make of a node, from its record: the Slurm bridge's desired state. The agent on the cluster's
Slurm controller node (`hpdhc.bridge`, which holds the `scontrol` changes that get a node there) reads it from the
API and applies it.

A new node takes no job before its check passes: until then it is drained with a reason the controller owns
(`hpdhc: ...`), and only such drains are ever resumed; anyone else's drain (an admin's, HyperPod's
`Action:Reboot|Replace`) is left alone. A drain never kills a running job: Slurm lets it finish. The node
feature `HealthCheck:InProgress|Passed|Failed|Skipped` follows the awsome-distributed-training HyperPod
health_check sample's contract, so its tooling and ours read the same labels.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from deephealth.domain.nodes import NodeRecord, NodeState, Verdict, short_hostname

OWNED_PREFIX = "hpdhc: "
AWAITING = OWNED_PREFIX + "awaiting deep health check"
RUNNING_CHECK = OWNED_PREFIX + "deep health check running"
FEATURE_KEY = "HealthCheck"


class Feature(StrEnum):
    IN_PROGRESS = "HealthCheck:InProgress"
    PASSED = "HealthCheck:Passed"
    FAILED = "HealthCheck:Failed"
    SKIPPED = "HealthCheck:Skipped"  # the sample's word for inconclusive: no remediation


@dataclass(frozen=True)
class Desired:
    """A node's desired Slurm state: drained with `reason` (owned), or not drained by us (`reason` None)."""

    reason: str | None
    feature: Feature


def desired_state(record: NodeRecord, isolate_until_checked: bool) -> Desired | None:
    """What Slurm should make of the node now; None: nothing (gone, or a dry-run group that only records)."""
    state = record.state
    if state in (NodeState.GONE, NodeState.SHADOWED):
        return None
    if state == NodeState.PASSED:
        return Desired(None, Feature.PASSED)
    if state in (NodeState.RECOVERY_DUE, NodeState.RECOVERING, NodeState.FAILED, NodeState.QUARANTINED):
        return Desired(f"{OWNED_PREFIX}{state.value} after a failed deep health check", Feature.FAILED)
    if state == NodeState.INCONCLUSIVE:
        return Desired(f"{OWNED_PREFIX}deep health check inconclusive", Feature.SKIPPED)
    # Pending or in a check: a node whose current instance passed its last check keeps taking jobs while it is
    # re-checked (revalidation); one never validated is isolated if its group says so.
    if _validated(record) or not isolate_until_checked:
        return Desired(None, Feature.PASSED if _validated(record) else Feature.IN_PROGRESS)
    return Desired(RUNNING_CHECK if state == NodeState.CHECKING else AWAITING, Feature.IN_PROGRESS)


# -- occupancy: the bridge reports which nodes run jobs, so a round waits for busy nodes instead of letting HyperPod
# skip them (it queues a check behind a running job for 10 min, then skips the node) -----------------------------
SYNC_INTERVAL_S = 60  # how often the bridge syncs unless told otherwise (it reads this from the state route)
# An unchanged report is written again this often, so the age of the last write says whether the bridge still
# reports; only a changed one is written sooner.
OCCUPANCY_REFRESH_S = 300
# A busy report is believed this long after it was written: a live bridge refreshes it every OCCUPANCY_REFRESH_S
# (five missed syncs to spare), and a dead bridge holds a node back no longer than this.
BUSY_FRESH_S = OCCUPANCY_REFRESH_S + 5 * SYNC_INTERVAL_S
# A round that finds nothing to claim but nodes busy with jobs waits for them at most this long before it ends.
JOB_WAIT_S = 300
MAX_REPORTED_NODES = 1000
SLURM_NODE_PATTERN = r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"  # a short hostname: ip-10-1-2-3


class NodeOccupancy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node: Annotated[str, Field(pattern=SLURM_NODE_PATTERN)]  # the Slurm node name (short hostname)
    busy: StrictBool  # a job runs on the node


class OccupancyReport(BaseModel):
    """POST /clusters/{cluster}/slurm/occupancy: whether a job runs on each node, as the bridge sees it now."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: list[NodeOccupancy] = Field(min_length=1, max_length=MAX_REPORTED_NODES)

    @field_validator("nodes")
    @classmethod
    def _unique(cls, nodes: list[NodeOccupancy]) -> list[NodeOccupancy]:
        if len({n.node for n in nodes}) != len(nodes):
            raise ValueError("nodes must not repeat a node")
        return nodes


def slurm_names(records: Iterable[NodeRecord]) -> dict[str, NodeRecord]:
    """Slurm node name -> its record. A name HyperPod handed out again (a private IP reused) is the live record's,
    else the one changed last."""
    ranked = sorted(records, key=lambda r: (r.state != NodeState.GONE, r.updated_at, r.key))
    return {name: r for r in ranked if (name := short_hostname(r.hostname))}


def with_occupancy(record: NodeRecord, busy: bool, now: float) -> NodeRecord | None:
    """The record with the bridge's report, or None when that is not worth a write: only a node waiting for a
    round uses it, and an unchanged report is written only to refresh it (OCCUPANCY_REFRESH_S)."""
    if record.state != NodeState.PENDING:
        return None
    recent = record.slurm_busy_at is not None and now - record.slurm_busy_at < OCCUPANCY_REFRESH_S
    if record.slurm_busy == busy and recent:
        return None
    return record.model_copy(update={"slurm_busy": busy, "slurm_busy_at": now})


def waits_for_job(record: NodeRecord, now: float) -> bool:
    """A job runs on the node, as the bridge reported within BUSY_FRESH_S: its check waits, since HyperPod would
    queue it behind the job and skip the node. An older report is not believed: a dead bridge never holds a
    node back for good."""
    at = record.slurm_busy_at
    return bool(record.slurm_busy) and at is not None and now - at <= BUSY_FRESH_S


def job_wait(waiting: Iterable[NodeRecord], now: float) -> int:
    """Seconds a round waits for these busy nodes: until the first report goes stale, JOB_WAIT_S at most."""
    stale_in = min(((r.slurm_busy_at or now) + BUSY_FRESH_S - now for r in waiting), default=JOB_WAIT_S)
    return min(JOB_WAIT_S, max(1, math.floor(stale_in) + 1))


def _validated(record: NodeRecord) -> bool:
    """The node's current instance passed its last check."""
    mine = [o for o in record.outcomes if o.instance_id and o.instance_id == record.instance_id]
    return bool(mine) and mine[-1].verdict == Verdict.PASSED
