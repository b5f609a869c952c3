"""A scenario's incidents: one-off events injected at the worst moment, to prove the controller recovers.

Each incident is armed with `Harness.when`: it fires once, at the first time step after `after_s` where its
condition holds (a check running, a round live, a node due for recovery...). Conditions read the simulation
and the controller's table from outside any Lambda, so they are never faulted and cost the controller nothing.
An incident whose condition never held is reported as not fired: the scenario did not exercise it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.fakes.hyperpod import GroupSpec, Node
from tests.harness.engine import SCHEDULED_EVENT, TABLE_NAME
from tests.twin.faults import CrashPlan
from tests.twin.scenario import (
    ClusterDeletedMidRound,
    EksClusterCreated,
    ForeignCheck,
    HyperPodReplacesMidCheck,
    Incident,
    LambdaCrash,
    LeaseExpiry,
    MoveNodes,
    RedeployMidRound,
)

if TYPE_CHECKING:
    from tests.twin.simulation import Twin

IN_CHECK = "DeepHealthCheckInProgress"


@dataclass
class Armed:
    spec: Incident
    fired_at_s: float | None = None  # virtual seconds from the start
    detail: dict[str, Any] = field(default_factory=dict)  # what it did (nodes, round...)
    crash: CrashPlan | None = None  # lambda-crash: its plan, for the crash times
    late: Callable[[], dict[str, Any]] | None = None  # what only the end of the run knows (move-nodes: rechecked)

    def report(self, started_at: float) -> dict[str, Any]:
        out = {"kind": self.spec.kind, "fired": self.fired_at_s is not None, "at_s": self.fired_at_s, **self.detail}
        if self.late is not None and self.fired_at_s is not None:
            out.update(self.late())
        if self.crash is not None:
            out["crashes"] = [{"at_s": round(t - started_at, 1), "writes": w} for t, w in self.crash.crashes]
        return out


def arm(twin: Twin, spec: Incident) -> Armed:
    armed = Armed(spec)
    condition, action = _KINDS[type(spec)](twin, spec, armed)
    due = twin.started_at + spec.after_s

    def fire() -> None:
        armed.fired_at_s = round(twin.clock.now() - twin.started_at, 1)
        action()

    twin.when(lambda: twin.clock.now() >= due and condition(), fire)
    return armed


Plan = tuple[Callable[[], bool], Callable[[], None]]  # (condition, action)


def _in_check(twin: Twin) -> list[Node]:
    """Nodes of the controller's active check that HyperPod shows in the check (seq order: reproducible)."""
    c = twin.cluster_model
    check = c.check
    if check is None or c.status != "InService" or any(check is f for f in twin.sim.foreign_checks):
        return []
    nodes = [c.nodes[lid] for lid in check.pending if lid in c.nodes]
    return sorted((n for n in nodes if n.status == IN_CHECK), key=lambda n: n.seq)


def _round_key(twin: Twin) -> dict[str, str]:
    from hyperpod_dhc.deephealth.adapters.table_keys import ROUND_SK, cluster_pk

    return {"pk": cluster_pk(twin.scenario.cluster.name), "sk": ROUND_SK}


def _hyperpod_replaces(twin: Twin, spec: HyperPodReplacesMidCheck, armed: Armed) -> Plan:
    def act() -> None:
        chosen = _in_check(twin)[: spec.nodes]
        armed.detail["nodes"] = [n.logical_id for n in chosen]
        for n in chosen:
            twin.sim.replace_now(twin.cluster_model.name, n.logical_id)

    return lambda: bool(_in_check(twin)), act


def _cluster_deleted(twin: Twin, spec: ClusterDeletedMidRound, armed: Armed) -> Plan:
    def act() -> None:
        armed.detail["nodes_in_check"] = len(_in_check(twin))
        twin.sim.delete_cluster(twin.cluster_model.name)

    return lambda: bool(_in_check(twin)) and bool(twin.running()), act


def _lambda_crash(twin: Twin, spec: LambdaCrash, armed: Armed) -> Plan:
    plan = twin.crashes[twin.function_name(spec.function)]

    def condition() -> bool:
        if spec.function == "RecoverNodes":  # a moment when the step has, or is about to have, something to do
            # A poll that decides a failure runs Recover decided nodes in the same step: arm while verdicts settle.
            records = twin.records(twin.scenario.cluster.name).values()
            return any(
                r.state.value == "recovery_due" or (r.state.value == "checking" and r.check_left_at is not None)
                for r in records
            )
        if spec.function == "PollCheck":  # mid-check, when a poll has something to record
            return bool(_in_check(twin))
        return True

    def act() -> None:
        plan.armed = True
        armed.detail["function"] = plan.function

    armed.crash = plan
    return condition, act


def _redeploy(twin: Twin, spec: RedeployMidRound, armed: Armed) -> Plan:
    def act() -> None:
        armed.detail["rounds_running"] = [e["name"] for e in twin.running()]
        armed.detail["warm_handlers"] = len(twin.redeploy())

    return lambda: bool(_in_check(twin)) and bool(twin.running()), act


