"""The Slurm bridge in the twin: the real agent's `sync_once` (functions/hyperpod_dhc/hpdhc/bridge.py) against the
twin's Slurm.

`TwinSlurm` is the agent's `Slurm` over the twin's workload: a node is in Slurm while its slurmd is up (`Running`,
or in a check), named by its short private hostname, in the partition named after its instance group; a drain
is `Workload.drain` (no new job). A replaced node comes back as a new instance, a new Slurm node, undrained, as a
HyperPod replacement registers. `TwinController` is the agent's `Controller` through the real Api function, as
API Gateway would invoke it for the cluster's instance role (the route's resource policy applies).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hyperpod_dhc.hpdhc.document import Memory
from hyperpod_dhc.hpdhc.gate import boot_changes
from hyperpod_dhc.hpdhc.scontrol import Lock, SlurmError, SlurmNode, lock_name
from hyperpod_dhc.hpdhc.sync import sync_once
from tests.fakes.checks import IN_CHECK
from tests.harness.api_gateway import proxy_event, refusal
from tests.twin.scenario import CONTROLLER_GROUP

if TYPE_CHECKING:
    from tests.twin.simulation import Twin

SLURMD_UP = frozenset({"Running", IN_CHECK})  # slurmd answers: the node is in Slurm (jobs keep running in a check)
# The principal the agent signs with: the cluster's instance role (it carries SlurmBridgePolicy).
BRIDGE_PRINCIPAL = "arn:aws:sts::123456789012:assumed-role/hyperpod-cluster-execution-role/i-0controller0000000"


class TwinSlurm:
    """The agent's view of Slurm, and its `scontrol update`, over the twin's workload."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.reasons: dict[str, str] = {}  # instance id -> reason of the drain the agent set
        self.drained_instance: dict[str, str] = {}  # logical id -> the instance the agent drained
        self.features: dict[str, tuple[str, ...]] = {}  # instance id -> ActiveFeatures
        self.available: dict[str, tuple[str, ...]] = {}  # instance id -> AvailableFeatures
        self.gated = 0  # nodes `gate node-boot` drained before their slurmd started
        self.updates = 0  # scontrol updates applied
        self.locked: dict[str, str] = {}  # Slurm name -> the instance the lock holds (a replacement is a new node)
        self.lock_name: str | None = None  # the reservation, once created
        self.lock_writes = 0
        self._seen: dict[str, Any] = {}  # Slurm name -> fake node, as the last `nodes()` found them

    def _nodes(self) -> dict[str, Any]:
        sim, cluster = self.twin.sim, self.twin.cluster_model
        out = {}
        for n in cluster.nodes.values():
            if n.group == CONTROLLER_GROUP or n.status not in SLURMD_UP or not n.private_ip or not n.instance_id:
                continue
            out[sim._hostname(n.private_ip).split(".", 1)[0]] = n
        return out

    def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
        if names:  # a re-read right before a RESUME, at the same instant as the pass's read
            return {k: v for k, v in self.nodes(lock=lock).items() if k in names}
        sim, now = self.twin.sim, self.twin.clock.now()
        listed = {}
        self._seen = self._nodes()  # the pass's updates follow at the same instant: one scan of the cluster
        for name, n in self._seen.items():
            drained = n.logical_id in sim.drained
            if drained and self.drained_instance.get(n.logical_id, n.instance_id) != n.instance_id:
                # A replacement: a new instance registers as a new Slurm node, not drained.
                del self.drained_instance[n.logical_id]
                sim.resume(n.logical_id)
                drained = False
            locked = lock is not None and lock == self.lock_name and self.locked.get(name) == n.instance_id
            listed[name] = self._node(name, n, drained, now, locked)
        return listed

    def lock(self, name: str) -> Lock | None:
        if name != self.lock_name:
            return None
        return Lock(name, frozenset(self.locked))

    def set_lock(self, name: str, nodes: Sequence[str], current: Lock | None) -> None:
        """`scontrol create|update|delete reservation`: the lock holds exactly `nodes` (the workload starts no job on
        them), known Slurm nodes only, as Slurm refuses an unknown name."""
        known = self._seen or self._nodes()
        missing = [node for node in nodes if node not in known]
        if missing:
            raise SlurmError(f"scontrol update ReservationName={name}: Invalid node name specified: {missing[0]}")
        self.locked = {node: known[node].instance_id for node in nodes}
        self.lock_name = name if nodes else None
        self.twin.sim.lock({known[node].logical_id for node in nodes})
        self.lock_writes += 1

    def _node(self, name: str, n: Any, drained: bool, now: float, locked: bool = False) -> SlurmNode:
        busy = n.busy_until > now
        return SlurmNode(
            name=name,
            drained=drained,
            reason=self.reasons.get(n.instance_id, "drained by the twin") if drained else None,
            features=self.features.get(n.instance_id, ()),
            available=self.available.get(n.instance_id),
            partitions=(n.group,),
            busy=busy,
            states=(
                "ALLOCATED" if busy else "IDLE",
                *(("MAINTENANCE", "RESERVED") if locked else ()),
                *(("DRAIN",) if drained else ()),
            ),
            locked=locked,
        )

    def boot(self, n: Any) -> None:
        """`hpdhc gate node-boot` in the node's lifecycle script, before its slurmd starts: the real rule
        (`hyperpod_dhc.hpdhc.gate.boot_changes`) on the node as Slurm has it, applied without the workload's catch-up
        (this runs inside a transition of the fake)."""
        sim = self.twin.sim
        drained = n.logical_id in sim.drained and self.drained_instance.get(n.logical_id) == n.instance_id
        name = sim._hostname(n.private_ip).split(".", 1)[0]
        change = boot_changes(self._node(name, n, drained, self.twin.clock.now()), None)
        if isinstance(change, list):  # locked, then labelled, as node_boot does
            self.lock_name = lock_name(self.twin.scenario.cluster.name)
            self.locked[name] = n.instance_id
            sim.locked.add(n.logical_id)
        if isinstance(change, list) and change:
            fields = dict(a.split("=", 1) for a in change)
            self.reasons[n.instance_id] = fields["Reason"]
            self.drained_instance[n.logical_id] = n.instance_id
            sim.drained.add(n.logical_id)
            self.gated += 1

    def update(self, nodes: Sequence[str], args: list[str]) -> None:
        found: dict[str, Any] = {node: self._seen.get(node) or self._nodes().get(node) for node in nodes}
        missing = [node for node, n in found.items() if n is None]
        if missing:
            raise SlurmError(f"scontrol update NodeName={','.join(missing)}: Invalid node name specified")
        fields = dict(a.split("=", 1) for a in args)
        state = fields.get("State")
        for n in found.values():
            if state == "DRAIN":
                self.reasons[n.instance_id] = fields["Reason"]
                self.drained_instance[n.logical_id] = n.instance_id
                self.twin.sim.drain(n.logical_id)
            elif state == "RESUME":
                self.reasons.pop(n.instance_id, None)
                self.drained_instance.pop(n.logical_id, None)
                self.twin.sim.resume(n.logical_id)
            elif "Reason" in fields:
                self.reasons[n.instance_id] = fields["Reason"]
            if "ActiveFeatures" in fields:
                self.features[n.instance_id] = tuple(f for f in fields["ActiveFeatures"].split(",") if f)
                self.available[n.instance_id] = tuple(f for f in fields["AvailableFeatures"].split(",") if f)
        self.updates += 1


