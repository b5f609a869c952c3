"""The controller's use cases: each handler makes exactly one call into this module.

Here the pure domain meets the adapters: read state (HyperPod, DynamoDB, result logs), decide with the
domain's pure functions, write every change conditionally and log it as an audit decision.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from deephealth.adapters.hyperpod import ClusterInfo, HyperPod
from deephealth.adapters.node_table import NodeTable, RoundMeta
from deephealth.adapters.notifications import Notifier
from deephealth.adapters.result_logs import ResultLogs
from deephealth.adapters.round_starter import RoundStarter
from deephealth.domain.errors import ClusterBusy, ClusterNotFound, LeaseLost, StaleRecord, Throttled
from deephealth.domain.events import ClusterSignal, Ignored, NodeSignal
from deephealth.domain.nodes import (
    IN_PROGRESS,
    RUNNING,
    Action,
    Decision,
    NodeRecord,
    NodeSnapshot,
    NodeState,
    Verdict,
    round_seq_of,
    transition,
)
from deephealth.domain.observe import Observation, close_out, mark_unhealthy, observe
from deephealth.domain.on_demand import JOBS_NOTE, CheckRequest, due_for_revalidation, find, request_checks
from deephealth.domain.policy import ControllerConfig, GroupContext
from deephealth.domain.recovery import action_refused, action_started, action_unconfirmed
from deephealth.domain.rounds import (
    FULL_OBSERVE_S,
    LEASE_TTL_S,
    ListingWindow,
    RoundState,
    build_check_request,
    claimable,
    expected_check_s,
    gather_delay,
    listing_window,
    next_wait,
    round_name,
    select_for_round,
)
from deephealth.domain.safety import (
    Alert,
    SafetyState,
    admit_to_round,
    budget_use,
    due_recoveries,
    failure_counts,
    gate_recovery,
    progress_possible,
    release_holds,
    reset,
)
from deephealth.domain.views import group_views, node_detail, node_summary, state_counts
from deephealth.observability import MetricUnit, logger, metrics, node_metric

CLOSING_STATUSES = frozenset({"Deleting", "Failed"})
MAX_POLLS = 2000  # a hard stop far beyond any check timeout, in case the clock misbehaves
# DescribeCluster answers change rarely (groups, NodeRecovery); a warm Lambda reuses them this long. Reconcile
# and cluster events always describe afresh, and a deleted cluster shows in ListClusterNodes too.
CLUSTER_INFO_TTL_S = 1800


@dataclass
class ClusterView:
    info: ClusterInfo
    groups: dict[str, GroupContext]
    records: dict[str, NodeRecord] = field(default_factory=dict)
    snapshots: dict[str, NodeSnapshot] = field(default_factory=dict)  # set by observe_cluster
    # Records of an earlier cluster of the same name (deleted and recreated): never observed, counted or shown.
    previous: dict[str, NodeRecord] = field(default_factory=dict)


class Controller:
    def __init__(
        self,
        table: NodeTable,
        hyperpod: HyperPod,
        config: Callable[[], ControllerConfig],
        clock: Callable[[], float],
        logs: ResultLogs | None = None,
        starter: RoundStarter | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.table = table
        self.hyperpod = hyperpod
        self.config = config
        self.clock = clock
        self.logs = logs or ResultLogs()
        self.starter = starter
        self.notifier = notifier or Notifier(None)
        self._cluster_info: dict[str, tuple[float, ClusterInfo]] = {}

    # -- intake ----------------------------------------------------------------------------------------
    def handle_signal(self, signal: NodeSignal | ClusterSignal | Ignored) -> str:
        """Act on one classified event; returns what happened, for the log."""
        if isinstance(signal, Ignored):
            metrics.add_metric(name="IgnoredEvents", unit=MetricUnit.Count, value=1)
            return f"ignored: {signal.reason}"
        if not self.config().watches(signal.cluster):
            metrics.add_metric(name="IgnoredEvents", unit=MetricUnit.Count, value=1)
            return f"ignored: cluster {signal.cluster} is not configured"
        if isinstance(signal, ClusterSignal):
            # Closing or not, the cluster's own state decides: reconcile closes out a Deleting/Failed cluster.
            return self.reconcile_cluster(signal.cluster, trigger=signal.event_id)
        return self._node_signal(signal)

    def _node_signal(self, signal: NodeSignal) -> str:
        if not signal.wakes_round:
            # A step before readiness (provisioned, script started, a reboot or replacement under way): nothing to
            # record yet; the readiness event, a round or Reconcile's listing follows.
            return f"hint only: {signal.reason[:100]}"
        if not signal.unhealthy:
            # A node may have become ready, or changed. HyperPod's listing is the truth, not the event: the round's
            # Claim lists the cluster once and records every node that is ready, and a live round's polls list it
            # every FULL_OBSERVE_S. So the event only wakes the cluster's round. A DescribeClusterNode per event
            # would be one call per node, and a burst of 500 arrivals would meet SageMaker's throttling.
            self._start_round(signal.cluster)
            return f"round woken: {signal.reason[:100]}"
        try:
            view = self._view(signal.cluster, load_records=False)
        except ClusterNotFound:
            return self.close_cluster(signal.cluster, "cluster not found", signal.event_id)
        snapshot = self.hyperpod.describe_node(signal.cluster, signal.logical_id, signal.instance_id)
        key = (snapshot.key if snapshot else None) or signal.logical_id
        if not key:
            return f"ignored: node {signal.instance_id} not found"
        record = self.table.get(signal.cluster, key)
        obs = Observation(
            now=self.clock(),
            node_recovery=view.info.node_recovery,
            trigger=signal.event_id,
            may_judge=False,
            groups=view.groups,
        )
        change = observe(signal.cluster, record, snapshot, obs)
        if change is None and record is not None and snapshot is not None:  # only unhealthy reports get here
            change = mark_unhealthy(record, snapshot, signal.reason, obs)
        if change is None:
            return "no change"
        saved = self._save([change])
        if saved and (saved[0].state == NodeState.RECOVERY_DUE or saved[0].ready_at is not None):
            self._start_round(signal.cluster)  # a re-check is waiting, or a recovery is due
        return f"{change[1].from_state} -> {change[1].to_state}"

    # -- reconciliation ------------------------------------------------------------------------------
    def reconcile(self) -> dict[str, str]:
        """Level-triggered pass over every configured cluster (and every cluster we hold records for)."""
        config = self.config()
        names = set(self.table.registered_clusters())
        names |= set(self.hyperpod.list_cluster_names() if config.clusters == "all" else config.clusters)
        results = {}
        for name in sorted(n for n in names if config.watches(n)):
            try:
                results[name] = self.reconcile_cluster(name, trigger="reconcile")
            except Exception as err:  # one broken cluster must not starve the others
                logger.exception("reconcile failed", extra={"cluster": name})
                metrics.add_metric(name="ReconcileErrors", unit=MetricUnit.Count, value=1)
                results[name] = f"error: {type(err).__name__}"
        return results

    def reconcile_cluster(self, cluster: str, trigger: str) -> str:
        meta = self.table.round_meta(cluster)
        # A live round observes this cluster on every poll, and its Claim round observes it fresh. The starter
        # checks that round really runs, and moves past it if it died holding the lease.
        live = trigger == "reconcile" and meta.holder and meta.lease_expires_at > self.clock()
        if live and (self.starter is None or self.starter.ensure_round(cluster) == meta.holder):
            return f"round {meta.holder} is live; its polls observe the cluster"
        if live:
            meta = self.table.round_meta(cluster)  # the starter moved past a round that died holding the lease
        try:
            view = self.observe_cluster(cluster, trigger, fresh=True, orphaned_before=self._orphaned_before(meta))
        except ClusterNotFound:
            return self.close_cluster(cluster, "cluster not found", trigger)
        if view.info.status in CLOSING_STATUSES:
            return self.close_cluster(cluster, f"cluster {view.info.status}", trigger)
        stale = due_for_revalidation(view.records, view.groups, self.clock())
        if stale:  # the same path as an operator's on-demand request
            queued, _ = request_checks(
                view.records,
                view.groups,
                group_names=[],
                nodes=stale,
                checks=None,
                now=self.clock(),
                trigger="revalidation",
            )
            for saved in self._save(queued):
                view.records[saved.key] = saved
        if self._progress(view) is not None:
            self._start_round(cluster)
        states = Counter(r.state.value for r in view.records.values())
        return ", ".join(f"{k}={v}" for k, v in sorted(states.items())) or "no nodes"

    def close_cluster(self, cluster: str, reason: str, trigger: str) -> str:
        records = self.table.load_cluster(cluster).values()
        changes = [c for r in records if (c := close_out(r, reason, self.clock(), trigger))]
        self._save(changes)
        self.table.unregister_cluster(cluster)
        return f"closed out {len(changes)} node(s): {reason}"

    def observe_cluster(
        self, cluster: str, trigger: str, fresh: bool = False, orphaned_before: int | None = None
    ) -> ClusterView:
        """One paginated ListClusterNodes pass (+ one result-log query if a check ended) folded into records.

        `orphaned_before`: rounds before this sequence number have ended, so what they claimed and never started
        goes back in the queue (None: the caller cannot tell)."""
        view = self._view(cluster, fresh=fresh)
        snapshots = {s.key: s for s in self.hyperpod.list_nodes(cluster) if s.key}
        changes = self._fold(cluster, view, snapshots, trigger, orphaned_before)
        reason = f"the cluster was recreated (now {view.info.cluster_id}): this node belonged to the one before"
        changes += [c for r in view.previous.values() if (c := close_out(r, reason, self.clock(), trigger))]
        if changes and not view.records:
            self.table.register_cluster(cluster)
        for saved in self._save(changes):
            view.records[saved.key] = saved
        return view

    def observe_members(self, cluster: str, round_id: str, window: ListingWindow) -> ClusterView:
        """A poll's cheap look: list only the round's launch-time window, read only the nodes listed, and fold
        what the round's members show. A member missing from the window (replaced mid-check: a new launch
        time) waits for the next look at the whole cluster."""
        view = self._view(cluster, load_records=False)
        listed = {s.key: s for s in self.hyperpod.list_nodes(cluster, window) if s.key}
        view.records = {
            k: r
            for k, r in self.table.load_nodes(cluster, listed).items()
            if r.state == NodeState.CHECKING and r.round_id == round_id
        }
        changes = self._fold(cluster, view, {k: listed[k] for k in view.records}, round_id, round_seq_of(round_id))
        for saved in self._save(changes):
            view.records[saved.key] = saved
        return view

    def _fold(
        self,
        cluster: str,
        view: ClusterView,
        snapshots: dict[str, NodeSnapshot],
        trigger: str,
        orphaned_before: int | None = None,
    ) -> list[tuple[NodeRecord, Decision]]:
        """Observe every node in `snapshots` or `view.records`; the result logs are read once, if a check ended."""
        view.snapshots = snapshots
        # Claimed nodes whose check has not started yet have not left anything: no result-log query for them.
        checking = [r for r in view.records.values() if r.state == NodeState.CHECKING and r.check_started_at]
        left = [r for r in checking if (s := snapshots.get(r.key)) is None or s.status != IN_PROGRESS]
        log_errors = None
        if left:
            since = min(r.check_started_at or self.clock() for r in checking)
            log_errors = self.logs.errors_since(
                view.info.log_group, since, {r.instance_id for r in checking if r.instance_id}
            )
        obs = Observation(
            now=self.clock(),
            node_recovery=view.info.node_recovery,
            trigger=trigger,
            log_errors=log_errors,
            groups=view.groups,
            orphaned_before=orphaned_before,
            cluster_id=view.info.cluster_id,
        )
        return [
            c
            for key in sorted(set(snapshots) | set(view.records))
            if (c := observe(cluster, view.records.get(key), snapshots.get(key), obs))
        ]

    # -- operators: read models and on-demand checks --------------------------------------------------
    def cluster_names(self) -> list[str]:
        config = self.config()
        return sorted(set(config.clusters) if config.clusters != "all" else set(self.table.registered_clusters()))

    def _known(self, cluster: str) -> None:
        if cluster not in self.cluster_names():
            raise ClusterNotFound(f"cluster {cluster} is not watched by this controller")

    def _shown(self, cluster: str) -> ClusterView:
        """What operators see of a cluster: its current records (not those of an earlier cluster of the same
        name). A cluster HyperPod no longer knows shows every record it left."""
        try:
            return self._view(cluster)
        except ClusterNotFound:
            return ClusterView(ClusterInfo(cluster, "", "", "Deleted", ""), {}, self.table.load_cluster(cluster))

    def clusters_view(self) -> list[dict]:
        return [
            {
                "cluster": name,
                "states": state_counts(list(self._shown(name).records.values())),
                "live_round": self._live_round(name),
            }
            for name in self.cluster_names()
        ]

    def groups_view(self, cluster: str) -> list[dict]:
        self._known(cluster)
        return group_views(list(self._shown(cluster).records.values()), self._live_round(cluster))

    def nodes_view(
        self, cluster: str, group: str | None, state: str | None, limit: int, after: str | None
    ) -> tuple[list[dict], str | None]:
        """One page of nodes, ordered by node key; `after` is the last key of the previous page."""
        self._known(cluster)
        records = sorted(self._shown(cluster).records.values(), key=lambda r: r.key)
        chosen = [
            r
            for r in records
            if (group is None or r.group == group)
            and (state is None or r.state == state)
            and (after is None or r.key > after)
        ]
        page = chosen[:limit]
        return [node_summary(r) for r in page], (page[-1].key if len(chosen) > limit else None)

    def node_view(self, cluster: str, ref: str) -> dict | None:
        self._known(cluster)
        record = find(self._shown(cluster).records, ref)
        return None if record is None else node_detail(record)

    def request_checks(self, cluster: str, request: CheckRequest, trigger: str) -> dict:
        """Queue the requested nodes into the next round; say what was queued and why anything was not."""
        self._known(cluster)
        # The stored records, not a listing: rounds and Reconcile keep them fresh, and a listing per request
        # would be 100 ListClusterNodes pages per POST on a 10,000-node cluster.
        view = self._view(cluster)
        queued, refused = request_checks(
            view.records,
            view.groups,
            group_names=request.groups,
            nodes=request.instances,
            checks=request.checks,
            now=self.clock(),
            trigger=trigger,
        )
        saved = self._save(queued)
        if saved:
            self._start_round(cluster)
        return {
            "cluster": cluster,
            "queued": [r.key for r in saved],
            "not_queued": [{"node": f.node, "reason": f.reason} for f in refused]
            + [
                {"node": r.key, "reason": "changed concurrently; retry"}
                for r, _ in queued
                if r.key not in {s.key for s in saved}
            ],
            "note": JOBS_NOTE,
        }

    def breakers_view(self, cluster: str) -> dict:
        """The cluster's breaker, bad-capacity holds, replacement budgets in use and the nodes they hold."""
        self._known(cluster)
        now = self.clock()
        view = self._shown(cluster)
        state = self._safety(view.info)
        records = list(view.records.values())
        config = self.config()
        policy = config.cluster_policy(cluster)
        since = max(now - policy.breaker.window_h * 3600, state.breaker_reset_at)
        failed, verdicted = failure_counts(records, since)
        groups: dict[str, list[NodeRecord]] = {}
        for r in records:
            groups.setdefault(r.group, []).append(r)
        return {
            "cluster": cluster,
            "breaker": {
                "open": state.breaker is not None,
                "tripped": state.breaker.model_dump() if state.breaker else None,
                "failed_nodes": failed,
                "verdicted_nodes": verdicted,
                "policy": policy.breaker.model_dump(),
            },
            "capacity_holds": {g: t.model_dump() for g, t in sorted(state.capacity_holds.items())},
            "replace_budget": {
                "cluster": budget_use(records, policy.replace_budget, now),
                "groups": {
                    g: budget_use(members, config.policy_for(cluster, g).replace_budget, now)
                    for g, members in sorted(groups.items())
                },
            },
            "held_nodes": [
                {
                    "node": r.key,
                    "group": r.group,
                    "held_by": r.held_by,
                    "reason": r.history[-1].reason if r.history else "",
                }
                for r in sorted(records, key=lambda r: r.key)
                if r.state == NodeState.RECOVERY_DUE and r.held_by
            ],
            "resets": [x.model_dump() for x in state.resets],
        }

    def reset_breaker(self, cluster: str, group: str | None, by: str, reason: str, trigger: str) -> dict:
        """An operator closes the breaker (`group` None) or lifts an instance group's bad-capacity hold."""
        self._known(cluster)
        now = self.clock()
        view = self._shown(cluster)
        state = self._safety(view.info)
        tripped = state.breaker if group is None else state.capacity_holds.get(group)
        answer = {"cluster": cluster, "group": group, "scope": "breaker" if group is None else "capacity-hold"}
        if tripped is None:
            what = "the breaker is not open" if group is None else f"group {group} has no bad-capacity hold"
            return {**answer, "reset": False, "message": what, "released": []}
        self.table.save_safety(reset(state, group, now, by, reason))  # StaleRecord: changed concurrently
        released = self._save(release_holds(view.records.values(), group, now, trigger))
        logger.warning(
            "safety reset",
            extra={"cluster": cluster, "group": group, "by": by, "reason": reason, "tripped": tripped.model_dump()},
        )
        self._notify(
            "breaker-reset",
            cluster,
            group or "",
            f"hyperpod-dhc: {'breaker' if group is None else group + ' hold'} reset on {cluster}",
            {"scope": answer["scope"], "by": by, "reason": reason, "released": [r.key for r in released]},
        )
        if released:
            self._start_round(cluster)
        return {**answer, "reset": True, "message": "reset", "released": [r.key for r in released]}

    def _live_round(self, cluster: str) -> str | None:
        meta = self.table.round_meta(cluster)
        return meta.holder if meta.holder and meta.lease_expires_at > self.clock() else None

    # -- the round workflow's steps ------------------------------------------------------------------
    def claim_round(self, state: RoundState) -> RoundState:
        round_id = round_name(state.cluster, state.round_seq)
        state = state.model_copy(update={"round_id": round_id, "gather_s": 0})
        now = self.clock()
        if not self.table.acquire_lease(state.cluster, state.round_seq, round_id, now, LEASE_TTL_S):
            logger.info("round not started: lease held or round superseded", extra={"round_id": round_id})
            return state.model_copy(update={"claimed": 0, "recovery_due": 0})
        try:
            # Fresh: arrivals whose events were lost, and nodes earlier rounds claimed but never started.
            view = self.observe_cluster(state.cluster, round_id, orphaned_before=state.round_seq)
        except ClusterNotFound:
            self.close_cluster(state.cluster, "cluster not found", round_id)
            return state.model_copy(update={"claimed": 0, "recovery_due": 0})
        candidates = claimable(view.records.values(), view.groups)
        if not state.gathered and (delay := gather_delay(candidates, view.groups, now)) > 0:
            return state.model_copy(update={"gather_s": delay, "gathered": True})
        self._shadow_checks([r for r in candidates if view.groups[r.group].policy.dry_run], view, round_id, now)
        live = [r for r in candidates if not view.groups[r.group].policy.dry_run]
        chosen = select_for_round(
            admit_to_round(live, view.records.values(), view.groups), self.config().max_round_nodes
        )
        claimed = self._save(
            [
                transition(
                    r,
                    now,
                    NodeState.CHECKING,
                    "claimed for a check round",
                    round_id,
                    round_id=round_id,
                    check_started_at=None,
                    seen_in_progress=False,
                    observe_only=False,
                )
                for r in chosen
            ]
        )
        due = self._due(view)
        logger.info("round claimed", extra={"round_id": round_id, "claimed": len(claimed), "recovery_due": len(due)})
        metrics.add_metric(name="NodesClaimed", unit=MetricUnit.Count, value=len(claimed))
        return state.model_copy(update={"claimed": len(claimed), "recovery_due": len(due), "gathered": True})

    def start_check(self, state: RoundState) -> RoundState:
        now = self._renew(state)
        # Observing (not just listing) judges nodes still in the check of a round that died mid-check.
        view = self.observe_cluster(state.cluster, state.round_id, orphaned_before=state.round_seq)
        snapshots = view.snapshots
        members = self._members(view, state.round_id)
        # A group switched to dry-run while this round waited (ClusterBusy retries) gets no check.
        shadow = [r for r in members if view.groups[r.group].policy.dry_run]
        self._shadow_checks(shadow, view, state.round_id, now)
        members = [r for r in members if not view.groups[r.group].policy.dry_run]
        ours = {r.key for r in members}
        # Members already in a check are ours only if this round asked for one (a retry after the call went
        # through); otherwise someone else's check (an operator's, a dead round's) covers them.
        requested = self.table.round_meta(state.cluster).check_requested == state.round_id
        elsewhere = [
            key
            for key, s in snapshots.items()
            if s.status == IN_PROGRESS
            and (key not in ours or not requested)
            and (ctx := view.groups.get(s.group)) is not None
            and not ctx.observe_only  # HyperPod's on-start checks are not on-demand checks
        ]
        if elsewhere:
            # An on-demand check is still active (a dead round's, or an operator's): asking now is only refused.
            raise ClusterBusy(f"{len(elsewhere)} node(s) of {state.cluster} are in a check this round did not start")
        ready, unready, already = [], [], []
        for r in members:
            s = snapshots.get(r.key)
            if s and s.instance_id == r.instance_id and s.status == IN_PROGRESS:
                already.append(r)  # our own request went through before a retry of this step
            elif s and s.instance_id == r.instance_id and s.status == RUNNING:
                ready.append(r)
            else:
                unready.append(r)
        self._save(
            [
                transition(
                    r,
                    now,
                    NodeState.PENDING,
                    "not Running when the check started; back in the queue",
                    state.round_id,
                    round_id=None,
                    ready_at=None,
                )
                for r in unready
            ]
        )
        configs = build_check_request(ready + already, view.groups)
        if ready and not already and requested:
            # This round asked before and the answer was lost (a 5xx, or this step failed after the call): the
            # check may be starting. Asking again could be a second request while it runs, so it is not: if the
            # first request never arrived, its members are judged skipped and checked again (never passed).
            logger.warning(
                "check already requested by this round; not asking again", extra={"round_id": state.round_id}
            )
        elif ready and not already:
            # Intent first: a retry of this step after the call went through knows the check is its own.
            self.table.note_check_request(state.cluster, state.round_id)
            try:
                self.hyperpod.start_health_check(state.cluster, configs)
            except (ClusterBusy, Throttled):
                self.table.note_check_request(state.cluster, None)  # refused or never carried out
                raise
            logger.info("check started", extra={"round_id": state.round_id, "configurations": configs})
        self._save(
            [
                r.model_copy(update={"check_started_at": now, "updated_at": now})
                for r in ready + already
                if r.check_started_at is None
            ],
            audit=False,
        )
        node_metric("NodesChecked", state.cluster, len(ready) + len(already))
        expected = expected_check_s(configs)
        interval = min((g.policy.poll_interval_s for g in view.groups.values()), default=60)
        wait = next_wait(now, now, expected, interval, awaiting_start=True) if configs else 0
        window = listing_window(snapshots[r.key] for r in ready + already)
        return state.model_copy(
            update={"started_at": now, "wait_s": wait, "done": not configs, "window": window, "observed_at": now}
        )

    def poll_check(self, state: RoundState) -> RoundState:
        """Look at the round's members (and, every FULL_OBSERVE_S, at the whole cluster); decide when to look
        again. The round ends only after a look at the whole cluster has found no member left in the check."""
        now = self._renew(state)
        observed_at = state.observed_at
        full = state.window is None or observed_at is None or now - observed_at >= FULL_OBSERVE_S
        try:
            if not full:
                view = self.observe_members(state.cluster, state.round_id, state.window)  # type: ignore[arg-type]
                full = not self._members(view, state.round_id)  # it looks finished: confirm on the whole cluster
            if full:
                view = self.observe_cluster(state.cluster, state.round_id, orphaned_before=state.round_seq)
                observed_at = now
        except ClusterNotFound:
            self.close_cluster(state.cluster, "cluster deleted during the round", state.round_id)
            return state.model_copy(update={"done": True, "wait_s": 0, "recovery_due": 0})
        members = self._members(view, state.round_id)
        polls = state.polls + 1
        done = not members or polls >= MAX_POLLS
        started = state.started_at or now
        configs = build_check_request(members, view.groups) if members else []
        interval = min((g.policy.poll_interval_s for g in view.groups.values()), default=60)
        wait = (
            0
            if done
            else next_wait(
                started,
                now,
                expected_check_s(configs),
                interval,
                awaiting_start=any(not r.seen_in_progress for r in members),
            )
        )
        return state.model_copy(
            update={
                "done": done,
                "wait_s": wait,
                "polls": polls,
                "observed_at": observed_at,
                # Only a look at the whole cluster sees every node due for recovery; the round ends on one.
                "recovery_due": len(self._due(view)) if full else state.recovery_due,
            }
        )

    def recover_nodes(self, state: RoundState) -> RoundState:
        now = self._renew(state)
        try:
            view = self._view(state.cluster)
        except ClusterNotFound:
            return state.model_copy(update={"recovery_due": 0})
        due = self._due(view)
        if not due:
            return state.model_copy(update={"recovery_due": 0})
        safety = self._safety(view.info)
        plan = gate_recovery(
            due,
            view.records,
            view.groups,
            self.config().cluster_policy(state.cluster),
            safety,
            now,
            state.round_id,
        )
        if plan.safety is not None:
            # Conditional: a concurrent operator reset wins, and this round's actions wait for the next look.
            self.table.save_safety(plan.safety)
            logger.warning(
                "safety tripped",
                extra={"cluster": state.cluster, "round_id": state.round_id, "safety": plan.safety.model_dump()},
            )
        for alert in plan.alerts:
            self._alert(state.cluster, alert)
        self._save(plan.changes)
        for action, records in plan.acts.items():
            if records:
                self._act(state, view.info, action, records)
        return state.model_copy(update={"recovery_due": 0})

    def finish_round(self, state: RoundState) -> RoundState:
        """Release the lease on every exit path; hand unstarted nodes back; start the next round."""
        round_id = state.round_id or round_name(state.cluster, state.round_seq)
        now = self.clock()
        records = self.table.load_cluster(state.cluster)
        handed_back = self._save(
            [
                transition(
                    r,
                    now,
                    NodeState.PENDING,
                    "round ended before the check started; back in the queue",
                    round_id,
                    round_id=None,
                )
                for r in records.values()
                if r.state == NodeState.CHECKING and r.round_id == round_id and r.check_started_at is None
            ]
        )
        released = self.table.release_lease(state.cluster, round_id)
        summary = Counter(
            r.state.value
            for r in records.values()
            if r.round_id == round_id or any(h.trigger == round_id for h in r.history[-3:])
        )
        logger.info(
            "round finished",
            extra={
                "round_id": round_id,
                "error": state.error,
                "released": released,
                "handed_back": len(handed_back),
                "summary": dict(summary),
            },
        )
        self._announce_round(round_id, state, records.values())
        if state.error:
            metrics.add_metric(name="RoundsFailed", unit=MetricUnit.Count, value=1)
        elif released:
            # A failed round leaves the restart to the reconciler, so a persistent fault cannot hot-loop; and a
            # round is chained only if it could change something now: held work waits for its due time, which
            # Reconcile sees (a budget of 0 or a full out-of-service cap must not chain rounds back to back).
            try:
                view = self._view(state.cluster)
            except ClusterNotFound:
                return state.model_copy(update={"done": True})
            progress = self._progress(view)
            logger.info("next round", extra={"round_id": round_id, "chained": progress is not None, "why": progress})
            if progress is not None:
                self._start_round(state.cluster)
        return state.model_copy(update={"done": True})

    # -- helpers -------------------------------------------------------------------------------------
    def _describe(self, cluster: str, fresh: bool = False) -> ClusterInfo:
        now = self.clock()
        cached = self._cluster_info.get(cluster)
        if fresh or cached is None or now - cached[0] > CLUSTER_INFO_TTL_S:
            try:
                cached = (now, self.hyperpod.describe_cluster(cluster))
            except ClusterNotFound:
                self._cluster_info.pop(cluster, None)
                raise
            self._cluster_info[cluster] = cached
        return cached[1]

    def _view(self, cluster: str, load_records: bool = True, fresh: bool = False) -> ClusterView:
        info = self._describe(cluster, fresh)
        config = self.config()
        groups = {
            name: GroupContext(
                policy=config.policy_for(cluster, name), worker=g.worker, on_start_checks=g.on_start_checks
            )
            for name, g in info.groups.items()
        }
        records = self.table.load_cluster(cluster) if load_records else {}
        current = {k: r for k, r in records.items() if r.cluster_id in (None, info.cluster_id)}
        previous = {k: r for k, r in records.items() if k not in current}
        return ClusterView(info, groups, current, previous=previous)

    def _members(self, view: ClusterView, round_id: str) -> list[NodeRecord]:
        return [r for r in view.records.values() if r.state == NodeState.CHECKING and r.round_id == round_id]

    def _due(self, view: ClusterView) -> list[NodeRecord]:
        return due_recoveries(view.records.values(), view.groups, self.clock())

    def _progress(self, view: ClusterView) -> str | None:
        """What a round started now would do (None: nothing, so none is started)."""
        cluster = view.info.name
        return progress_possible(
            view.records, view.groups, self.config().cluster_policy(cluster), self._safety(view.info), self.clock()
        )

    def _safety(self, info: ClusterInfo) -> SafetyState:
        """The cluster's breaker and holds; a cluster recreated under the same name starts afresh. A cluster
        HyperPod no longer knows (no id) shows what it left."""
        state = self.table.safety(info.name)
        if not info.cluster_id:
            return state
        if state.cluster_id is None:
            return state.model_copy(update={"cluster_id": info.cluster_id})
        if state.cluster_id != info.cluster_id:
            logger.warning(
                "cluster recreated: breaker, holds and budgets start afresh",
                extra={"cluster": info.name, "old_cluster_id": state.cluster_id, "cluster_id": info.cluster_id},
            )
            return SafetyState(cluster=info.name, cluster_id=info.cluster_id, version=state.version)
        return state

    def _orphaned_before(self, meta: RoundMeta) -> int:
        """Rounds before this sequence number have ended: the current one too if its lease expired (it died)."""
        expired = meta.holder is not None and meta.lease_expires_at <= self.clock()
        return meta.seq + 1 if expired else meta.seq

    def _start_round(self, cluster: str) -> None:
        if self.starter is not None:
            name = self.starter.ensure_round(cluster)
            logger.info("round ensured", extra={"cluster": cluster, "round_id": name})

    def _renew(self, state: RoundState) -> float:
        now = self.clock()
        if not self.table.acquire_lease(state.cluster, state.round_seq, state.round_id, now, LEASE_TTL_S):
            raise LeaseLost(f"{state.round_id} no longer holds the lease of {state.cluster}")
        return now

    def _act(
        self,
        state: RoundState,
        info: ClusterInfo,
        action: Action,
        records: list[NodeRecord],
    ) -> None:
        now = self.clock()
        # Intent first: a node is RECOVERING before the call, so a crash cannot lead to a second action.
        owned = self._save([action_started(r, action, now, state.round_id) for r in records])
        if not owned:
            return
        by_logical = [r.logical_id for r in owned if r.logical_id]
        by_instance = [r.instance_id for r in owned if not r.logical_id and r.instance_id]
        try:
            outcomes = self.hyperpod.act(info.name, action, by_logical, by_instance)
        except Exception as err:
            # The call failed as a whole: back off and retry a bounded number of times, then an operator decides.
            self._save(
                [action_refused(r, action, type(err).__name__, str(err), self.clock(), state.round_id) for r in owned]
            )
            raise
        by_key = {(r.logical_id or r.instance_id): r for r in owned}
        refused = [
            action_refused(by_key[o.key], action, o.code, o.message, now, state.round_id)
            for o in outcomes
            if not o.ok and not o.unconfirmed and o.key in by_key
        ]
        unconfirmed = [
            action_unconfirmed(by_key[o.key], action, f"{o.code}: {o.message}", now, state.round_id)
            for o in outcomes
            if o.unconfirmed and o.key in by_key
        ]
        self._save(refused + unconfirmed)
        node_metric(f"{action.value.capitalize()}Requests", info.name, len(owned) - len(refused))

    def _announce_round(self, round_id: str, state: RoundState, records: Iterable[NodeRecord]) -> None:
        """One round-finished message per instance group the round touched, with where its nodes ended."""
        by_group: dict[str, Counter] = {}
        for r in records:
            if any(h.trigger == round_id for h in r.history):
                by_group.setdefault(r.group, Counter())[r.state.value] += 1
        for group, states in sorted(by_group.items()):
            self._notify(
                "round-finished",
                state.cluster,
                group,
                f"hyperpod-dhc: round {round_id} finished",
                {"round_id": round_id, "failed_step": bool(state.error), "states": dict(states)},
            )

    def _notify(self, kind: str, cluster: str, group: str, subject: str, detail: dict) -> None:
        """Publish unless the group's policy mutes `kind`; the group's route rides along for SNS filters."""
        policy = self.config().policy_for(cluster, group) if group else None
        if policy is not None and kind not in policy.notify:
            return
        self.notifier.publish(kind, cluster, group, subject, detail, route=policy.notify_route if policy else None)

    def _alert(self, cluster: str, alert: Alert) -> None:
        node_metric("SafetyAlerts", cluster)
        self._notify(alert.kind, cluster, alert.group, alert.subject, alert.detail)

    def _shadow_checks(self, records: list[NodeRecord], view: ClusterView, round_id: str, now: float) -> None:
        """Dry-run groups: record the check this round would have started, and start none."""
        by_group: dict[str, list[NodeRecord]] = {}
        for r in records:
            by_group.setdefault(r.group, []).append(r)
        for group, members in sorted(by_group.items()):
            checks = ", ".join(view.groups[group].policy.checks)
            saved = self._save(
                transition(r, now, NodeState.SHADOWED, f"dry-run: would start a deep health check ({checks})", round_id)
                for r in members
            )
            if saved:
                self._notify(
                    "dry-run",
                    view.info.name,
                    group,
                    f"hyperpod-dhc: dry-run would check {len(saved)} node(s) of {group}",
                    {"round_id": round_id, "checks": checks, "nodes": [r.key for r in saved]},
                )

    def _announce(self, record: NodeRecord, decision: Decision) -> None:
        """Metrics and notifications for one audited decision."""
        detail = {
            "node": record.key,
            "instance_id": record.instance_id,
            "reason": decision.reason,
            "verdict": decision.verdict,
            "evidence": decision.evidence,
            "attempts": record.attempts,
        }
        if decision.verdict is not None:
            node_metric(f"Verdict_{decision.verdict.value}", record.cluster)
            if record.ready_at is not None and record.verdict_at is not None:
                node_metric(
                    "ReadyToVerdictSeconds", record.cluster, record.verdict_at - record.ready_at, MetricUnit.Seconds
                )
            if decision.to_state == NodeState.PASSED and record.attempts:
                node_metric("NodesRecovered", record.cluster)
                self._notify(
                    "node-recovered", record.cluster, record.group, f"hyperpod-dhc: {record.key} recovered", detail
                )
            elif decision.verdict in (Verdict.FAILED, Verdict.REPLACED_BY_HYPERPOD):
                self._notify(
                    "node-failed",
                    record.cluster,
                    record.group,
                    f"hyperpod-dhc: {record.key} failed its deep health check",
                    detail,
                )
        entered = decision.to_state if decision.from_state != decision.to_state else None
        if entered == NodeState.QUARANTINED:
            node_metric("NodesQuarantined", record.cluster)
            self._notify(
                "node-quarantined", record.cluster, record.group, f"hyperpod-dhc: {record.key} quarantined", detail
            )
        elif entered == NodeState.INCONCLUSIVE:
            # Missing evidence never leads to an action; it leads to a person.
            node_metric("NodesInconclusive", record.cluster)
            self._notify(
                "node-inconclusive",
                record.cluster,
                record.group,
                f"hyperpod-dhc: {record.key} inconclusive, needs an operator",
                detail,
            )

    def _save(
        self, changes: Iterable[tuple[NodeRecord, Decision] | NodeRecord], audit: bool = True
    ) -> list[NodeRecord]:
        saved = []
        for change in changes:
            record, decision = change if isinstance(change, tuple) else (change, None)
            try:
                saved.append(self.table.save(record))
            except StaleRecord as err:
                # Another writer got there first; the next observation re-decides from fresh state.
                logger.warning("decision dropped: record changed concurrently", extra={"reason": str(err)})
                metrics.add_metric(name="DecisionConflicts", unit=MetricUnit.Count, value=1)
                continue
            if decision is not None and audit:
                logger.info("decision", extra={"decision": decision.model_dump(mode="json")})
                self._announce(record, decision)
        return saved
