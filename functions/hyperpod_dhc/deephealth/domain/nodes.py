"""What the controller knows about one node, and the vocabulary of its story.

A node is keyed on its `NodeLogicalId` (stable across replacements) where the cluster has one, else on
its instance id. Records are pure values: transitions return a new record plus a `Decision` that says why.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

HISTORY_LIMIT = 50
TRAIL_LIMIT = 30  # outcomes and actions kept per node: enough for every lemon, flap and budget window


class NodeState(StrEnum):
    PENDING = "pending"  # ready (or about to be) and waiting for a check round
    CHECKING = "checking"  # in a round's check, or HyperPod's own on-start check, awaiting a verdict
    PASSED = "passed"
    RECOVERY_DUE = "recovery_due"  # failed; a recovery action is due at `not_before`
    RECOVERING = "recovering"  # a reboot or replacement is in flight (ours or HyperPod's)
    FAILED = "failed"  # failed and policy says record only
    QUARANTINED = "quarantined"  # out of attempts: no more automated actions
    INCONCLUSIVE = "inconclusive"  # no evidence after bounded retries: needs a human, never a replacement
    GONE = "gone"  # the node or its cluster no longer exists
    SHADOWED = "shadowed"  # dry-run: what the controller would have done is recorded, nothing was done


FINAL_STATES = frozenset(
    {
        NodeState.PASSED,
        NodeState.FAILED,
        NodeState.QUARANTINED,
        NodeState.INCONCLUSIVE,
        NodeState.GONE,
        NodeState.SHADOWED,
    }
)


class Verdict(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    REPLACED_BY_HYPERPOD = "replaced-by-hyperpod"
    SKIPPED = "skipped"  # HyperPod skipped a busy node: inconclusive, not passed
    GONE = "gone"
    INCONCLUSIVE = "inconclusive"


class Action(StrEnum):
    REBOOT = "reboot"
    REPLACE = "replace"
    AWAIT_HYPERPOD = "await-hyperpod"  # NodeRecovery=Automatic: give HyperPod its grace period first
    HYPERPOD = "hyperpod"  # HyperPod's own recovery, observed


# ClusterInstanceStatus values (botocore 1.44.8 sagemaker model). botocore does not validate enums in responses, and
# the model's own doc string says "Failed" where the enum says "Failure".
RUNNING = "Running"
IN_PROGRESS = "DeepHealthCheckInProgress"
KNOWN_STATUSES = frozenset(
    {
        RUNNING,
        "Failure",
        "Pending",
        "ShuttingDown",
        "SystemUpdating",
        IN_PROGRESS,
        "NotFound",
        "DetachInProgress",
        "AttachInProgress",
    }
)
DOWN_STATUSES = frozenset({"ShuttingDown", "Failure", "Pending", "NotFound"})
FAILURE_STATUSES = frozenset({"Failure"})
# Someone (HyperPod's own recovery, its health agent, an operator) is rebooting or replacing the node right now.
BEING_RECOVERED_STATUSES = frozenset({"ShuttingDown", "Pending"})
# Statuses a reboot or replacement may be requested in (HyperPod refuses the others: InvalidInstanceStatus).
ACTIONABLE_STATUSES = frozenset({RUNNING, "Failure"})


def failure_like(status: str | None) -> bool:
    """`Failure`, or a status the API does not document (`Failed`, `DeepHealthCheckFailed`, ...): never a pass, and
    handled like `Failure` (HyperPod's grace, then the ladder), with the status quoted in the evidence."""
    return status is not None and (status in FAILURE_STATUSES or status not in KNOWN_STATUSES)


def actionable(status: str | None) -> bool:
    """A reboot or replacement may be asked for (a status the API does not document may be an isolated node's)."""
    return status is None or status in ACTIONABLE_STATUSES or status not in KNOWN_STATUSES


class NodeSnapshot(BaseModel):
    """One node as ListClusterNodes / DescribeClusterNode report it right now."""

    model_config = ConfigDict(frozen=True)

    group: str
    instance_id: str | None = None  # empty while provisioning
    logical_id: str | None = None
    status: str
    instance_type: str | None = None
    launched_at: float | None = None  # LaunchTime (epoch s): what ListClusterNodes' creation-time filters match
    hostname: str | None = None  # PrivateDnsHostname: result log streams may be named by it

    @property
    def key(self) -> str:
        return self.logical_id or self.instance_id or ""


class Outcome(BaseModel):
    """One check verdict of the node, on the instance that had it (the lemon trail across instance ids)."""

    at: float
    verdict: Verdict
    instance_id: str | None = None


class ActionEntry(BaseModel):
    """One reboot or replacement of the node, by the controller or by HyperPod (budgets count the former)."""

    at: float
    action: Action
    actor: str  # "controller" | "hyperpod"
    instance_id: str | None = None


class HistoryEntry(BaseModel):
    at: float
    state: NodeState
    reason: str
    instance_id: str | None = None
    trigger: str | None = None  # event id, round id or "reconcile"


class NodeRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cluster: str
    # The id of the cluster the node belongs to (None on records older than this field): a cluster deleted and
    # recreated under the same name is another cluster, and the old one's records no longer count.
    cluster_id: str | None = None
    key: str
    group: str
    logical_id: str | None = None
    instance_id: str | None = None
    instance_ids: list[str] = Field(default_factory=list)  # every instance that held this logical id
    instance_type: str | None = None
    # PrivateDnsHostname of the current instance, as HyperPod lists it: its short form is the node's Slurm name,
    # the key of the Slurm bridge (None on records older than this field until the next look).
    hostname: str | None = None
    # Every short hostname its instances had: a result stream of an instance since replaced is still its own.
    hostnames: list[str] = Field(default_factory=list)
    state: NodeState = NodeState.PENDING
    status: str | None = None
    status_at: float | None = None
    ready_at: float | None = None
    verdict: Verdict | None = None
    verdict_at: float | None = None
    verdict_instance_id: str | None = None
    evidence: list[str] = Field(default_factory=list)
    round_id: str | None = None
    observe_only: bool = False
    requested_checks: tuple[str, ...] | None = None  # an operator's on-demand check types, for the next round
    check_started_at: float | None = None
    # The check types the node's current (or last) check ran: what a pass must prove (None on older records), and
    # how many nodes its request's configuration held (the node set a multi-node NCCL test runs on).
    check_types: tuple[str, ...] | None = None
    check_set_size: int | None = None
    seen_in_progress: bool = False
    # First look that found the node done with its check: its result line is read `log_settle_s` after this.
    check_left_at: float | None = None
    # First look that did not find the node listed (HyperPod may drop a node from a listing while it retries):
    # it is `gone` only when still missing GONE_AFTER_S later.
    missing_since: float | None = None
    attempts: int = 0  # recovery actions so far (ours or HyperPod's)
    inconclusive_count: int = 0
    reversals: int = 0  # passes turned into failed or inconclusive by a result line that arrived after them
    # Re-checks a failure on a stream that is no node's has cost this instance (at most one: `verdicts`).
    anonymous_rechecks: int = 0
    # When the node was said to have waited too long for a check (`wait_alert_s`); cleared once a check takes it.
    wait_alerted_at: float | None = None
    action: Action | None = None
    action_at: float | None = None
    action_retries: int = 0
    # What the node's failure lines ask for (a DCGM summary's replacementRequired / rebootRequired): its next
    # ladder step skips to a replacement the policy allows.
    recovery_hint: Action | None = None
    not_before: float | None = None
    held_by: str | None = None  # why a due recovery waits: breaker, bad-capacity, replace-budget, out-of-service
    outcomes: list[Outcome] = Field(default_factory=list)
    actions: list[ActionEntry] = Field(default_factory=list)
    seen_down: bool = False
    # Whether a Slurm job holds the node, as the Slurm bridge last reported it (kept while the node waits for a
    # round), and when: a report too old is not believed (`domain.slurm.waits_for_job`).
    slurm_busy: bool | None = None
    slurm_busy_at: float | None = None
    slurm_busy_since: float | None = None  # first busy report of the current run of busy ones: bounds the deferral
    # A claim someone else holds on the node in Slurm, as the bridge reported it (an admin's DOWN, HyperPod's
    # `Action:Reboot`): the bridge leaves such a node alone, and operators see why.
    slurm_held: str | None = None
    # Found by the controller's first whole look at its cluster: in service before it watched (policy `adopt`).
    adopted: bool = False
    version: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    history: list[HistoryEntry] = Field(default_factory=list)


class Decision(BaseModel):
    """Why a record changed: logged as the audit line for every transition."""

    cluster: str
    node: str
    group: str
    instance_id: str | None
    from_state: NodeState | None
    to_state: NodeState
    reason: str
    verdict: Verdict | None = None
    evidence: list[str] = Field(default_factory=list)
    action: Action | None = None
    trigger: str | None = None  # what caused it: an event id, a round id, "reconcile" or an API request


_ROUND_SEQ = re.compile(r"-r(\d{6,})$")


def round_seq_of(round_id: str | None) -> int | None:
    """The sequence number in a round id (`<cluster>-r000042` -> 42), None for anything else."""
    match = _ROUND_SEQ.search(round_id or "")
    return int(match.group(1)) if match else None


def transition(
    record: NodeRecord,
    now: float,
    state: NodeState,
    reason: str,
    trigger: str | None = None,
    **changes: object,
) -> tuple[NodeRecord, Decision]:
    """Move `record` to `state`, stamping history; `changes` are other field updates."""
    entry = HistoryEntry(
        at=now,
        state=state,
        reason=reason,
        instance_id=changes.get("instance_id", record.instance_id),
        trigger=trigger,
    )
    updated = record.model_copy(
        update={
            **changes,
            "state": state,
            "updated_at": now,
            "history": [*record.history, entry][-HISTORY_LIMIT:],
        }
    )
    decision = Decision(
        cluster=record.cluster,
        node=record.key,
        group=record.group,
        instance_id=updated.instance_id,
        from_state=record.state if record.version else None,
        to_state=state,
        reason=reason,
        verdict=updated.verdict if "verdict" in changes else None,
        evidence=updated.evidence if "evidence" in changes else [],
        action=updated.action if "action" in changes else None,
        trigger=trigger,
    )
    return updated, decision


# The trigger of the transition that queues a passed node for its periodic re-check (policy revalidate_every_days),
# and the reason of the one that puts it back in service when a job reached it before its check began.
REVALIDATION = "revalidation"
JOB_WON = "revalidation deferred: a job arrived"
_SPELL = (NodeState.PENDING, NodeState.CHECKING)


def revalidating(record: NodeRecord) -> bool:
    """Out for a periodic re-check: waiting for a round or in its check since the reconciler queued it for
    revalidation (the history of its current spell of pending/checking says so)."""
    return record.state in _SPELL and _revalidation_spell(record.history)


def revalidated(record: NodeRecord) -> bool:
    """The record's last transition ended a revalidation spell (a verdict, or the release when a job won)."""
    return record.state not in _SPELL and bool(record.history) and _revalidation_spell(record.history[:-1])


def revalidation_queued_at(record: NodeRecord) -> float | None:
    """When the reconciler queued the node for its current revalidation (None: it is not out for one)."""
    for entry in reversed(record.history):
        if entry.state not in _SPELL:
            return None
        if entry.state == NodeState.PENDING and entry.trigger == REVALIDATION:
            return entry.at
    return None


def _revalidation_spell(history: list[HistoryEntry]) -> bool:
    for entry in reversed(history):
        if entry.state not in _SPELL:
            return False
        if entry.state == NodeState.PENDING and entry.trigger == REVALIDATION:
            return True
    return False


def short_hostname(hostname: str | None) -> str | None:
    """`ip-10-1-2-3.ec2.internal` -> `ip-10-1-2-3`: the node's Slurm name, and the form a result stream would use."""
    return hostname.split(".", 1)[0] if hostname else None


def last_seen(record: NodeRecord) -> NodeSnapshot:
    """The node as the last look that listed it saw it (what its record says)."""
    return NodeSnapshot(
        group=record.group,
        instance_id=record.instance_id,
        logical_id=record.logical_id,
        status=record.status or "",
        instance_type=record.instance_type,
        hostname=record.hostname,
    )


def refreshed(record: NodeRecord, snapshot: NodeSnapshot, now: float) -> NodeRecord:
    """Last-seen status and hostname (a replacement brings its own): not a decision, so no history entry; saved
    with the next decision (a node waiting for its lines to settle: at once, `observe.seen_while_settling`)."""
    update: dict[str, object] = {}
    if record.status != snapshot.status:
        update.update(status=snapshot.status, status_at=now)
    if snapshot.hostname and snapshot.hostname != record.hostname:
        update["hostname"] = snapshot.hostname
    if (names := with_hostname(record.hostnames, snapshot.hostname)) != record.hostnames:
        update["hostnames"] = names
    return record.model_copy(update=update) if update else record


def instance_replaced(record: NodeRecord, snapshot: NodeSnapshot) -> bool:
    """The node is listed with another instance than the record's: the logical id got new hardware."""
    return bool(snapshot.instance_id and record.instance_id and snapshot.instance_id != record.instance_id)


def recheck(
    record: NodeRecord, snapshot: NodeSnapshot, now: float, reason: str, trigger: str | None, **changes: object
) -> tuple[NodeRecord, Decision]:
    """Back to `pending` for a fresh check of the instance `snapshot` shows (ready now if it is Running); what
    the last check, round or recovery left on the record is cleared."""
    return transition(
        record,
        now,
        NodeState.PENDING,
        reason,
        trigger,
        instance_id=snapshot.instance_id or record.instance_id,
        instance_ids=with_instance(record.instance_ids, snapshot.instance_id),
        ready_at=now if snapshot.status == RUNNING else None,
        round_id=None,
        seen_in_progress=False,
        check_started_at=None,
        seen_down=False,
        observe_only=False,
        held_by=None,
        recovery_hint=None,
        check_types=None,
        check_set_size=None,
        anonymous_rechecks=0,
        **changes,
    )


def with_instance(ids: list[str], new: str | None) -> list[str]:
    """Instance-id history with `new` appended once (the lemon trail across replacements)."""
    return [*ids, new] if new and new not in ids else ids


def with_hostname(names: list[str], hostname: str | None) -> list[str]:
    """Short-hostname history with `hostname`'s appended once (the most recent TRAIL_LIMIT)."""
    short = short_hostname(hostname)
    return [*names, short][-TRAIL_LIMIT:] if short and short not in names else names


def with_outcome(outcomes: list[Outcome], at: float, verdict: Verdict, instance_id: str | None) -> list[Outcome]:
    return [*outcomes, Outcome(at=at, verdict=verdict, instance_id=instance_id)][-TRAIL_LIMIT:]


def with_action(
    actions: list[ActionEntry], at: float, action: Action, actor: str, instance_id: str | None
) -> list[ActionEntry]:
    return [*actions, ActionEntry(at=at, action=action, actor=actor, instance_id=instance_id)][-TRAIL_LIMIT:]
