"""Looking at a cluster: one HyperPod listing (and at most one result-log query and one look at HyperPod's check
operations) folded into the node records, every change saved; and closing out a cluster that is gone."""

from __future__ import annotations

import math
from collections.abc import Callable

from hyperpod_dhc.deephealth.adapters.hyperpod import ActiveCheck
from hyperpod_dhc.deephealth.domain.late_evidence import revisiting, scanned
from hyperpod_dhc.deephealth.domain.listing_windows import ListingWindow
from hyperpod_dhc.deephealth.domain.nodes import (
    IN_PROGRESS,
    RUNNING,
    Decision,
    NodeRecord,
    NodeSnapshot,
    NodeState,
    last_seen,
    round_seq_of,
)
from hyperpod_dhc.deephealth.domain.observe import Observation, checked_for, close_out, observe, seen_while_settling
from hyperpod_dhc.deephealth.domain.result_log import ResultLog, failures_from, previous_verdict_at
from hyperpod_dhc.deephealth.domain.rounds import SKIP_GRACE_S, expected_for, lines_due, watchable
from hyperpod_dhc.deephealth.domain.slurm import ADOPT_AFTER_S
from hyperpod_dhc.deephealth.evidence.attribute import SKEW_MAX_S
from hyperpod_dhc.deephealth.evidence.records import Event
from hyperpod_dhc.deephealth.evidence.rules import OperatorRules
from hyperpod_dhc.deephealth.usecases.context import ClusterView, Context
from hyperpod_dhc.deephealth.usecases.decisions import save_and_announce
from hyperpod_dhc.deephealth.usecases.readings import note_look


def observe_cluster(
    ctx: Context,
    cluster: str,
    trigger: str,
    fresh: bool = False,
    orphaned_before: int | None = None,
    ask_operations: bool = True,
    by_round: bool = False,
    view: ClusterView | None = None,
) -> ClusterView:
    """One paginated ListClusterNodes pass (+ one result-log query if a check ended) folded into records.

    `orphaned_before`: rounds before this sequence number have ended, so what they claimed and never started
    goes back in the queue (None: the caller cannot tell). `by_round`: the caller is the round holding the
    cluster's lease (`trigger` is its id), whose whole look counts as the look for arrivals. `view`: the cluster as
    the caller has just described and loaded it (else described and loaded here)."""
    view = view or ctx.view(cluster, fresh=fresh)
    snapshots = {s.key: s for s in ctx.hyperpod.list_nodes(cluster) if s.key}
    if by_round:  # a round's whole look: arrivals were looked at too (usecases/record_arrivals)
        ctx.table.note_whole_look(cluster, ctx.clock())
    changes = fold(ctx, cluster, view, snapshots, trigger, orphaned_before, ask_operations)
    reason = f"the cluster was recreated (now {view.info.cluster_id}): this node belonged to the one before"
    changes += [c for r in view.previous.values() if (c := close_out(r, reason, ctx.clock(), trigger))]
    if changes and not view.records:
        ctx.table.register_cluster(cluster)
    changes = adopted_on_first_look(ctx, cluster, snapshots, changes)
    for saved in save_and_announce(ctx, [*changes, *view.seen]):
        view.records[saved.key] = saved
    if fresh:
        # Every node of a whole listing is recorded now (a failed save raised above): the Slurm bridge may take a
        # Slurm node its document does not list for a new one. Reconcile's looks write it, on the registry item.
        ctx.table.register_cluster(cluster, recorded_at=ctx.clock())
    return view


def adopted_on_first_look(
    ctx: Context, cluster: str, snapshots: dict[str, NodeSnapshot], changes: list[tuple[NodeRecord, Decision]]
) -> list[tuple[NodeRecord, Decision]]:
    """`changes`, with new records of nodes launched long before the controller's first whole look at the cluster
    marked adopted: they were there before it watched, and may run jobs (the group's `adopt` policy says whether
    they are drained)."""
    now = ctx.clock()
    old = {k for k, s in snapshots.items() if s.launched_at is not None and now - s.launched_at > ADOPT_AFTER_S}
    if not any(r.version == 0 and r.key in old for r, _ in changes) or ctx.table.recorded_at(cluster) is not None:
        return changes
    return [(r.model_copy(update={"adopted": True}) if r.version == 0 and r.key in old else r, d) for r, d in changes]


