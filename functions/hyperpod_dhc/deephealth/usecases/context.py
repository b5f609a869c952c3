"""What every use case works with: the adapters, the configuration and the clock (`Context`, one per Lambda,
built by `wiring.build_context` in its handler module), and the reads they all share.

The only warm state is the DescribeCluster cache on the Context: a new handler module (a cold start, or the
twin's simulated redeploy) builds a new Context and starts without it (it reads the table's copy, which every
function shares).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from hyperpod_dhc.deephealth.adapters.hyperpod import ClusterInfo, HyperPod
from hyperpod_dhc.deephealth.adapters.node_table import NodeTable, Registration
from hyperpod_dhc.deephealth.adapters.notifications import Notifier
from hyperpod_dhc.deephealth.adapters.result_logs import ResultLogs
from hyperpod_dhc.deephealth.adapters.round_item import RoundMeta
from hyperpod_dhc.deephealth.adapters.round_starter import RoundStarter
from hyperpod_dhc.deephealth.domain.breakers import SafetyState
from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound, ClusterNotSlurm, LeaseLost
from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState
from hyperpod_dhc.deephealth.domain.policy import ControllerConfig
from hyperpod_dhc.deephealth.domain.readings import ClusterReadings
from hyperpod_dhc.deephealth.domain.round_admission import due_recoveries, progress_possible, recoveries_possible
from hyperpod_dhc.deephealth.domain.rounds import LEASE_TTL_S, RoundState
from hyperpod_dhc.deephealth.evidence.rules import NO_OPERATOR_RULES, OperatorRules
from hyperpod_dhc.deephealth.observability import logger

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
    # What the cluster was seen to do (its result-log lag gives the groups' settle and revisit times); None when
    # the view was built without records.
    readings: ClusterReadings | None = None
    complete: bool = True  # `records` holds every record of the cluster (not only a round's members)
    # Every record of the cluster, where `records` holds only some: whose names a result line may carry.
    everyone: dict[str, NodeRecord] | None = None
    operations_asked: bool = False  # this look asked ListClusterOperations
    # Settling nodes the look showed otherwise than their records, with no decision (`seen_while_settling`): saved.
    seen: list[NodeRecord] = field(default_factory=list)
    # The operator patterns a record on a stream that is no node's is classified with (the cluster's and defaults').
    foreign_rules: OperatorRules = NO_OPERATOR_RULES

    def names(self) -> dict[str, NodeRecord] | None:
        """Every record of the cluster, if this view has them (None: result lines cannot be attributed here)."""
        return self.records if self.complete else self.everyone

    def members(self, round_id: str) -> list[NodeRecord]:
        """The nodes a round has claimed and not yet judged."""
        return [r for r in self.records.values() if r.state == NodeState.CHECKING and r.round_id == round_id]


@dataclass
class Context:
    table: NodeTable
    hyperpod: HyperPod
    config: Callable[[], ControllerConfig]
    clock: Callable[[], float]
    logs: ResultLogs = field(default_factory=ResultLogs)
    starter: RoundStarter | None = None
    notifier: Notifier = field(default_factory=lambda: Notifier(None))
    _cluster_info: dict[str, tuple[float, ClusterInfo]] = field(default_factory=dict, init=False, repr=False)

    def describe(self, cluster: str, fresh: bool = False) -> ClusterInfo:
        """DescribeCluster, cached for CLUSTER_INFO_TTL_S unless `fresh`: in this warm Lambda, and in the table for
        every function (one call per cluster and TTL, not one per function)."""
        now = self.clock()
        cached = self._cluster_info.get(cluster)
        if fresh or cached is None or now - cached[0] > CLUSTER_INFO_TTL_S:
            shared = None if fresh else self.table.cluster_info(cluster)
            if shared is not None and now - shared[0] <= CLUSTER_INFO_TTL_S:
                cached = (shared[0], ClusterInfo.from_json(shared[1]))
            else:
                try:
                    cached = (now, self.hyperpod.describe_cluster(cluster))
                except ClusterNotFound:
                    self._cluster_info.pop(cluster, None)
                    self.table.forget_cluster_info(cluster)
                    raise
                self.table.save_cluster_info(cluster, now, cached[1].to_json())
                if not cached[1].slurm:
                    self._say_not_slurm(cached[1])
            self._cluster_info[cluster] = cached
        if not cached[1].slurm:
            # The one choke point: whatever function meets the cluster, it is not there for the controller.
            raise ClusterNotSlurm(cluster, cached[1].orchestrators)
        return cached[1]

    def _say_not_slurm(self, info: ClusterInfo) -> None:
        """One alert per non-Slurm cluster (per ARN), from whichever function described it first."""
        if not self.table.note_not_slurm(info.name, info.arn):
            return
        logger.warning("cluster is not a Slurm cluster: ignored", extra={"cluster": info.name, "arn": info.arn})
        self.notifier.publish(
            "cluster-not-slurm",
            info.name,
            "",
            f"hyperpod-dhc: {info.name} is not a Slurm cluster and is ignored",
            {
                "cluster_arn": info.arn,
                "orchestrators": list(info.orchestrators),
                "note": (
                    "hyperpod-dhc drives Slurm clusters only: it starts no check and takes no action on this "
                    'cluster; with clusters = "all", name the Slurm clusters in deploy.toml to stop this alert '
                    "for new clusters"
                ),
            },
        )

    def view(self, cluster: str, load_records: bool = True, fresh: bool = False) -> ClusterView:
        """The cluster as HyperPod describes it, with its groups' policies and (unless not asked) its records."""
        info = self.describe(cluster, fresh)
        config = self.config()
        groups = self.groups(cluster, info)
        readings = self.readings(info)
        now = self.clock()
        groups = {
            name: dataclasses.replace(
                g,
                measured_settle_s=readings.settle_s(g.policy, now),
                measured_revisit_s=readings.revisit_s(g.policy, now),
            )
            for name, g in groups.items()
        }
        records = self.table.load_cluster(cluster) if load_records else {}
        current = {k: r for k, r in records.items() if r.cluster_id in (None, info.cluster_id)}
        previous = {k: r for k, r in records.items() if k not in current}
        view = ClusterView(info, groups, current, previous=previous, readings=readings, complete=load_records)
        view.foreign_rules = config.result_rules(cluster, None)
        return view

    def groups(self, cluster: str, info: ClusterInfo) -> dict[str, GroupContext]:
        """The cluster's groups with their policies and result rules; not what the cluster was seen to do (the
        settle and revisit times `view` adds from its readings)."""
        config = self.config()
        return {
            name: GroupContext(
                policy=config.policy_for(cluster, name),
                worker=g.worker,
                on_start_checks=g.on_start_checks,
                rules=config.result_rules(cluster, name),
            )
            for name, g in info.groups.items()
        }

    def readings(self, info: ClusterInfo) -> ClusterReadings:
        """What the cluster was seen to do; a cluster recreated under the same name starts afresh."""
        readings = self.table.readings(info.name)
        if info.cluster_id and readings.cluster_id not in (None, info.cluster_id):
            return ClusterReadings(cluster=info.name, cluster_id=info.cluster_id, version=readings.version)
        return readings.model_copy(update={"cluster_id": info.cluster_id or readings.cluster_id})

    def due(self, view: ClusterView) -> list[NodeRecord]:
        """The nodes whose recovery is due now."""
        return due_recoveries(view.records.values(), view.groups, self.clock())

    def recoverable(self, view: ClusterView, due: list[NodeRecord], check_active: bool | None = None) -> int:
        """How many of the `due` recoveries the gate would let through now (0: all held)."""
        cluster = view.info.name
        policy = self.config().cluster_policy(cluster)
        return recoveries_possible(
            due, view.records, view.groups, policy, self.safety(view.info), self.clock(), check_active
        )

    def progress(self, view: ClusterView) -> str | None:
        """What a round started now would do (None: nothing, so none is started)."""
        cluster = view.info.name
        return progress_possible(
            view.records, view.groups, self.config().cluster_policy(cluster), self.safety(view.info), self.clock()
        )

    def safety(self, info: ClusterInfo) -> SafetyState:
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

    def orphaned_before(self, meta: RoundMeta) -> int:
        """Rounds before this sequence number have ended: the current one too if its lease expired (it died)."""
        expired = meta.holder is not None and meta.lease_expires_at <= self.clock()
        return meta.seq + 1 if expired else meta.seq

    def start_round(self, cluster: str) -> str | None:
        """Make sure a round of `cluster` runs (the starter starts one unless one is live); returns the round
        holding the cluster's lease, if it has not expired (`live_round`, on the round item the start read)."""
        if self.starter is None:
            return self.live_round(cluster)
        name, meta = self.starter.ensure_round(cluster)
        logger.info("round ensured", extra={"cluster": cluster, "round_id": name})
        return _live(meta, self.clock())

    def renew(self, state: RoundState) -> float:
        """Extend the round's lease (LeaseLost if another round holds it now); returns the time of the renewal."""
        return self.renewed(state)[0]

    def renewed(self, state: RoundState) -> tuple[float, RoundMeta]:
        """`renew`, with the round item as the renewal wrote it."""
        now = self.clock()
        meta = self.table.acquire_lease(state.cluster, state.round_seq, state.round_id, now, LEASE_TTL_S)
        if meta is None:
            raise LeaseLost(f"{state.round_id} no longer holds the lease of {state.cluster}")
        return now, meta

    def live_round(self, cluster: str) -> str | None:
        """The round holding the cluster's lease, if its lease has not expired."""
        return _live(self.table.round_meta(cluster), self.clock())

    def cluster_names(self) -> list[str]:
        """The clusters operators see: those configured, or every registered one when all are watched."""
        config = self.config()
        return sorted(set(config.clusters) if config.clusters != "all" else set(self.table.registered_clusters()))

    def known_cluster(self, cluster: str, registration: Registration | None = None) -> None:
        """ClusterNotFound unless operators may see `cluster` (one of `cluster_names`). With every cluster watched,
        its registry item says it (`registration`: as the caller just read it), not a read of the whole registry."""
        config = self.config()
        if config.clusters != "all":
            known = cluster in config.clusters
        else:
            known = (registration or self.table.registration(cluster)).registered
        if not known:
            raise ClusterNotFound(f"cluster {cluster} is not watched by this controller")

    def shown(self, cluster: str) -> ClusterView:
        """What operators see of a cluster: its current records (not those of an earlier cluster of the same
        name). A cluster HyperPod no longer knows, or no longer as a Slurm cluster (ClusterNotSlurm is a
        ClusterNotFound), shows every record it left; the status in its view is a placeholder no route returns."""
        try:
            return self.view(cluster)
        except ClusterNotFound:
            return ClusterView(ClusterInfo(cluster, "", "", "Deleted", ""), {}, self.table.load_cluster(cluster))


def _live(meta: RoundMeta, now: float) -> str | None:
    """The round holding the lease in `meta`, if the lease has not expired by `now`."""
    return meta.holder if meta.holder and meta.lease_expires_at > now else None