class TwinController:
    """The agent's `Controller`: the two bridge routes, through the real Api function."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin

    def _call(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
        refused = refusal(self.twin.template.template, method, path, BRIDGE_PRINCIPAL)
        if refused is not None:
            raise RuntimeError(f"HTTP {refused[0]}: {refused[1]}")
        arn = self.twin.function_arns[self.twin.template.api_logical_id]
        # `_invoke`, not `invoke`: this runs inside the twin's clock step and must not lift a held run's deadline.
        response = self.twin._invoke(arn, proxy_event(method, path, body, query, BRIDGE_PRINCIPAL))
        if response["statusCode"] != 200:
            raise RuntimeError(f"HTTP {response['statusCode']}: {response.get('body')}")
        return json.loads(response["body"])

    def desired(
        self, cluster: str, since: tuple[float, str] | None = None, status: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Every page, as `hyperpod_dhc.hpdhc.client.OperatorClient.slurm_state` merges them: `status` on every page,
        `fence` the last page's and `holder` only if every page said so."""
        document: dict[str, Any] = {}
        token: str | None = None
        cursor = {} if since is None else {"since": repr(since[0]), "digest": since[1]}
        while True:
            query = {**(status or {}), **({"next_token": token} if token else cursor)}
            page = self._call("GET", f"/clusters/{cluster}/slurm", query=query or None)
            nodes = document.get("nodes", []) + page["nodes"]
            held = bool(page.get("holder")) and (not document or bool(document.get("holder")))
            document = {**page, "nodes": nodes, "holder": held}
            token = page.get("next_token")
            if not token:
                return document

    def report(self, cluster: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
        answer: dict[str, Any] = {}
        for i in range(0, len(nodes), 1000):
            answer = self._call("POST", f"/clusters/{cluster}/slurm/occupancy", {"nodes": nodes[i : i + 1000]})
        return answer


class Bridge:
    """The agent's loop on the twin's clock: one `sync_once` every `sync_interval_s`, at a seeded phase."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.slurm = TwinSlurm(twin)
        self.controller = TwinController(twin)
        self.interval = twin.scenario.workload.sync_interval_s
        self.syncs = 0
        self.failed_syncs = 0
        self.memory = Memory()  # what `--state-dir` keeps: the last applied document
        phase = random.Random(twin.scenario.seed + 11).uniform(0, self.interval)
        self.twin.at(twin.started_at + phase, self._sync)

    def sync(self) -> None:
        """One pass of the agent, as `hpdhc bridge` makes every interval."""
        if self.twin.cluster_model.status != "InService":
            return
        groups = {g.name: g.name for g in self.twin.scenario.groups}  # partition name = group name
        result = sync_once(self.twin.scenario.cluster.name, self.controller, self.slurm, groups, self.memory)
        self.syncs += 1
        self.failed_syncs += bool(result.errors)

    def _sync(self) -> None:
        self.sync()
        self.twin.at(self.twin.clock.now() + self.interval, self._sync)


__all__ = ["BRIDGE_PRINCIPAL", "Bridge", "TwinController", "TwinSlurm"]