def _lease_expiry(twin: Twin, spec: LeaseExpiry, armed: Armed) -> Plan:
    import boto3

    table = boto3.resource("dynamodb").Table(TABLE_NAME)  # the harness's own client: never faulted

    def holder() -> str | None:
        return (table.get_item(Key=_round_key(twin), ConsistentRead=True).get("Item") or {}).get("holder")

    def act() -> None:
        armed.detail["round"] = holder()
        table.update_item(
            Key=_round_key(twin),
            UpdateExpression="SET lease_expires_at = :past",
            ExpressionAttributeValues={":past": int(twin.clock.now()) - 1},
        )
        twin.invoke_event(twin.reconcile_arn, SCHEDULED_EVENT)  # the next scheduled pass finds it expired

    return lambda: bool(twin.running()) and bool(holder()), act


def _foreign_check(twin: Twin, spec: ForeignCheck, armed: Armed) -> Plan:
    def candidates() -> list[Node]:
        """Running nodes of the group, those the controller already passed first (an operator re-checking
        them), so that the controller's nodes waiting for a check must wait for the foreign operation to end
        (it asks ListClusterOperations first) rather than join it."""
        c = twin.cluster_model
        in_check = c.check.pending if c.check is not None else set()
        running = sorted(
            (
                n
                for n in c.nodes.values()
                if n.group == spec.group and n.status == "Running" and not n.in_flight and n.logical_id not in in_check
            ),
            key=lambda n: n.seq,
        )
        passed = {k for k, r in twin.records(c.name).items() if r.state.value == "passed"}
        return sorted(running, key=lambda n: n.logical_id not in passed)

    def condition() -> bool:
        c = twin.cluster_model
        if spec.during == "ours":  # the controller's check runs, with members in it
            return bool(_in_check(twin)) and bool(candidates())
        return c.check is None and c.status == "InService" and bool(candidates())

    def act() -> None:
        chosen = [n.logical_id for n in candidates()[: spec.nodes]]
        if spec.during == "ours":
            armed.detail["ours"] = [n.logical_id for n in _in_check(twin)]
        armed.detail["nodes"] = chosen
        armed.detail["outcome"] = twin.sim.start_foreign_check(twin.cluster_model.name, spec.group, chosen)

    return condition, act


def _move_nodes(twin: Twin, spec: MoveNodes, armed: Armed) -> Plan:
    def candidates() -> list[Node]:
        """Running nodes of from_group outside any check and any action, those the controller passed first (a
        passed node moved into another group is the one the controller must not take for checked)."""
        c = twin.cluster_model
        in_check = c.check.pending if c.check is not None else set()
        running = sorted(
            (
                n
                for n in c.nodes.values()
                if n.group == spec.from_group
                and n.status == "Running"
                and not n.in_flight
                and n.logical_id not in in_check
            ),
            key=lambda n: n.seq,
        )
        passed = {k for k, r in twin.records(c.name).items() if r.state.value == "passed"}
        return sorted(running, key=lambda n: n.logical_id not in passed)

    def condition() -> bool:
        return twin.cluster_model.status == "InService" and len(candidates()) >= spec.nodes

    moved: dict[str, str] = {}  # logical id -> its instance id when moved

    def act() -> None:
        chosen = candidates()[: spec.nodes]
        moved.update({n.logical_id: n.instance_id for n in chosen})
        armed.detail["nodes"] = [n.logical_id for n in chosen]
        armed.detail["from_group"], armed.detail["to_group"] = spec.from_group, spec.to_group
        twin.sim.move_nodes(twin.cluster_model.name, [n.logical_id for n in chosen], spec.to_group)

    def rechecked() -> dict[str, Any]:
        """Moved nodes with a check outcome (on-demand or on-start) on their instance after the move."""
        at = twin.started_at + (armed.fired_at_s or 0.0)
        ok = [lid for lid, iid in moved.items() if any(t > at for t in twin.sim.tested.get(iid, ()))]
        return {"rechecked": len(ok), "not_rechecked": sorted(set(moved) - set(ok))}

    armed.late = rechecked
    return condition, act


ACTIONS = ("StartClusterHealthCheck", "BatchRebootClusterNodes", "BatchReplaceClusterNodes")


def _eks_cluster_created(twin: Twin, spec: EksClusterCreated, armed: Armed) -> Plan:
    name = f"{twin.scenario.cluster.name}-eks"

    def act() -> None:
        created = twin.sim.create_cluster(name, [GroupSpec("eks-workers")], orchestrator="Eks")
        armed.detail["cluster"], armed.detail["arn"] = name, created.arn
        armed.detail["nodes"] = [twin.sim.add_node(name, "eks-workers") for _ in range(spec.nodes)]

    def outcome() -> dict[str, Any]:
        """The SageMaker actions asked of the EKS cluster, and the alerts that name it."""
        refs = (name, armed.detail["arn"])
        actions = [op for _, op, params in twin.sim.requests if op in ACTIONS and params.get("ClusterName") in refs]
        alerts = [
            n for n in twin.notifications()
            if n["attributes"].get("kind") == "cluster-not-slurm" and n["attributes"].get("cluster") == name
        ]  # fmt: skip
        return {"actions": len(actions), "alerts": len(alerts)}

    armed.late = outcome
    return lambda: True, act


_KINDS: dict[type, Callable[[Twin, Any, Armed], Plan]] = {
    HyperPodReplacesMidCheck: _hyperpod_replaces,
    ClusterDeletedMidRound: _cluster_deleted,
    LambdaCrash: _lambda_crash,
    RedeployMidRound: _redeploy,
    LeaseExpiry: _lease_expiry,
    ForeignCheck: _foreign_check,
    MoveNodes: _move_nodes,
    EksClusterCreated: _eks_cluster_created,
}
