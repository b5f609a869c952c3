"""The decision table: from what a look knows about one checked node to a verdict.

HyperPod's API has no pass/fail field, so the verdict is inferred, and only positive evidence passes a node. The
evidence half (`hyperpod_dhc.deephealth.evidence.judge.prove`: the node's own records in its window) says passed,
failed, unrecognised, anonymous failure, incomplete or silent; this table adds HyperPod's statuses and the clock: -
**passed**: its own records prove every test its check ran, read once they had the settle time to arrive after it left
its check, it seen in `DeepHealthCheckInProgress` and `Running` again; or, for HyperPod's own on-start checks, `Running`
after `DeepHealthCheckInProgress` (HyperPod isolates or replaces a node that fails them) with nothing of its own that is
not a pass; or, only where a group's policy says so (`pass_on_silence`), seen in the check, `Running` again, HyperPod's
check operation over and nothing of its own for `revisit_s`. - **failed**: a failure of its own; `Failure` or a status
the API does not document; HyperPod rebooting the node after the check; still `DeepHealthCheckInProgress` past its
timeout while HyperPod's operation stays open, or after the operation ended (HyperPod isolated it: the ladder's reboot
or replacement ends the operation). - **replaced by HyperPod**: its instance id changed under the same `NodeLogicalId`.
- **re-checked**: `skipped` when nothing of its own was written (busy with a job, superseded) or it was never in the
check while HyperPod's operation ran to its end; `inconclusive` (re-checked) when its own records prove some tests but
not all `revisit_s` after its check; once, when a failure on a stream that is no node's fell inside its window (a second
one no longer keeps it from passing: faulty hardware fails again on its own stream). - **inconclusive for an operator**
(no re-check): a record of its own that no rule places. A passed node's window is read again for `revisit_s`
(`judge_late`), and its failures by a server-filtered scan for a day: a failure that would have kept it from passing
reverses the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperpod_dhc.deephealth.domain.nodes import IN_PROGRESS, RUNNING, NodeRecord, NodeSnapshot, Verdict, failure_like
from hyperpod_dhc.deephealth.domain.rounds import SKIP_GRACE_S, settled
from hyperpod_dhc.deephealth.evidence.attribute import NodeEvidence
from hyperpod_dhc.deephealth.evidence.classify import Finding
from hyperpod_dhc.deephealth.evidence.judge import Proof, Requirements, prove
from hyperpod_dhc.deephealth.evidence.rules import ALL_TESTS, Hint

ANONYMOUS_RECHECKS = 1  # re-checks a failure on a stream that is no node's may cost a node


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    evidence: tuple[str, ...]
    recheck: bool = True  # False: a re-check cannot settle it (an inconclusive verdict is final at once)
    hint: Hint | None = None  # the recovery a failure asks for (a DCGM summary's replacementRequired...)
    anonymous: bool = False  # a re-check an anonymous failure costs (not counted against max_inconclusive)


@dataclass(frozen=True)
class Look:
    """What one observation knows about a node's check besides its listing."""

    now: float
    # The node's evidence, read in this look; None when its records were not read (not settled yet).
    evidence: NodeEvidence | None
    # Whether an on-demand check operation is in progress on the cluster (None: not asked in this look).
    check_active: bool | None
    check_timeout_s: float
    log_settle_s: float
    requirements: Requirements = field(default_factory=lambda: Requirements(ALL_TESTS))  # what its check must prove
    # A node with nothing of its own passes this long after its check (policy `pass_on_silence`); None: never.
    silent_pass_after_s: float | None = None
    # How long records that are still missing are waited for before the node is checked again (`revisit_s`).
    revisit_s: float = 3600.0


def left_check(record: NodeRecord, snapshot: NodeSnapshot, check_active: bool | None) -> bool:
    """The node is done with the check it was seen in: out of `DeepHealthCheckInProgress`, or still showing it
    after HyperPod's check operation ended (isolated after a failure: a reading the docs allow)."""
    if not (record.seen_in_progress or record.observe_only):
        return False
    if snapshot.status != IN_PROGRESS:
        return True
    return check_active is False and not record.observe_only  # on-start checks are not operations