def observe_members(
    ctx: Context,
    cluster: str,
    round_id: str,
    windows: list[ListingWindow],
    ask_operations: bool = True,
    elsewhere: bool = False,
) -> ClusterView:
    """A poll's cheap look: list only the round's launch-time windows (those of its members still in the check)
    and fold what the members listed show; judge a member out of its check whose lines have settled, if the
    windows leave it out, on the status the last look that saw it showed (`last_seen`; a look saves a settling
    node it shows otherwise: `observe.seen_while_settling`); no windows: no listing, only that
    (`rounds.members_look` "judge"). `elsewhere`: so, too, the nodes out of another check (an earlier round's,
    HyperPod's on-start check) whose lines are due (`rounds.unchanged_since`). A member in the check missing from
    the windows (replaced mid-check: a new launch time) waits for the next look at the whole cluster. The view
    holds every member and whatever else this look judged, and every record (`everyone`)."""
    view = ctx.view(cluster, load_records=False)
    listed = {s.key: s for window in windows for s in ctx.hyperpod.list_nodes(cluster, window) if s.key}
    loaded = ctx.table.load_cluster(cluster).items()  # warm: only what was saved since the last load is read
    ours, checking_state = (None, view.info.cluster_id), NodeState.CHECKING  # read once: a pass over every record
    everyone = {k: r for k, r in loaded if r.cluster_id in ours}
    checking = {k: r for k, r in everyone.items() if r.state == checking_state}
    # This round's members, and with `elsewhere` the nodes out of another check: what the windows list of them is
    # folded as listed; one out of its check they leave out, once its lines are due, on its last look.
    judged = {k: r for k, r in checking.items() if r.round_id == round_id or (elsewhere and r.check_left_at)}
    now = ctx.clock()
    settled = {k: last_seen(r) for k, r in judged.items()
               if k not in listed and r.check_left_at and lines_due_in(r, None, view, now)}  # fmt: skip
    snapshots = {k: listed[k] for k in judged if k in listed} | settled
    view.records = {k: everyone[k] for k in snapshots}
    view.everyone, view.complete = everyone, False  # only every record can tell a line of a node nobody knows
    changes = fold(ctx, cluster, view, snapshots, round_id, round_seq_of(round_id), ask_operations)
    for saved in save_and_announce(ctx, [*changes, *view.seen]):
        everyone[saved.key] = saved
    # Every member, and whatever else this look judged (a node another round left, now due for recovery).
    keys = {k for k, r in checking.items() if r.round_id == round_id} | set(snapshots)
    view.records, view.snapshots = {k: everyone[k] for k in keys}, listed
    return view


def watch_on_start_checks(ctx: Context, view: ClusterView, round_id: str, round_seq: int) -> list[NodeRecord]:
    """Take the nodes in HyperPod's on-start check that no live round watches as this round's members
    (`rounds.watchable`): its polls judge them. No check is asked for them."""
    taken = save_and_announce(
        ctx,
        [
            r.model_copy(update={"round_id": round_id, "updated_at": ctx.clock()})
            for r in watchable(view.records.values(), round_seq)
        ],
        audit=False,
    )
    for r in taken:
        view.records[r.key] = r
    return taken


def fold(
    ctx: Context,
    cluster: str,
    view: ClusterView,
    snapshots: dict[str, NodeSnapshot],
    trigger: str,
    orphaned_before: int | None = None,
    ask_operations: bool = True,
) -> list[tuple[NodeRecord, Decision]]:
    """Observe every node in `snapshots` or `view.records`. The result log is read at most once (`_read`); HyperPod's
    check operations are asked about once, when a verdict hangs on them (and `ask_operations`: a round's polls ask
    at most every OPERATIONS_LOOK_S)."""
    view.snapshots = snapshots
    now = ctx.clock()
    checking = [r for r in view.records.values() if r.state == NodeState.CHECKING and r.check_started_at]
    results = _read(ctx, view, snapshots, checking, now)
    active: ActiveCheck | None = None
    asked = ask_operations and any(_ask_operation(r, snapshots.get(r.key), view, now) for r in checking)
    view.operations_asked = asked
    if asked:
        active = ctx.hyperpod.active_check(cluster)
    obs = Observation(
        now=now,
        node_recovery=view.info.node_recovery,
        trigger=trigger,
        results=results,
        check_active=(active is not None) if asked else None,
        groups=view.groups,
        orphaned_before=orphaned_before,
        cluster_id=view.info.cluster_id,
    )
    changes = [
        c
        for key in sorted(set(snapshots) | set(view.records))
        if (c := observe(cluster, view.records.get(key), snapshots.get(key), obs))
    ]
    note_look(ctx, view, results, changes, active if asked else None, now)
    decided = {r.key for r, _ in changes}
    view.seen = [seen for key, s in snapshots.items()
                 if key not in decided and (seen := seen_while_settling(view.records.get(key), s, now))]  # fmt: skip
    return changes


