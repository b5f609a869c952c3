"""Reconcile's look at a resting cluster: a probe for what is new, and a whole listing only now and then.

A cluster where every node rests (a final state, no passed node whose lines are still read) changes only when
HyperPod changes it. A new node is created after the last whole listing, so one ListClusterNodes page with
`CreationTimeAfter` finds it (an idle 10,000-node cluster: one page each pass, not 100); anything else HyperPod does
to a resting node comes with an event (Intake looks at the whole cluster for it) or, if the event is lost, is found by
the whole listing every WHOLE_SWEEP_S. What the probe lists that the records do not already say (a node with no
record, a new instance, another status) makes the pass a whole look, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.late_evidence import revisiting, scanned
from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES, NodeRecord, NodeSnapshot

WHOLE_SWEEP_S = 3600  # a resting cluster is listed whole at least this often (a lost event costs at most this)
# The probe reaches this far before the last whole listing: a node created just before it may not have been listed
# yet (ListClusterNodes is eventually consistent).
PROBE_MARGIN_S = 600
# While a round is live, arrivals are looked for (usecases/record_arrivals) at most once per cluster this often (a
# burst of 500 readiness events is one listing, not 500)...
ARRIVALS_LOOK_GAP_S = 300
# ...and by Reconcile this long after the last look when no readiness event came since: it only stands in for a
# lost event.
LOST_EVENT_GAP_S = 900


def arrivals_look_gap(noted_at: float | None, looked_at: float | None) -> float:
    """How long after the last look for arrivals Reconcile takes one: ARRIVALS_LOOK_GAP_S when a readiness event
    came since (one that found the last look too recent to take its own: `noted_at`), else LOST_EVENT_GAP_S."""
    announced = noted_at is not None and (looked_at is None or noted_at >= looked_at)
    return ARRIVALS_LOOK_GAP_S if announced else LOST_EVENT_GAP_S


def resting(records: Iterable[NodeRecord], groups: Mapping[str, GroupContext], now: float) -> bool:
    """Whether no record waits on a look: each is in a final state, and no passed node's lines are still read
    (its revisit, or its day-long failure scan, runs in whole looks)."""
    for r in records:
        if r.state not in FINAL_STATES or scanned(r, now):
            return False
        group = groups.get(r.group)
        if group is not None and revisiting(r, group, now):
            return False
    return True


def probe_after(recorded_at: float | None, now: float) -> float | None:
    """Where the probe's `CreationTimeAfter` starts; None when a whole listing is due instead."""
    if recorded_at is None or now - recorded_at >= WHOLE_SWEEP_S:
        return None
    return recorded_at - PROBE_MARGIN_S


def news(listed: Iterable[NodeSnapshot], records: Mapping[str, NodeRecord]) -> list[str]:
    """The keys of listed nodes the records do not already describe: no record, another instance, another
    status."""
    out = []
    for s in listed:
        r = records.get(s.key)
        if r is None or r.instance_id != s.instance_id or r.status != s.status:
            out.append(s.key)
    return out