def quoted(findings: tuple[Finding, ...], prefix: str = "result log: ") -> tuple[str, ...]:
    return tuple(f"{prefix}{f.quoted()}" for f in findings)


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
    evidence = look.evidence
    if evidence is not None and evidence.failures:
        proof = prove(evidence, look.requirements)
        return Judgement(Verdict.FAILED, quoted(proof.deciding), hint=proof.hint)
    if evidence is not None and evidence.unplaced:
        return None  # a failure on a stream this look cannot place: the next look at the whole cluster can
    status = snapshot.status
    if failure_like(status):
        known = "" if status == "Failure" else " (not a status the API documents: handled like Failure)"
        return Judgement(Verdict.FAILED, (f"status {status} after the check started{known}",))
    if status == "Pending" and record.seen_in_progress:
        return Judgement(Verdict.FAILED, ("status Pending after the check: HyperPod is rebooting the node",))
    elapsed = look.now - (record.check_started_at or look.now)
    if record.check_left_at is None:
        return _in_check(record, status, elapsed, look)
    if not settled(record, look.log_settle_s, look.now) or evidence is None:
        return None  # its records may still be on their way
    return _after_check(record, status, evidence, look)


def _in_check(record: NodeRecord, status: str, elapsed: float, look: Look) -> Judgement | None:
    if elapsed > look.check_timeout_s:
        if status == IN_PROGRESS and record.seen_in_progress and (look.check_active or record.observe_only):
            # HyperPod isolates a node that failed and may keep its operation open until someone reboots or
            # replaces it: waiting longer wedges every later check of the cluster.
            held = "its on-start check" if record.observe_only else "HyperPod's check operation still open"
            return Judgement(
                Verdict.FAILED,
                (f"still {IN_PROGRESS} {int(elapsed)} s after the check started, {held}: isolated, failed by status",),
            )
        if status == IN_PROGRESS and look.check_active is None:
            return None  # whether HyperPod's operation still runs decides; the next look that asks says
        return Judgement(Verdict.INCONCLUSIVE, (f"status {status} {int(elapsed)} s after the check started (timeout)",))
    if status == RUNNING and not record.seen_in_progress and elapsed >= SKIP_GRACE_S and look.check_active is False:
        return Judgement(
            Verdict.SKIPPED,
            (f"never seen in {IN_PROGRESS}, and HyperPod's check operation has ended: skipped (busy)",),
        )
    return None  # in the check, not started yet (HyperPod may start slowly), or moving (Detach/Attach...)


def _after_check(record: NodeRecord, status: str, evidence: NodeEvidence, look: Look) -> Judgement | None:
    proof = prove(evidence, look.requirements)
    if proof.outcome == "unrecognised":
        return Judgement(Verdict.INCONCLUSIVE, _unrecognised(proof), recheck=False)
    if status == IN_PROGRESS and not record.observe_only:
        return Judgement(
            Verdict.FAILED,
            (f"still {IN_PROGRESS} after HyperPod's check operation ended: isolated, failed by status",),
        )
    if status == IN_PROGRESS:
        return Judgement(
            Verdict.INCONCLUSIVE, (f"in {IN_PROGRESS} again after its on-start check ended",), recheck=False
        )
    if status != RUNNING:
        # Being moved or re-provisioned: its listing will say more, within the time a check may take.
        if record.check_left_at is not None and look.now - record.check_left_at > look.check_timeout_s:
            return Judgement(
                Verdict.INCONCLUSIVE,
                (f"status {status} {int(look.now - record.check_left_at)} s after it left its check",),
                recheck=False,
            )
        return None
    if proof.outcome in ("passed", "anonymous-failure"):
        if not (record.seen_in_progress or record.observe_only):
            # Pass records, but no look saw this check run on it (another check's records?): not evidence enough.
            return Judgement(
                Verdict.SKIPPED, (f"its records say passed, but it was never seen in {IN_PROGRESS}: checked again",)
            )
        return _pass(record, evidence, f"{IN_PROGRESS} -> Running; {proof.why}")
    if record.observe_only and record.seen_in_progress:
        # HyperPod isolates or replaces a node that fails its on-start checks: Running after them is its pass (a node
        # first seen already Running may never have had them: it needs records, or a check of ours).
        return _pass(record, evidence, "Running after HyperPod's on-start checks; nothing of its own is not a pass")
    if proof.outcome == "incomplete":
        if record.check_left_at is not None and look.now - record.check_left_at < look.revisit_s:
            return None  # the other tests' records are late (later than the settle time): wait rather than re-check
        return Judgement(Verdict.INCONCLUSIVE, (proof.why,))
    return _silent(record, evidence, look)


