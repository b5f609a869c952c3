"""The decision table: from evidence about one checked node to a verdict.

HyperPod's API has no pass/fail field, so the verdict is inferred, and only positive evidence passes a node:
- a result line that names the node's instance (or hostname) and says it passed, read `log_settle_s` after
  the node left its check (CloudWatch delivers lines late), and no error line naming it;
- or, for HyperPod's own on-start checks, `Running` after `DeepHealthCheckInProgress` (HyperPod isolates or
  replaces a node that fails them) with no error line naming it or naming nobody.
Failure evidence: an error line naming the node, `Failure`, HyperPod rebooting the node after the check, or its
instance id changing under the same `NodeLogicalId` (HyperPod replaced it). Everything else is not a pass:
- `skipped` (re-checked): it left the check with no result line at all (busy with a job, or superseded), or
  never entered it while HyperPod's check operation ran to its end;
- `inconclusive` (an operator decides, no re-check): result lines exist but name no instance, so they cannot
  clear or condemn any one node; or the node stayed in `DeepHealthCheckInProgress` after the operation ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from deephealth.domain.nodes import (
    FAILURE_STATUSES,
    IN_PROGRESS,
    RUNNING,
    NodeRecord,
    NodeSnapshot,
    Verdict,
)
from deephealth.domain.results import NodeResults

# HyperPod waits up to 10 minutes for a running job before it skips a node; allow for our poll spacing.
SKIP_GRACE_S = 15 * 60


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    evidence: tuple[str, ...]
    recheck: bool = True  # False: a re-check cannot settle it (an inconclusive verdict is final at once)


@dataclass(frozen=True)
class Look:
    """What one observation knows about a node's check besides its listing."""

    now: float
    # The result lines bearing on the node, read in this look; None when they were not read (not settled yet).
    results: NodeResults | None
    # Whether an on-demand check operation is in progress on the cluster (None: not asked in this look).
    check_active: bool | None
    check_timeout_s: float
    log_settle_s: float


def left_check(record: NodeRecord, snapshot: NodeSnapshot, check_active: bool | None) -> bool:
    """The node is done with the check it was seen in: out of `DeepHealthCheckInProgress`, or still showing it
    after HyperPod's check operation ended (isolated after a failure: a reading the docs allow)."""
    if not (record.seen_in_progress or record.observe_only):
        return False
    if snapshot.status != IN_PROGRESS:
        return True
    return check_active is False and not record.observe_only  # on-start checks are not operations


def judge_check(record: NodeRecord, snapshot: NodeSnapshot | None, look: Look) -> Judgement | None:
    """Verdict for a node in `checking`, or None while the evidence is not conclusive yet."""
    if snapshot is None:
        return Judgement(Verdict.GONE, ("node no longer listed by ListClusterNodes",))
    if record.instance_id and snapshot.instance_id and snapshot.instance_id != record.instance_id:
        return Judgement(
            Verdict.REPLACED_BY_HYPERPOD,
            (
                f"instance id changed from {record.instance_id} to {snapshot.instance_id} "
                f"under logical id {record.logical_id}",
            ),
        )
    if record.check_started_at is None and not record.observe_only:
        return None  # claimed, but no check of ours started yet: nothing the node shows is about a check
    results = look.results
    if results is not None and results.error:
        return Judgement(Verdict.FAILED, (f"result log: {results.error[:300]}",))
    status = snapshot.status
    if status in FAILURE_STATUSES:
        return Judgement(Verdict.FAILED, (f"status {status} after the check started",))
    if status == "Pending" and record.seen_in_progress:
        return Judgement(Verdict.FAILED, ("status Pending after the check: HyperPod is rebooting the node",))
    elapsed = look.now - (record.check_started_at or look.now)
    if record.check_left_at is None:
        return _in_check(record, status, elapsed, look)
    if look.now - record.check_left_at < look.log_settle_s or results is None:
        return None  # its result line may still be on its way
    return _after_check(record, status, results)


def _in_check(record: NodeRecord, status: str, elapsed: float, look: Look) -> Judgement | None:
    if elapsed > look.check_timeout_s:
        return Judgement(Verdict.INCONCLUSIVE, (f"status {status} {int(elapsed)} s after the check started (timeout)",))
    if status == RUNNING and not record.seen_in_progress and elapsed >= SKIP_GRACE_S and look.check_active is False:
        return Judgement(
            Verdict.SKIPPED,
            (f"never seen in {IN_PROGRESS}, and HyperPod's check operation has ended: skipped (busy)",),
        )
    return None  # in the check, not started yet (HyperPod may start slowly), or moving (Detach/Attach...)


def _after_check(record: NodeRecord, status: str, results: NodeResults) -> Judgement | None:
    if results.unattributed_errors:
        # Even with a pass line naming it: the anonymous error may be another of its checks failing.
        return Judgement(
            Verdict.INCONCLUSIVE,
            (f"{results.unattributed_errors} error line(s) in the result logs name no instance: cannot tell whose",),
            recheck=False,
        )
    if results.passed and status == RUNNING:
        if record.seen_in_progress or record.observe_only:
            return Judgement(Verdict.PASSED, (f"{IN_PROGRESS} -> Running; its result line says passed",))
        # A pass line, but no look saw this check run on it (another check's line?): not evidence enough.
        return Judgement(
            Verdict.SKIPPED,
            (f"a result line says passed, but it was never seen in {IN_PROGRESS}: checked again",),
        )
    if status == IN_PROGRESS:
        return Judgement(
            Verdict.INCONCLUSIVE,
            (f"still {IN_PROGRESS} after HyperPod's check operation ended; no result line names it",),
            recheck=False,
        )
    if status != RUNNING:
        return None  # being moved or re-provisioned: its listing will say more
    if record.observe_only:
        # HyperPod isolates or replaces a node that fails its on-start checks: Running after them is its pass.
        return Judgement(Verdict.PASSED, ("Running after HyperPod's on-start checks; no error line names it",))
    if results.unattributed_passes:
        return Judgement(
            Verdict.INCONCLUSIVE,
            ("result lines exist but none names this instance: cannot tell whether it passed",),
            recheck=False,
        )
    return Judgement(
        Verdict.SKIPPED,
        (f"{IN_PROGRESS} -> Running with no result line: skipped (queued behind a job) or its check superseded",),
    )
