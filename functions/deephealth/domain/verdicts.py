"""The decision table: from evidence about one checked node to a verdict.

HyperPod's API has no pass/fail field, so the verdict is inferred, and only positive evidence passes a node:
- for every test its check ran (`result_lines.required_tests`), a recognised pass line of its own (or a summary
  line that covers them; an NCCL summary naming no node proves the multi-node test of a node with lines of its own
  in its window, when it tested a node set as large as the node's),
  read once the lines have had `log_settle_s` to arrive after it left its check, it seen in
  `DeepHealthCheckInProgress` and `Running` again, and no line about it that is not a pass;
- or, for HyperPod's own on-start checks, `Running` after `DeepHealthCheckInProgress` (HyperPod isolates or
  replaces a node that fails them) with no line about it that is not a pass;
- or, only where a group's policy says so (`pass_on_silence`, for clusters that log no pass line): seen in the
  check, `Running` again, HyperPod's check operation over, and no line at all about it for `revisit_s`.
Failure evidence: a failure line of its own, `Failure` or a status the API does not document, HyperPod rebooting
the node after the check, or its instance id changing under the same `NodeLogicalId` (HyperPod replaced it).
Everything else is not a pass:
- `skipped` (re-checked): no line at all (busy with a job, or superseded), or never in the check while
  HyperPod's check operation ran to its end;
- `inconclusive` and re-checked: its lines prove some tests passed but not all, `revisit_s` after its check (until
  then the missing lines are waited for: they may only be late);
- `inconclusive` for an operator (no re-check): a line about it that no pattern recognises, a failure or an
  unrecognised line that names no node, pass lines that name no node, or still in `DeepHealthCheckInProgress`
  after the operation ended.
A passed node's window is read again for `revisit_s` (`judge_late`): a late line that would have kept it from
passing reverses the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from deephealth.domain.nodes import IN_PROGRESS, RUNNING, NodeRecord, NodeSnapshot, Verdict, failure_like
from deephealth.domain.result_lines import Hint, ResultLine, Test
from deephealth.domain.results import NodeEvidence
from deephealth.domain.rounds import SKIP_GRACE_S, settled

QUOTE = 300  # characters of a line quoted in a node's evidence
# A node's check window ends this long after the first look that found it out of the check: a node's clock may run
# ahead, and a line may be stamped when HyperPod closes the check after the node's status changed.
LINE_SKEW_S = 300


def window_end(record: NodeRecord) -> float | None:
    """The end of the node's check window (None: it is still in its check, so it has none yet)."""
    return None if record.check_left_at is None else record.check_left_at + LINE_SKEW_S


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    evidence: tuple[str, ...]
    recheck: bool = True  # False: a re-check cannot settle it (an inconclusive verdict is final at once)
    hint: Hint | None = None  # the recovery a failure line asks for (a DCGM summary's replacementRequired...)


@dataclass(frozen=True)
class Look:
    """What one observation knows about a node's check besides its listing."""

    now: float
    # The result lines bearing on the node, read in this look; None when they were not read (not settled yet).
    evidence: NodeEvidence | None
    # Whether an on-demand check operation is in progress on the cluster (None: not asked in this look).
    check_active: bool | None
    check_timeout_s: float
    log_settle_s: float
    required: frozenset[Test] = frozenset(Test)  # the tests the node's check ran
    # A node no line names passes this long after its check (policy `pass_on_silence`); None: it never does.
    silent_pass_after_s: float | None = None
    # How long lines that are still missing are waited for before the node is checked again (`revisit_s`).
    revisit_s: float = 3600.0
    # The node set its multi-node test ran on (its request's configuration); None: not known, so an anonymous
    # NCCL summary cannot be tied to it.
    nccl_set: int | None = None


def left_check(record: NodeRecord, snapshot: NodeSnapshot, check_active: bool | None) -> bool:
    """The node is done with the check it was seen in: out of `DeepHealthCheckInProgress`, or still showing it
    after HyperPod's check operation ended (isolated after a failure: a reading the docs allow)."""
    if not (record.seen_in_progress or record.observe_only):
        return False
    if snapshot.status != IN_PROGRESS:
        return True
    return check_active is False and not record.observe_only  # on-start checks are not operations


def quoted(line: ResultLine) -> str:
    return f"[{line.level or 'no level'}] {line.text[:QUOTE]}"


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
        return Judgement(
            Verdict.FAILED,
            tuple(f"result log: {quoted(line)}" for line in evidence.failures[:3]),
            hint=evidence.hint,
        )
    if evidence is not None and evidence.unresolved:
        return None  # a line names someone this look cannot place: the next look at the whole cluster can
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
        return None  # its result lines may still be on their way
    return _after_check(record, status, evidence, look)


def _in_check(record: NodeRecord, status: str, elapsed: float, look: Look) -> Judgement | None:
    if elapsed > look.check_timeout_s:
        return Judgement(Verdict.INCONCLUSIVE, (f"status {status} {int(elapsed)} s after the check started (timeout)",))
    if status == RUNNING and not record.seen_in_progress and elapsed >= SKIP_GRACE_S and look.check_active is False:
        return Judgement(
            Verdict.SKIPPED,
            (f"never seen in {IN_PROGRESS}, and HyperPod's check operation has ended: skipped (busy)",),
        )
    return None  # in the check, not started yet (HyperPod may start slowly), or moving (Detach/Attach...)