def _pass(record: NodeRecord, evidence: NodeEvidence, why: str) -> Judgement:
    """A pass, unless a failure on a stream that is no node's fell in its window and has not cost its re-check yet."""
    anonymous = evidence.anonymous_failures
    if not anonymous:
        return Judgement(Verdict.PASSED, (why,))
    if record.anonymous_rechecks < ANONYMOUS_RECHECKS:
        stream = anonymous[0].record.stream
        return Judgement(
            Verdict.SKIPPED,
            (f"a failure in its window on a stream that is no node's ({stream}): checked again once",
             *quoted(anonymous[:1])),
            anonymous=True,
        )  # fmt: skip
    note = f"a failure on a stream that is no node's ({anonymous[0].record.stream}) ignored after its re-check"
    return Judgement(Verdict.PASSED, (why, note))


def _unrecognised(proof: Proof) -> tuple[str, ...]:
    return tuple(f"a record of its own that no rule places: {f.quoted()}" for f in proof.deciding)


def _silent(record: NodeRecord, evidence: NodeEvidence, look: Look) -> Judgement | None:
    """Nothing of its own about the node, which is back to Running after the check."""
    wait = look.silent_pass_after_s
    if wait is None:
        return Judgement(
            Verdict.SKIPPED,
            (f"{IN_PROGRESS} -> Running with no result record: skipped (queued behind a job) or its check superseded",),
        )
    if not record.seen_in_progress:
        return Judgement(Verdict.SKIPPED, (f"no result record, and never seen in {IN_PROGRESS}: checked again",))
    if record.check_left_at is None or look.now - record.check_left_at < wait or look.check_active is not False:
        return None  # no record yet: silence proves something only once it has lasted, and the operation is over
    return _pass(
        record,
        evidence,
        f"seen in {IN_PROGRESS}, Running again, HyperPod's check operation over, and no result record about it "
        f"for {int(wait)} s (pass_on_silence)",
    )


def judge_late(record: NodeRecord, evidence: NodeEvidence) -> Judgement | None:
    """A passed node's window read again: the verdict its records would have given had the late ones been on time,
    when that is not a pass; None while they still say it passed."""
    if evidence.unplaced:
        return None  # the next look at the whole cluster places the record
    if evidence.failures:
        lines = "; ".join(f.quoted() for f in evidence.failures[:3])
        hint = prove(evidence, Requirements(frozenset())).hint
        return Judgement(Verdict.FAILED, (f"verdict reversed: a failure arrived after the pass: {lines}",), hint=hint)
    if evidence.unrecognised:
        return Judgement(
            Verdict.INCONCLUSIVE,
            ("verdict reversed: a record arrived after the pass", *(f.quoted() for f in evidence.unrecognised[:3])),
            recheck=False,
        )
    if evidence.anonymous_failures and record.anonymous_rechecks < ANONYMOUS_RECHECKS:
        first = evidence.anonymous_failures[0]
        return Judgement(
            Verdict.SKIPPED,
            (f"verdict reversed: a failure on a stream that is no node's ({first.record.stream}) fell in its window: "
             f"checked again once", first.quoted()),
            anonymous=True,
        )  # fmt: skip
    return None
