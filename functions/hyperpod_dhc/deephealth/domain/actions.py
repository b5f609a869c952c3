"""What a reboot or replacement request did to the node's record: started (intent before the call), refused by
HyperPod for this node or failed as a whole (taken back, then `recovery.give_up_or_retry`), or its answer lost
(counted, never re-sent: the node's next status decides, in `recovery.observe_recovering`)."""

from __future__ import annotations

from hyperpod_dhc.deephealth.domain.nodes import (
    Action,
    ActionEntry,
    Decision,
    NodeRecord,
    NodeState,
    transition,
    with_action,
)
from hyperpod_dhc.deephealth.domain.recovery import give_up_or_retry


def action_started(record: NodeRecord, action: Action, now: float, trigger: str | None) -> tuple[NodeRecord, Decision]:
    return transition(
        record,
        now,
        NodeState.RECOVERING,
        f"{action.value} requested",
        trigger,
        action=action,
        action_at=now,
        attempts=record.attempts + 1,
        actions=with_action(record.actions, now, action, "controller", record.instance_id),
        seen_down=False,
        not_before=None,
        held_by=None,
    )


def action_refused(
    record: NodeRecord, action: Action, code: str, message: str, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision]:
    """HyperPod refused the action for this node (per-node `Failed` entry), or the call itself failed.

    The refused action did not happen, so it is taken back from the attempts and the budget trail.
    """
    undone: dict[str, object] = {
        "attempts": max(0, record.attempts - 1),
        "actions": _without_last(record.actions, action),
    }
    if code == "InstanceIdNotFound":
        return transition(record, now, NodeState.GONE, f"{action.value} refused: {code}", trigger, **undone)
    return give_up_or_retry(
        record,
        now,
        trigger,
        f"{action.value} refused",
        cause=f" ({code})",
        detail=f" ({code}: {message[:200]})",
        backoff=True,
        retry=action,
        **undone,
    )


def action_unconfirmed(
    record: NodeRecord, action: Action, message: str, now: float, trigger: str | None
) -> tuple[NodeRecord, Decision]:
    """The request's answer was lost (5xx, timeout): HyperPod may have carried it out. It stays counted (attempts,
    budget) and is not sent again; the node stays `recovering`, so what it does next decides: down and back,
    a new instance, or no effect for ACTION_TIMEOUT_S and then a bounded retry."""
    return transition(
        record,
        now,
        NodeState.RECOVERING,
        f"{action.value} answer lost ({message[:200]}): counted as requested; the node's next status decides",
        trigger,
    )


def _without_last(actions: list[ActionEntry], action: Action) -> list[ActionEntry]:
    """The trail without its last controller entry for `action` (the one a refusal takes back)."""
    for i in range(len(actions) - 1, -1, -1):
        if actions[i].actor == "controller" and actions[i].action == action:
            return actions[:i] + actions[i + 1 :]
    return actions