def _not_a_pass(evidence: NodeEvidence) -> Judgement | None:
    """Lines that bear on the node and keep it from passing without failing it: an operator decides."""
    if evidence.unrecognised:
        return Judgement(
            Verdict.INCONCLUSIVE,
            tuple(f"a result line about it that no pass or failure pattern recognises: {quoted(line)}"
                  for line in evidence.unrecognised[:3]),
            recheck=False,
        )  # fmt: skip
    anonymous = evidence.anonymous_failures + evidence.anonymous_unrecognised
    if anonymous:
        # Even with pass lines of its own: the anonymous line may be another of its tests failing.
        return Judgement(
            Verdict.INCONCLUSIVE,
            (
                f"{len(anonymous)} result line(s) that are not a pass name no node (or one no record knows): "
                f"cannot tell whose; e.g. {quoted(anonymous[0])}",
            ),
            recheck=False,
        )
    return None


def _after_check(record: NodeRecord, status: str, evidence: NodeEvidence, look: Look) -> Judgement | None:
    if (blocked := _not_a_pass(evidence)) is not None:
        return blocked
    missing = look.required - evidence.proven - _anonymous_nccl(evidence, look)
    if not missing and status == RUNNING:
        if record.seen_in_progress or record.observe_only:
            proven = ", ".join(sorted(look.required))
            return Judgement(Verdict.PASSED, (f"{IN_PROGRESS} -> Running; result lines say {proven} passed",))
        # Pass lines, but no look saw this check run on it (another check's lines?): not evidence enough.
        return Judgement(
            Verdict.SKIPPED,
            (f"result lines say passed, but it was never seen in {IN_PROGRESS}: checked again",),
        )
    if status == IN_PROGRESS:
        return Judgement(
            Verdict.INCONCLUSIVE,
            (f"still {IN_PROGRESS} after HyperPod's check operation ended; no failure line names it",),
            recheck=False,
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
    if record.observe_only and record.seen_in_progress:
        # HyperPod isolates or replaces a node that fails its on-start checks: Running after them is its pass (a node
        # first seen already Running may never have had them: it needs lines, or a check of ours).
        return Judgement(Verdict.PASSED, ("Running after HyperPod's on-start checks; no line about it is not a pass",))
    if evidence.own_lines:
        if record.check_left_at is not None and look.now - record.check_left_at < look.revisit_s:
            return None  # the other tests' lines are late (later than the settle time): wait rather than re-check
        proven = ", ".join(sorted(evidence.proven)) or "nothing"
        return Judgement(
            Verdict.INCONCLUSIVE,
            (f"its result lines prove {proven}, but none says {', '.join(sorted(missing))} passed",),
        )
    if evidence.anonymous_passes:
        return Judgement(
            Verdict.INCONCLUSIVE,
            ("result lines exist but none names this instance: cannot tell whether it passed",),
            recheck=False,
        )
    return _silent(record, look)


def _anonymous_nccl(evidence: NodeEvidence, look: Look) -> frozenset[Test]:
    """An NCCL summary naming no node proves the multi-node test of a node that wrote lines of its own (it took
    part in the check) when it says it tested a node set at least as large as the node's (`NcclNodes`)."""
    tied = look.nccl_set is not None and 0 < look.nccl_set <= evidence.anonymous_nccl_nodes
    return evidence.anonymous_proven & {Test.NCCL} if tied and evidence.own_lines else frozenset()


def _silent(record: NodeRecord, look: Look) -> Judgement | None:
    """No line at all about the node, which is back to Running after the check."""
    wait = look.silent_pass_after_s
    if wait is None:
        return Judgement(
            Verdict.SKIPPED,
            (f"{IN_PROGRESS} -> Running with no result line: skipped (queued behind a job) or its check superseded",),
        )
    if not record.seen_in_progress:
        return Judgement(Verdict.SKIPPED, (f"no result line, and never seen in {IN_PROGRESS}: checked again",))
    if record.check_left_at is None or look.now - record.check_left_at < wait or look.check_active is not False:
        return None  # no line yet: silence proves something only once it has lasted, and the operation is over
    return Judgement(
        Verdict.PASSED,
        (
            f"seen in {IN_PROGRESS}, Running again, HyperPod's check operation over, and no result line about it "
            f"for {int(wait)} s (pass_on_silence)",
        ),
    )


def judge_late(evidence: NodeEvidence) -> Judgement | None:
    """A passed node's check window read again: the verdict its lines would have given had the late ones been on
    time, when that is not a pass (a failure, or an operator's call); None while they still say it passed."""
    if evidence.unresolved:
        return None  # the next look at the whole cluster places the line
    if evidence.failures:
        lines = "; ".join(quoted(line) for line in evidence.failures[:3])
        return Judgement(
            Verdict.FAILED, (f"verdict reversed: a failure line arrived after the pass: {lines}",), hint=evidence.hint
        )
    if (blocked := _not_a_pass(evidence)) is not None:
        return Judgement(Verdict.INCONCLUSIVE, ("verdict reversed: a line arrived after the pass", *blocked.evidence),
                         recheck=False)  # fmt: skip
    return None
