"""The decision table: from evidence about one checked node to a verdict.

HyperPod's API has no pass/fail field, so the verdict is inferred from what can be observed:
- the node's status over time (`DeepHealthCheckInProgress` -> `Running` is a pass),
- its instance id changing under the same `NodeLogicalId` (HyperPod replaced it; `ShuttingDown` before that is
  a replacement in flight, so the verdict waits for it),
- an error line for the instance in the `DeepHealthCheckResults/*` log streams,
- never being seen in progress (HyperPod skips nodes busy with a job for > 10 minutes).
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

# HyperPod waits up to 10 minutes for a running job before it skips a node; allow for our poll spacing.
SKIP_GRACE_S = 15 * 60


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    evidence: tuple[str, ...]


def judge_check(
    record: NodeRecord,
    snapshot: NodeSnapshot | None,
    log_error: str | None,
    now: float,
    check_timeout_s: float,
) -> Judgement | None:
    """Verdict for a node in `checking`, or None while the evidence is not conclusive yet.

    `log_error` is the first error line logged for the node's instance since the check started (the
    caller queries the result logs before judging any node that has left `DeepHealthCheckInProgress`).
    """
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
    started = record.check_started_at or now
    elapsed = now - started
    if log_error:
        return Judgement(Verdict.FAILED, (f"result log: {log_error[:300]}",))
    status = snapshot.status
    if status in FAILURE_STATUSES:
        return Judgement(Verdict.FAILED, (f"status {status} after the check started",))
    # ShuttingDown is someone else's replacement in flight, not evidence about the check: its outcome shows
    # as a new instance id (replaced-by-hyperpod) or the node disappearing (gone), or the timeout applies.
    if status == IN_PROGRESS:
        if elapsed > check_timeout_s:
            return Judgement(Verdict.INCONCLUSIVE, (f"still {IN_PROGRESS} {int(elapsed)} s after start (timeout)",))
        return None
    if status == "Pending" and record.seen_in_progress:
        return Judgement(Verdict.FAILED, ("status Pending after the check: HyperPod is rebooting the node",))
    if status == RUNNING:
        if record.seen_in_progress:
            return Judgement(Verdict.PASSED, (f"{IN_PROGRESS} -> Running with no error in the result log",))
        if record.observe_only:
            # HyperPod only lets a node of an on-start group reach Running after its checks pass.
            return Judgement(Verdict.PASSED, ("Running after HyperPod's on-start checks, no error in the result log",))
        if elapsed >= SKIP_GRACE_S:
            return Judgement(
                Verdict.SKIPPED,
                (f"never seen in {IN_PROGRESS} within {SKIP_GRACE_S} s: HyperPod skipped the node (busy)",),
            )
        return None
    if elapsed > check_timeout_s:
        return Judgement(Verdict.INCONCLUSIVE, (f"status {status} at check timeout",))
    return None
