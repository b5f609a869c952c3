"""What Slurm should make of a node, from its record: the Slurm bridge's desired state. The agent on the cluster's
Slurm controller node (`hyperpod_dhc.hpdhc.bridge`, which holds the `scontrol` changes that get a node there) reads it
from the API and applies it.

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

from hyperpod_dhc.deephealth.domain.nodes import (
    NodeRecord,
    NodeState,
    Verdict,
    revalidating,
    revalidation_queued_at,
    short_hostname,
)

OWNED_PREFIX = "hpdhc:"
# Reasons as `sinfo -R` shows them (its first 20 characters tell them apart), then the instance and where to look.
WAIT, CHECK, FAIL, INCONCLUSIVE, AMBIGUOUS = "wait", "check", "FAIL", "inconcl", "ambig"
AWAITING = OWNED_PREFIX + WAIT + " not recorded by the controller yet"  # the bridge's own, for an unlisted node
FEATURE_KEY = "HealthCheck"
# The deep health check's tests as a failure line may name them (evidence), for `hpdhc:FAIL <test>`.
_TESTS = (("dcgm", "dcgm"), ("efa", "efa"), ("nccl", "nccl"), ("stress", "stress"), ("gpupci", "gpupci"),
          ("gpu pci", "gpupci"))  # fmt: skip


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


def reason(word: str, record: NodeRecord, what: str) -> str:
    """`hpdhc:<word> <what>, <instance>; hpdhc history <cluster> <node>`: short enough for Slurm (< 400)."""
    where = f"hpdhc history {record.cluster} {record.key}"
    return f"{OWNED_PREFIX}{word} {what}, {record.instance_id or 'no instance'}; {where}"[:380]


def desired_state(record: NodeRecord, isolate_until_checked: bool) -> Desired | None:
    """What Slurm should make of the node now; None: nothing (gone, or a dry-run group that only records)."""
    state = record.state
    if state in (NodeState.GONE, NodeState.SHADOWED):
        return None
    if state == NodeState.PASSED:
        return Desired(None, Feature.PASSED)
    if state in (NodeState.RECOVERY_DUE, NodeState.RECOVERING, NodeState.FAILED, NodeState.QUARANTINED):
        test = failed_test(record)
        word = f"{FAIL} {test}" if test else FAIL
        return Desired(reason(word, record, state.value.replace("_", " ")), Feature.FAILED)
    if state == NodeState.INCONCLUSIVE:
        # Doubt costs a verdict, not the fleet: only a node that was never in service (a new node of an isolating
        # group) stays out for it; an adopted node, or one that passed on this instance before, keeps its jobs.
        if not isolate_until_checked or record.adopted or _passed_before(record):
            return Desired(None, Feature.SKIPPED)
        return Desired(reason(INCONCLUSIVE, record, "deep health check proved nothing"), Feature.SKIPPED)
    # Revalidation (a passed node's periodic re-check, queued only while the bridge reports it idle): it keeps
    # taking jobs while it waits for a round, so a job that reaches it first wins (the round puts it back in
    # service); once a round claims it, it is in the lock for its check's duration, whatever the group isolates.
    if state == NodeState.CHECKING and _validated(record) and revalidating(record):
        return Desired(reason(CHECK, record, "revalidation running"), Feature.IN_PROGRESS)
    # Pending or in a check: a node whose current instance passed its last check keeps taking jobs while it is
    # re-checked (an operator's on-demand check); one never validated is isolated if its group says so.
    if _validated(record) or not isolate_until_checked:
        return Desired(None, Feature.PASSED if _validated(record) else Feature.IN_PROGRESS)
    if state == NodeState.CHECKING:
        return Desired(reason(CHECK, record, "deep health check running"), Feature.IN_PROGRESS)
    return Desired(reason(WAIT, record, "deep health check not passed yet"), Feature.IN_PROGRESS)


def ambiguous(name: str, records: Iterable[NodeRecord]) -> Desired:
    """Two live records claim one Slurm name: neither is believed, and the node stays out of service."""
    instances = " ".join(sorted(r.instance_id or r.key for r in records))
    return Desired(f"{OWNED_PREFIX}{AMBIGUOUS} {name} claimed by {instances}; hpdhc nodes"[:380], Feature.IN_PROGRESS)


def failed_test(record: NodeRecord) -> str | None:
    """The test a failed node's evidence names first, if any (`dcgm`, `efa`, `nccl`, `stress`, `gpupci`)."""
    for line in record.evidence:
        lowered = line.lower()
        for needle, test in _TESTS:
            if needle in lowered:
                return test
    return None


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
# A node launched this long before the controller's first look at its cluster is adopted (in service before it
# watched), not new: the group's `adopt` policy decides whether the bridge drains it.
ADOPT_AFTER_S = 3600
MAX_REPORTED_NODES = 1000  # per occupancy report
# Nodes per page of the desired state: the bridge asks for pages this large, so a pass up to this size loads the
# cluster's records once (about 300 bytes a node: 3 MB, under Lambda's 6 MB answer).
MAX_STATE_PAGE = 10_000
MAX_UNKNOWN_ECHOED = 20  # names an occupancy answer echoes back as unknown (it counts them all)
HELD_MAX = 200
SLURM_NODE_PATTERN = r"^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"  # a short hostname: ip-10-1-2-3