def _read(
    ctx: Context, view: ClusterView, snapshots: dict[str, NodeSnapshot], checking: list[NodeRecord], now: float
) -> ResultLog | None:
    """The cluster's result log as one look needs it, or None when nothing is due. Every event since the earliest
    window still open (a checking node's, or a passed node's still revisited), when a node's records are due or a
    node is revisited; and, before that, only the failure family (a server-filtered scan: a prefilter, its hits
    judged like everything else) back to the earliest failure edge: a checking node's earlier checks (when it had
    one) since its last pass or recovery, and, in a look at the whole cluster, every node passed in the last day
    (SCAN_S), whose pass a failure delivered after its revisit still takes back."""
    everyone = view.names()
    if everyone is None:
        return None  # only every record can tell a stream of a node it does not know from one that is no node's
    # Passed nodes are revisited and scanned by looks at the whole cluster (a poll folds only its members).
    whole = list(view.records.values()) if view.complete else []
    revisited = [r for r in whole if (g := view.groups.get(r.group)) and revisiting(r, g, now)]
    due = any(lines_due_in(r, snapshots.get(r.key), view, now) for r in checking)
    open_windows = [r for r in everyone.values() if r.state == NodeState.CHECKING and r.check_started_at]
    late = [r for r in whole if scanned(r, now)]
    if not (due or revisited or late):
        return None
    full_from = min(((r.check_started_at or now) - SKEW_MAX_S for r in (*open_windows, *revisited)), default=None)
    rechecked = [r for r in open_windows if previous_verdict_at(r) is not None] if due else []
    edges = [_failures_edge(r, now) for r in (*rechecked, *late)]
    scan_from = min(edges, default=None)
    events: tuple[Event, ...] = ()
    if full_from is not None and (due or revisited):
        events = ctx.logs.events_since(view.info.log_group, full_from)
    else:
        full_from = None
    if scan_from is not None and (full_from is None or scan_from < full_from):
        seen = {_identity(e) for e in events}
        hits = ctx.logs.failure_events(view.info.log_group, scan_from)
        events = (*events, *(e for e in hits if _identity(e) not in seen))
    else:
        scan_from = None
    since = min(t for t in (full_from, scan_from) if t is not None)
    filtered_before = math.inf if full_from is None else full_from
    return ResultLog.of(events, everyone.values(), snapshots.values(), _rules(view), since=since, read_at=now,
                        complete=view.complete, failures_before=filtered_before)  # fmt: skip


def _failures_edge(record: NodeRecord, now: float) -> float:
    """Where a node's failures may be stamped: from its check's start or its failures' edge (an earlier check of the
    instance that did not pass), whichever is earlier, less the most skew allowed."""
    started = record.check_started_at or now
    return min(started, failures_from(record) or started) - SKEW_MAX_S


def _identity(event: Event) -> tuple[str, int, str] | str:
    return event.event_id or (event.stream, event.timestamp_ms, event.message)


def _rules(view: ClusterView) -> Callable[[str | None], OperatorRules]:
    """The operator patterns a record of a node of `group` is classified with (None: a stream that is no node's)."""

    def rules(group: str | None) -> OperatorRules:
        context = view.groups.get(group) if group is not None else None
        return context.rules if context is not None else view.foreign_rules

    return rules


def lines_due_in(record: NodeRecord, snapshot: NodeSnapshot | None, view: ClusterView, now: float) -> bool:
    """Whether the node's result lines are read by a look at `now` (`rounds.lines_due` with its group's times)."""
    group = view.groups.get(record.group)
    if group is None or record.check_started_at is None:
        return False
    return lines_due(record, snapshot, now, group.settle_s, expected_for(checked_for(record, group)))


def _ask_operation(record: NodeRecord, snapshot: NodeSnapshot | None, view: ClusterView, now: float) -> bool:
    """Whether the node's verdict hangs on HyperPod's check operation having ended: it has shown
    `DeepHealthCheckInProgress` for longer than its checks take (isolated after a failure?), has not shown it
    for longer than HyperPod waits for a busy node (skipped, or a slow start?), or it waits to pass on silence."""
    group = view.groups.get(record.group)
    if snapshot is None or group is None or record.observe_only:
        return False
    if record.check_left_at is not None:
        return group.policy.pass_on_silence and now - record.check_left_at >= group.revisit_s
    elapsed = now - (record.check_started_at or now)
    if snapshot.status == IN_PROGRESS:
        return elapsed >= expected_for(record.check_types or record.requested_checks or group.policy.checks)
    return snapshot.status == RUNNING and not record.seen_in_progress and elapsed >= SKIP_GRACE_S


def close_cluster(ctx: Context, cluster: str, reason: str, trigger: str) -> str:
    """The cluster is gone (or going): every node it left ends GONE, and it leaves the registry."""
    records = ctx.table.load_cluster(cluster).values()
    changes = [c for r in records if (c := close_out(r, reason, ctx.clock(), trigger))]
    save_and_announce(ctx, changes)
    ctx.table.unregister_cluster(cluster)
    return f"closed out {len(changes)} node(s): {reason}"
