"""A deep health check HyperPod refused for the request itself, not because another check was active (an instance
type it will not check, ...): the refused group's members leave the round."""

from __future__ import annotations

from deephealth.domain.nodes import (
    Decision,
    NodeRecord,
    NodeState,
    Verdict,
    transition,
    with_outcome,
)


def check_refused(
    record: NodeRecord, code: str, message: str, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision]:
    """A member whose group's check request HyperPod refused on its own: `inconclusive` at once, with HyperPod's
    message as the evidence. A re-check would be refused again, so the `max_inconclusive` ladder is skipped;
    entering `inconclusive` alerts an operator (`domain.notices`)."""
    return transition(
        record,
        now,
        NodeState.INCONCLUSIVE,
        f"HyperPod refused the check of group {record.group}: needs an operator (a re-check would be refused too)",
        trigger,
        verdict=Verdict.INCONCLUSIVE,
        verdict_at=now,
        verdict_instance_id=record.instance_id,
        evidence=[f"StartClusterHealthCheck refused: {code}: {message}"[:500]],
        outcomes=with_outcome(record.outcomes, now, Verdict.INCONCLUSIVE, record.instance_id),
        inconclusive_count=record.inconclusive_count + 1,
        round_id=None,
        observe_only=False,
        requested_checks=None,
        seen_in_progress=False,
        check_started_at=None,
    )
