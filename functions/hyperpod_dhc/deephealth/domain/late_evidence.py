"""Late evidence: CloudWatch Logs accepts an event up to 14 days late, so no settle time is a bound. A passed node's
check window is read again for `revisit_s`, and its failures (stamped up to the end of its revisit) by every whole
look's server-filtered scan for a day after its pass (`SCAN_S`); a record that would have kept it from passing, had
it been on time, takes the pass back (`verdicts.judge_late`), and the node goes where that verdict leads."""

from __future__ import annotations

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import Action, Decision, NodeRecord, NodeState, Verdict
from hyperpod_dhc.deephealth.domain.policy import NodeRecovery
from hyperpod_dhc.deephealth.domain.recovery import apply_verdict
from hyperpod_dhc.deephealth.domain.result_log import ResultLog
from hyperpod_dhc.deephealth.domain.verdicts import judge_late

SCAN_S = 86400  # a passed node's failures are looked for this long after its pass


def revisiting(record: NodeRecord, ctx: GroupContext, now: float) -> bool:
    """A passed node whose check window is still read for lines that arrive late: `revisit_s` after its pass."""
    return (
        record.state == NodeState.PASSED
        and record.verdict == Verdict.PASSED
        and record.check_started_at is not None
        and record.verdict_at is not None
        and now - record.verdict_at <= ctx.revisit_s
    )


def scanned(record: NodeRecord, now: float) -> bool:
    """A passed node whose late failures the scan looks for: a day after its pass."""
    return (
        record.state == NodeState.PASSED
        and record.verdict == Verdict.PASSED
        and record.check_started_at is not None
        and record.verdict_at is not None
        and now - record.verdict_at <= SCAN_S
    )


def late_reversal(
    record: NodeRecord,
    results: ResultLog,
    ctx: GroupContext,
    node_recovery: NodeRecovery | str,
    now: float,
    trigger: str | None,
) -> tuple[NodeRecord, Decision] | None:
    """The pass taken back, when records read now (its revisit's whole read, or a scan's failures, for a day after
    its pass) would have kept the node from passing; else None. Its outcome becomes the late verdict (the lemon
    trail counts one verdict, not a flap)."""
    started = record.check_started_at
    reads = revisiting(record, ctx, now) or scanned(record, now)
    if started is None or not reads or results.since > started:
        return None
    late = judge_late(record, results.evidence(record, ctx.revisit_s))
    if late is None:
        return None
    trail = record.outcomes
    if trail and trail[-1].verdict == Verdict.PASSED:
        trail = trail[:-1]
    unpassed = record.model_copy(update={"outcomes": trail, "reversals": record.reversals + 1})
    updated, decision = apply_verdict(
        unpassed,
        late.verdict,
        late.evidence,
        ctx.policy,
        node_recovery,
        now,
        trigger,
        recheck=late.recheck,
        hint=Action(late.hint) if late.hint else None,
        anonymous=late.anonymous,
    )
    reason = f"verdict reversed (passed at {int(record.verdict_at or 0)}): {decision.reason}"
    history = [*updated.history[:-1], updated.history[-1].model_copy(update={"reason": reason})]
    return updated.model_copy(update={"history": history}), decision.model_copy(update={"reason": reason})