class NodeOccupancy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node: Annotated[str, Field(pattern=SLURM_NODE_PATTERN)]  # the Slurm node name (short hostname)
    busy: StrictBool  # a job runs on the node
    # The record's key, as the state document gave it: the report is read by key (no whole-cluster load).
    key: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    # Someone else's claim on the node in Slurm (state words and reason), which the bridge leaves alone.
    held: Annotated[str, Field(min_length=1, max_length=HELD_MAX)] | None = None

    @field_validator("held")
    @classmethod
    def _printable(cls, held: str | None) -> str | None:
        if held is not None and not held.isprintable():
            raise ValueError("held must be printable text")
        return held


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


def slurm_names(records: Iterable[NodeRecord]) -> dict[str, list[NodeRecord]]:
    """Slurm node name -> the live records whose current instance has that name (gone and shadowed ones never
    speak for a name). One record: the name's; two or more: ambiguous (a private IP reused while the old record
    lives), and the node stays drained until one of them goes."""
    names: dict[str, list[NodeRecord]] = {}
    for r in sorted(records, key=lambda r: r.key):
        if r.state in (NodeState.GONE, NodeState.SHADOWED):
            continue
        if name := short_hostname(r.hostname):
            names.setdefault(name, []).append(r)
    return names


def with_occupancy(record: NodeRecord, busy: bool, held: str | None, now: float) -> NodeRecord | None:
    """The record with the bridge's report, or None when that is not worth a write. A claim someone else holds is
    written whenever it changes. Occupancy only matters to a node waiting for a round, and an unchanged report
    is written only to refresh it (OCCUPANCY_REFRESH_S); the first busy report of a run starts the deferral."""
    update: dict[str, object] = {}
    if record.slurm_held != held:
        update["slurm_held"] = held
    if record.state == NodeState.PENDING:
        recent = record.slurm_busy_at is not None and now - record.slurm_busy_at < OCCUPANCY_REFRESH_S
        if record.slurm_busy != busy or not recent:
            # A run of busy reports goes on while each comes before the last one went stale.
            at = record.slurm_busy_at
            going_on = record.slurm_busy and busy and at is not None and now - at <= BUSY_FRESH_S
            since = record.slurm_busy_since if going_on and record.slurm_busy_since is not None else now
            update |= {"slurm_busy": busy, "slurm_busy_at": now, "slurm_busy_since": since if busy else None}
    return record.model_copy(update=update) if update else None


def waits_for_job(record: NodeRecord, now: float, defer_max_s: float | None = None) -> bool:
    """A job runs on the node, as the bridge reported within BUSY_FRESH_S, and it has not deferred the node's check
    longer than `defer_max_s` (the group's job_defer_max_s): its check waits, since HyperPod would queue it behind
    the job and skip the node. An older report is not believed: a dead bridge never holds a node back for good,
    and neither does a live one that reports busy for ever."""
    at = record.slurm_busy_at
    fresh = bool(record.slurm_busy) and at is not None and now - at <= BUSY_FRESH_S
    return fresh and not deferred_too_long(record, now, defer_max_s)


def revalidation_idle(record: NodeRecord, now: float) -> bool | None:
    """A node queued for revalidation, as the bridge reported it since: True idle (a round may claim it), False a
    job runs on it (the job wins), None no report yet, or none within BUSY_FRESH_S (the round waits for one)."""
    queued_at = revalidation_queued_at(record)
    at = record.slurm_busy_at
    if queued_at is None or record.slurm_busy is None or at is None or at < queued_at or now - at > BUSY_FRESH_S:
        return None
    return not record.slurm_busy


def deferred_too_long(record: NodeRecord, now: float, defer_max_s: float | None) -> bool:
    """The bridge has reported the node busy for longer than the bound."""
    since = record.slurm_busy_since
    return bool(record.slurm_busy) and defer_max_s is not None and since is not None and now - since > defer_max_s


def job_wait(waiting: Iterable[NodeRecord], now: float) -> int:
    """Seconds a round waits for these busy nodes: until the first report goes stale, JOB_WAIT_S at most."""
    stale_in = min(((r.slurm_busy_at or now) + BUSY_FRESH_S - now for r in waiting), default=JOB_WAIT_S)
    return min(JOB_WAIT_S, max(1, math.floor(stale_in) + 1))


def _passed_before(record: NodeRecord) -> bool:
    """The node's current instance passed a check once (it was in service)."""
    return any(o.verdict == Verdict.PASSED for o in record.outcomes if o.instance_id == record.instance_id)


def _validated(record: NodeRecord) -> bool:
    """The node's current instance passed its last check."""
    mine = [o for o in record.outcomes if o.instance_id and o.instance_id == record.instance_id]
    return bool(mine) and mine[-1].verdict == Verdict.PASSED
