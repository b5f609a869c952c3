"""An in-memory SageMaker HyperPod (Slurm, continuous provisioning) that answers real botocore clients.

moto 5.2.5 implements only a static sliver of HyperPod (nodes are always Running, ids are not ``i-...``,
pagination is broken, StartClusterHealthCheck and the Batch* node actions are missing). This fake owns the
cluster state instead and runs it on a virtual clock, so a test can watch a deep health check move nodes
``Running -> DeepHealthCheckInProgress -> Running`` over hours of virtual time in milliseconds of wall time.

Use it inside ``moto.mock_aws()``::

    clock = Clock()
    fake = FakeHyperPod(clock)
    with mock_aws(), install(fake):
        fake.create_cluster("hp", [GroupSpec("workers", count=4)])
        sm = boto3.client("sagemaker", region_name="us-east-1")
        sm.start_cluster_health_check(...)
        fake.advance(3600)

Shapes follow the botocore 1.44.8 service model. Behaviour AWS does not document is marked ``INFERRED``
where it is decided. Where several readings are plausible, the fake plays the one in ``self.readings``
(``tests/fakes/readings.py``: result log stream, line format and naming, lines per test, the failure and
pass lines, log lag, status after a failed check and whether an isolated node holds the operation open, a
second request, queued status, HyperPod's own recovery, unsupported instance types, launch failures and
whether HyperPod retries out of Failure, vanishing nodes, the creation-time filter, check start delay,
EventBridge metadata, event wording, NCCL peer lines, unlisted agent hostnames, an anonymous NCCL summary);
its defaults are the choices below. The ones a controller can notice:

- ListClusterNodes pages 10 nodes when MaxResults is absent; NextToken is an opaque cursor. Nodes still
  waiting for EC2 (IncludeNodeLogicalIds=true only) show InstanceId "" and Status Pending; ``add_node``
  nodes get their instance id after ``launch_delay_s`` and stay Pending while the lifecycle script runs.
  CreationTimeAfter/Before (and sorting by creation time) use LaunchTime.
- StartClusterHealthCheck rejects bad input with ValidationException (the model lists only
  ResourceNotFound). Nodes not Running at request time are skipped; the others show
  DeepHealthCheckInProgress 30 s after the request. A node busy with a job (``set_busy``, or truth "skip")
  stays Running while the check waits for the job; if the job outlasts 10 min the node is skipped with no
  result line. A second request while one is active is refused with a made-up error text built around the
  doc sentence. Every instance type is checked.
- Each accepted request is one DeepHealthCheck cluster operation (ListClusterOperations /
  DescribeClusterOperation), InProgress until its last node ends, then Done.
- One result line per node and check, in stream ``DeepHealthCheckResults/<instance-id>``, a JSON line that
  does not name the instance, readable at once and before the node's status changes (its ingestionTime is
  the virtual time it was appended). No line per NCCL peer, no anonymous NCCL summary, hostnames as listed.
- A failed on-demand check: NodeRecovery Automatic -> HyperPod replaces (never reboots) the instance at
  once; None -> the node goes back to Running, and its operation does not wait for it. A failed on-start
  check with None leaves the node in Failure. HyperPod retries a node out of Failure by itself.
- Reboot: Pending for ``reboot_duration_s``, no on-start checks afterwards. Replace: ShuttingDown for
  60 s, then a new instance id, Pending, Running ``replace_duration_s`` after the request (then on-start
  checks, if the group has them). Launches never fail and nodes never vanish from listings.
- Batch per-node errors, first match wins: unknown -> InstanceIdNotFound; replace of a Slurm controller
  -> InvalidInstanceStatus; reboot/replace/move in flight -> InstanceIdInUse; DeepHealthCheckInProgress,
  Failed or DeepHealthCheckFailed (unless isolated after a failed check), Pending, ShuttingDown,
  SystemUpdating or no instance yet -> InvalidInstanceStatus. Failure is allowed.
- DescribeClusterNode of an unknown (or replaced) instance id -> ResourceNotFound.
- ``move_nodes`` (MoveClusterNodes, an operator's action): same ids, DetachInProgress 60 s, then the new
  group, AttachInProgress while the lifecycle scripts re-run, then Running (or on-start checks).
- A Deleting cluster still answers Describe/List but refuses checks and node actions; 300 s later it is
  gone. Clusters are visible only to the fake's own region and account.
- The replacement event texts ("Instance replacement started|completed for EC2 Instance <id> in Cluster
  <c> and IG <g>") differ from the events reference's wording; EventBridge delivers EventMetadata populated.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import json
import random
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal
from unittest import mock

from tests.fakes.checks import HealthChecks
from tests.fakes.model import (
    BUSY_STATUSES,
    CHECK_START_DELAY_S,
    CHECK_TYPES,
    DEFAULT_PAGE_SIZE,
    DELETE_S,
    DETACH_S,
    JOB_WAIT_S,
    LIFECYCLE,
    OFF_ENUM_FAILED,
    SHUTDOWN_S,
    ApiError,
    Clock,
    Cluster,
    Cure,
    GroupSpec,
    HealthCheck,
    Node,
    NodeType,
    Outcome,
    SortedIndex,
    _api_event,
    _check_node_ids,
    _iso,
    _ms,
    _paginate,
    _snake,
    _validation,
)
from tests.fakes.readings import Readings

__all__ = [
    "CHECK_START_DELAY_S",
    "CHECK_TYPES",
    "DEFAULT_PAGE_SIZE",
    "JOB_WAIT_S",
    "OPERATIONS",
    "ApiError",
    "Clock",
    "Cluster",
    "Cure",
    "FakeHyperPod",
    "GroupSpec",
    "HealthCheck",
    "Node",
    "NodeType",
    "Outcome",
    "Readings",
    "install",
]

OPERATIONS = (
    "DescribeCluster",
    "ListClusters",
    "DeleteCluster",
    "ListClusterNodes",
    "DescribeClusterNode",
    "StartClusterHealthCheck",
    "BatchRebootClusterNodes",
    "BatchReplaceClusterNodes",
    "ListClusterEvents",
    "DescribeClusterEvent",
    "ListClusterOperations",
    "DescribeClusterOperation",
)


class FakeHyperPod(HealthChecks):
    def __init__(self, clock: Clock, region: str = "us-east-1", account: str = "123456789012", seed: int = 0) -> None:
        self.clock, self.region, self.account = clock, region, account
        self._rng = random.Random(seed)
        # Every draw a reading needs comes from its own stream, so default runs draw exactly as before.
        self._reading_rng = random.Random(seed + 100)
        self.readings: Readings = Readings()  # read at the moment of use: a test or the twin replaces it
        self._clusters: dict[str, Cluster] = {}
        self._timers: list[tuple[float, int, Cluster, Callable[[], None]]] = []
        self._seq = itertools.count()
        # ListClusterNodes pages from a sorted index per cluster and order, which moves the nodes that were added,
        # got a new instance or joined another group (the only changes to a sort key): a listing is O(page).
        self._listing_changes: list[Node] = []  # nodes that came or whose listing sort keys changed, in order
        self._listing_index: dict[tuple[str, str], SortedIndex] = {}
        self._t = clock.now()  # time of the transition being processed; event/log timestamps use it

        self.check_duration_s: dict[str, float] = {
            "InstanceStress": 3600.0,
            "InstanceConnectivity": 600.0,
            "MultiNodeTrainingValidation": 900.0,
        }
        self.reboot_duration_s = 600.0
        self.replace_duration_s = 1800.0  # total, ShuttingDown (60 s) included
        self.launch_delay_s = 60.0  # add_node: seconds before EC2 hands out the instance id

        self.events: list[dict[str, Any]] = []  # EventBridge outbox
        self.calls: collections.Counter[str] = collections.Counter()
        self._ips: dict[str, str] = {}  # private address -> the logical node whose instance has it
        self.requests: list[tuple[float, str, dict[str, Any]]] = []
        self.actions: list[tuple[float, str, str, str]] = []  # (time, reboot|replace, logical id, actor)
        self.started_while_active = 0
        self.rejected_while_active: list[tuple[float, str, list[dict[str, Any]]]] = []
        self.asked_past_held: list[str] = []  # requests sent past an operation only held open (their operation ids)
        self._faults: dict[str, collections.deque[ApiError]] = collections.defaultdict(collections.deque)
        clock.subscribe(self._run_until)

    # ---- test-facing API ---------------------------------------------------------------------------

    def create_cluster(
        self,
        name: str,
        groups: list[GroupSpec],
        node_recovery: Literal["None", "Automatic"] = "None",
        orchestrator: Literal["Slurm", "Eks"] = "Slurm",
    ) -> Cluster:
        self._catch_up()
        if name in self._clusters:
            raise ValueError(f"cluster {name} exists")
        cluster_id = "".join(self._rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))
        c = Cluster(
            name=name,
            cluster_id=cluster_id,
            arn=f"arn:aws:sagemaker:{self.region}:{self.account}:cluster/{cluster_id}",
            groups={g.name: g for g in groups},
            node_recovery=node_recovery,
            creation_time=self._t,
            orchestrator=orchestrator,
        )
        self._clusters[name] = c
        for g in groups:
            for _ in range(g.count):
                self.add_node(name, g.name, status="Running")
        self._emit_state_change(c)
        return c

    def add_node(
        self,
        cluster_name: str,
        group: str,
        status: Literal["Pending", "Running"] = "Pending",
        ready_after_s: float = 600.0,
    ) -> str:
        """A continuous-provisioning arrival. Pending: no instance id for ``launch_delay_s``, then the
        lifecycle script runs until ``ready_after_s``, then on-start checks (if the group has any)."""
        self._catch_up()
        c = self._clusters[cluster_name]
        spec = c.groups[group]
        n = Node(
            logical_id=self._uuid(),
            group=group,
            instance_type=spec.instance_type,
            created=self._t,
            seq=next(self._seq),
            az=f"{self.region}{self._rng.choice('abc')}",
        )
        c.nodes[n.logical_id] = n
        self._listing_changes.append(n)
        if status == "Running":
            self._new_instance(n)
            n.status = "Running"
        else:
            launch = min(self.launch_delay_s, ready_after_s)
            self._at(c, launch, lambda: self._launched(c, n, ready_after_s - launch))
        return n.logical_id

    def set_truth(self, cluster_name: str, logical_id: str, outcome: Outcome, cured_by: Cure = "replace") -> None:
        """Result of the node's next deep health checks. Persists until changed here or by recovery: a reboot
        turns a reboot-curable "fail" into "pass"; a replacement installs the replacement truth."""
        n = self.node(cluster_name, logical_id)
        n.truth, n.cured_by = outcome, cured_by
        self._truth_changed(n)

    def set_truth_replacement(
        self, cluster_name: str, logical_id: str, outcome: Outcome, cured_by: Cure = "replace"
    ) -> None:
        n = self.node(cluster_name, logical_id)
        n.replacement_truth, n.replacement_cured_by = outcome, cured_by

    def set_busy(self, cluster_name: str, logical_id: str, until: float) -> None:
        """A Slurm job holds the node until ``until`` (epoch s): a check requested meanwhile queues behind it
        (decided at request time)."""
        self.node(cluster_name, logical_id).busy_until = until

    def move_nodes(self, cluster_name: str, logical_ids: list[str], to_group: str, attach_s: float = 600.0) -> None:
        """An operator's MoveClusterNodes: each node keeps its instance id and NodeLogicalId, shows
        DetachInProgress for 60 s, joins ``to_group`` and shows AttachInProgress while the lifecycle scripts
        re-run (``attach_s``), then Running (or the target group's on-start checks)."""
        self._catch_up()
        c = self._clusters[cluster_name]
        if to_group not in c.groups:
            raise ValueError(f"no instance group {to_group} in {cluster_name}")
        nodes = [c.nodes[lid] for lid in logical_ids]
        for n in nodes:
            if n.in_flight or not n.instance_id:
                raise ValueError(f"node {n.logical_id} cannot move now ({n.in_flight or 'no instance yet'})")
            if n.instance_type != c.groups[to_group].instance_type:  # [MODEL] NodeInstanceTypeMismatch
                raise ValueError(f"node {n.logical_id} is a {n.instance_type}, group {to_group} is not")
        for n in nodes:
            self._detach(c, n, to_group, attach_s)

    def replace_now(self, cluster_name: str, logical_id: str) -> None:
        """HyperPod replaces the node on its own right now (e.g. its health agent found a fault mid-check)."""
        self._catch_up()
        c = self._clusters[cluster_name]
        n = c.nodes[logical_id]
        self._release_hold(c, n)  # isolated_holds_operation: its check was over (failed)
        if c.check is not None and logical_id in c.check.pending:
            self._check_finished(c, c.check, n, "replaced")
        self._replace(c, n, "hyperpod")

    def delete_cluster(self, name: str) -> None:
        self._catch_up()
        self._delete(self._clusters[name])

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)  # the clock listener runs every due transition in order

    def node(self, cluster_name: str, logical_id: str) -> Node:
        self._catch_up()
        return self._clusters[cluster_name].nodes[logical_id]

    def cluster(self, name: str) -> Cluster:
        self._catch_up()
        return self._clusters[name]

    def cluster_arn(self, ref: str) -> str | None:
        """The ARN (``cluster/<id>``) of the cluster named ``ref``, if it exists; no time passes (safe inside
        any request, e.g. to authorize it)."""
        c = self._clusters.get(ref)
        return c.arn if c is not None else None

    def drain_events(self) -> list[dict[str, Any]]:
        self._catch_up()
        out, self.events = self.events, []
        return out

    def inject_error(
        self,
        operation: str,
        code: str = "ThrottlingException",
        status: int = 400,
        times: int = 1,
        message: str | None = None,
    ) -> None:
        """The next ``times`` calls of ``operation`` fail before reaching any logic (counted in ``calls``).
        Note botocore retries throttling and 5xx by itself, and every attempt counts as one call."""
        for _ in range(times):
            self._faults[operation].append(ApiError(code, message or f"{code} (injected)", status))

    # ---- the API boundary -------------------------------------------------------------------------

    def handle(self, operation: str, params: dict[str, Any], region: str, account: str) -> tuple[int, dict]:
        """One request as it arrives at the service: (HTTP status, JSON body)."""
        self._catch_up()
        self.calls[operation] += 1
        self.requests.append((self._t, operation, params))
        try:
            if self._faults[operation]:
                raise self._faults[operation].popleft()
            handler = getattr(self, "_op_" + _snake(operation))
            return 200, handler(params, region == self.region and account == self.account)
        except ApiError as e:
            return e.status, {"__type": e.code, "message": e.message}

    def _cluster(self, params: dict[str, Any], visible: bool) -> Cluster:
        ref = params.get("ClusterName", "")
        if visible:
            for c in self._clusters.values():
                if ref in (c.name, c.arn):
                    return c
        raise ApiError("ResourceNotFound", f"Cluster {ref} not found.")

    def _mutable(self, params: dict[str, Any], visible: bool) -> Cluster:
        c = self._cluster(params, visible)
        if c.status != "InService":  # INFERRED: a Deleting cluster refuses node operations
            raise _validation(f"Cluster {c.name} is in {c.status} status.")
        return c

    def _op_describe_cluster(self, p: dict[str, Any], visible: bool) -> dict:
        return self._describe(self._cluster(p, visible), time=float)

    def _op_list_clusters(self, p: dict[str, Any], visible: bool) -> dict:
        clusters = [c for c in self._clusters.values() if visible and p.get("NameContains", "") in c.name]
        by_name = p.get("SortBy") == "NAME"
        key = (lambda c: [c.name]) if by_name else (lambda c: [c.creation_time, c.name])
        page, token = _paginate(clusters, key, p, descending=p.get("SortOrder") == "Descending")
        summaries = [
            {
                "ClusterArn": c.arn,
                "ClusterName": c.name,
                "CreationTime": c.creation_time,
                "ClusterStatus": c.status,
            }
            for c in page
        ]
        return {"ClusterSummaries": summaries, **token}

    def _op_delete_cluster(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._cluster(p, visible)
        if c.status != "Deleting":
            self._delete(c)
        return {"ClusterArn": c.arn}

    def _op_list_cluster_nodes(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._cluster(p, visible)
        with_logical = bool(p.get("IncludeNodeLogicalIds", False))
        # INFERRED (reading creation_time_filter): "creation time" is the LaunchTime the summaries show (a
        # replacement is a new instance and moves to the end), or the logical node's creation; nodes have no
        # name, so NAME orders by group, then instance id.
        logical = self.readings.creation_time_filter == "logical"

        def created(n: Node) -> float:
            return n.created if logical else n.launched

        contains = p.get("InstanceGroupNameContains", "")

        def keep(n: Node) -> bool:
            return (
                bool(with_logical or n.instance_id)
                and contains in n.group
                and self._listed(n)
                and ("CreationTimeAfter" not in p or created(n) > p["CreationTimeAfter"])
                and ("CreationTimeBefore" not in p or created(n) < p["CreationTimeBefore"])
            )

        by_name = p.get("SortBy") == "NAME"
        key = (lambda n: [n.group, n.instance_id, n.seq]) if by_name else (lambda n: [created(n), n.seq])
        order = "name" if by_name else "created" if logical else "launched"
        index, changes = self._listing_index.get((c.arn, order)), self._listing_changes
        if index is None:
            index = self._listing_index[(c.arn, order)] = SortedIndex.of(len(changes), c.nodes.values(), key)
        elif index.seen < len(changes):
            index.moved(len(changes), [n for n in changes[index.seen :] if c.nodes.get(n.logical_id) is n], key)
        # By creation: only the window's part of the index is walked (`keep` admits nothing outside it).
        above, below = (None, None) if by_name else (p.get("CreationTimeAfter"), p.get("CreationTimeBefore"))
        page, token = index.page(keep, p, descending=p.get("SortOrder") == "Descending", above=above, below=below)
        summaries = []
        for n in page:
            s = {
                "InstanceGroupName": n.group,
                "InstanceId": n.instance_id,  # INFERRED: "" for a node still being provisioned
                "InstanceType": n.instance_type,
                "LaunchTime": n.launched,
                "InstanceStatus": {"Status": n.status, "Message": ""},
            }
            if with_logical:
                s["NodeLogicalId"] = n.logical_id
            if n.private_ip:
                s["PrivateDnsHostname"] = self._hostname(n.private_ip)
            summaries.append(s)
        return {"ClusterNodeSummaries": summaries, **token}

    def _op_describe_cluster_node(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._cluster(p, visible)
        node_id, logical_id = p.get("NodeId"), p.get("NodeLogicalId")
        if bool(node_id) == bool(logical_id):
            raise _validation("You must specify either NodeId or NodeLogicalId, but not both.")
        if node_id:
            _check_node_ids([node_id], "nodeId")
            n = c.by_instance(node_id)
        else:
            n = c.nodes.get(logical_id or "")
        if n is None or not self._listed(n):
            raise ApiError("ResourceNotFound", f"Node {node_id or logical_id} not found in cluster {c.name}.")
        d: dict[str, Any] = {
            "InstanceGroupName": n.group,
            "InstanceId": n.instance_id,
            "NodeLogicalId": n.logical_id,
            "InstanceStatus": {"Status": n.status, "Message": ""},
            "InstanceType": n.instance_type,
            "LaunchTime": n.launched,
            "LifeCycleConfig": dict(LIFECYCLE),
            "ThreadsPerCore": 1,
            "Placement": {"AvailabilityZone": n.az},
        }
        if n.private_ip:
            d.update(PrivatePrimaryIp=n.private_ip, PrivateDnsHostname=self._hostname(n.private_ip))
        return {"NodeDetails": d}

    def _op_batch_reboot_cluster_nodes(self, p: dict[str, Any], visible: bool) -> dict:
        return self._batch(p, visible, "reboot")

    def _op_batch_replace_cluster_nodes(self, p: dict[str, Any], visible: bool) -> dict:
        return self._batch(p, visible, "replace")

    def _op_list_cluster_events(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._cluster(p, visible)
        events = c.events
        for param, fld in (
            ("InstanceGroupName", "InstanceGroupName"),
            ("NodeId", "InstanceId"),
            ("ResourceType", "ResourceType"),
        ):
            if param in p:
                events = [e for e in events if e.get(fld) == p[param]]
        if "EventTimeAfter" in p:
            events = [e for e in events if e["EventTime"] > _ms(p["EventTimeAfter"])]
        if "EventTimeBefore" in p:
            events = [e for e in events if e["EventTime"] < _ms(p["EventTimeBefore"])]
        # the model documents Descending as the default order for events
        page, token = _paginate(
            events,
            lambda e: [e["EventTime"], e["_seq"]],
            p,
            descending=p.get("SortOrder", "Descending") == "Descending",
        )
        summaries = [{k: v for k, v in _api_event(e).items() if k != "EventDetails"} for e in page]
        return {"Events": summaries, **token}

    def _op_describe_cluster_event(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._cluster(p, visible)
        e = next((e for e in c.events if e["EventId"] == p.get("EventId")), None)
        if e is None:
            raise ApiError("ResourceNotFound", f"Event {p.get('EventId')} not found.")
        return {"EventDetails": _api_event(e)}

    # ---- node actions -----------------------------------------------------------------------------

    def _batch(self, p: dict[str, Any], visible: bool, action: Literal["reboot", "replace"]) -> dict:
        c = self._mutable(p, visible)
        node_ids, logical_ids = p.get("NodeIds"), p.get("NodeLogicalIds")
        if not node_ids and not logical_ids:
            raise _validation("Either NodeIds or NodeLogicalIds must be provided.")
        for name, ids in (("nodeIds", node_ids), ("nodeLogicalIds", logical_ids)):
            if ids is not None and not 1 <= len(ids) <= 25:
                raise _validation(
                    f"1 validation error detected: Value at '{name}' failed to satisfy "
                    "constraint: Member must have length less than or equal to 25"
                )
        _check_node_ids(node_ids or [], "nodeIds")
        out: dict[str, Any] = {"Successful": [], "Failed": []}
        for iid in node_ids or []:
            if err := self._try_action(c, c.by_instance(iid), action, iid):
                out["Failed"].append({"NodeId": iid, **err})
            else:
                out["Successful"].append(iid)
        if logical_ids:  # [MODEL] the logical-id lists are only present when NodeLogicalIds were sent
            out["SuccessfulNodeLogicalIds"], out["FailedNodeLogicalIds"] = [], []
            for lid in logical_ids:
                if err := self._try_action(c, c.nodes.get(lid), action, lid):
                    out["FailedNodeLogicalIds"].append({"NodeLogicalId": lid, **err})
                else:
                    out["SuccessfulNodeLogicalIds"].append(lid)
        return out

    def _try_action(self, c: Cluster, n: Node | None, action: str, ref: str) -> dict[str, str] | None:
        """Start ``action`` on ``n`` for the controller, or return the per-node error entry."""
        noun = "replacement" if action == "replace" else "rebooting"
        if n is None or not self._listed(n):
            return {"ErrorCode": "InstanceIdNotFound", "Message": f"Node {ref} not found in {c.name}."}
        if action == "replace" and c.groups[n.group].node_type == "Controller":
            return {
                "ErrorCode": "InvalidInstanceStatus",
                "Message": "Slurm controller nodes cannot be replaced.",
            }
        if n.in_flight:
            return {
                "ErrorCode": "InstanceIdInUse",
                "Message": f"Another operation ({n.in_flight}) is already in progress for this node.",
            }
        if (n.status in BUSY_STATUSES | OFF_ENUM_FAILED and not n.isolated) or not n.instance_id:
            return {
                "ErrorCode": "InvalidInstanceStatus",
                "Message": f"Node is in {n.status} status, which does not allow {noun}. Wait for the "
                "instance to finish any ongoing changes before retrying.",
            }
        self._release_hold(c, n)  # before the action: an observer sees the check's outcome, then the action
        if action == "reboot":
            self._reboot(c, n, "controller")
        else:
            self._replace(c, n, "controller")
        return None

    def _reboot(self, c: Cluster, n: Node, actor: str, duration: float | None = None) -> None:
        self._release_hold(c, n)  # isolated_holds_operation: the node leaves its (failed) check
        self.actions.append((self._t, "reboot", n.logical_id, actor))
        n.in_flight, n.status = "reboot", "Pending"
        n.isolated, n.retry_due = False, None  # an action ends the isolation and pre-empts HyperPod's retry
        self._instance_event(c, n, f"Reboot of EC2 Instance {n.instance_id} is currently in progress")
        self._at(c, self.reboot_duration_s if duration is None else duration, lambda: self._rebooted(n))

    def _rebooted(self, n: Node) -> None:
        n.in_flight, n.status = None, "Running"  # INFERRED: a reboot does not re-run on-start checks
        if n.truth == "fail" and n.cured_by == "reboot":
            n.truth = "pass"
            self._truth_changed(n)

    def _replace(self, c: Cluster, n: Node, actor: str) -> None:
        self._release_hold(c, n)
        self.actions.append((self._t, "replace", n.logical_id, actor))
        n.in_flight, n.status = "replace", "ShuttingDown"
        n.isolated, n.retry_due = False, None
        if self.readings.event_wording == "reference":
            text = (
                f"Instance {n.instance_id} is starting as part of instance replacement "
                f"in Cluster {c.name} and IG {n.group}"
            )
        else:
            text = f"Instance replacement started for EC2 Instance {n.instance_id} in Cluster {c.name} and IG {n.group}"
        self._instance_event(c, n, text)
        lcs_s = max(self.replace_duration_s - SHUTDOWN_S, 0.0)
        self._at(c, min(SHUTDOWN_S, self.replace_duration_s), lambda: self._launched(c, n, lcs_s))

    # ---- provisioning -----------------------------------------------------------------------------

    def _truth_changed(self, n: Node) -> None:
        """Hook: ``n.truth`` or ``n.instance_id`` just changed (the twin keeps per-instance truth history)."""

    def _new_instance(self, n: Node) -> None:
        n.instance_id = "i-" + "".join(self._rng.choice("0123456789abcdef") for _ in range(17))
        n.instance_ids.append(n.instance_id)
        n.launch_time = self._t
        self._listing_changes.append(n)  # its sort keys (LaunchTime, instance id) changed
        # A VPC never gives two running instances one address: a drawn address in use goes to the next free one
        # (an address freed by a replaced instance may be given again, as EC2 does).
        if self._ips.get(n.private_ip) == n.logical_id:
            del self._ips[n.private_ip]
        drawn = self._rng.randrange(256) * 254 + self._rng.randrange(1, 255) - 1
        for step in range(256 * 254):
            third, fourth = divmod((drawn + step) % (256 * 254), 254)
            ip = f"10.1.{third}.{fourth + 1}"
            if ip not in self._ips:
                break
        n.private_ip, self._ips[ip] = ip, n.logical_id
        self._truth_changed(n)

    def _launched(self, c: Cluster, n: Node, lcs_s: float, retry: bool = False) -> None:
        """EC2 handed out a (new) instance for ``n``; its lifecycle script now runs for ``lcs_s``. ``retry``:
        HyperPod's retry after a launch that failed (not a hardware fault: the truth stays)."""
        if n.instance_id and not retry:  # a replacement: the new hardware brings its own truth
            n.truth, n.cured_by = n.replacement_truth, n.replacement_cured_by
            n.replacement_truth, n.replacement_cured_by = "pass", "replace"
        self._new_instance(n)
        rate = self.readings.transient_failure_rate
        if rate > 0 and self._reading_rng.random() < rate:  # not recorded in self.actions: no _replace
            self._fail_then_retry(c, n, lambda: self._launched(c, n, lcs_s, retry=True))
            return
        n.status = "Pending"
        self._instance_event(
            c,
            n,
            f"EC2 Instance {n.instance_id} successfully provisioned in Cluster {c.name} and IG {n.group}",
        )
        self._lcs_event(c, n, "Started")
        self._at(c, lcs_s, lambda: self._lcs_done(c, n))

    def _lcs_done(self, c: Cluster, n: Node) -> None:
        self._lcs_event(c, n, "Succeeded")
        if n.in_flight == "replace":
            n.in_flight = None
            self._instance_event(c, n, self._replacement_completed(c, n))
        checks = c.groups[n.group].on_start_checks
        if not checks:
            n.status = "Running"
            return
        # On-start checks: a fresh node has no jobs, so truth "skip" is treated as "pass" (INFERRED).
        n.status, n.check_began = "DeepHealthCheckInProgress", self._t
        self._at(c, self._duration(checks), lambda: self._on_start_check_done(c, n))

    def _replacement_completed(self, c: Cluster, n: Node) -> str:
        if self.readings.event_wording == "reference":
            return (
                f"Instance {n.instance_id} replacement completed successfully as part of instance replacement "
                f"in Cluster {c.name} and IG {n.group}"
            )
        return f"Instance replacement completed for EC2 Instance {n.instance_id} in Cluster {c.name} and IG {n.group}"

    def _fail_then_retry(self, c: Cluster, n: Node, retry: Callable[[], None]) -> None:
        """[D-CPE] Failure: HyperPod retries with a new EC2 instance after ``failure_retry_s``; meanwhile the
        node may be missing from listings (``vanish_s`` from now, never past the retry). A reboot or replace
        by someone else first cancels the retry. Under ``failure_retried: false`` nothing follows (both spans
        are still drawn, the hiding is the same): the node stays in Failure until someone reboots or replaces
        it, and a replacement whose launch failed is no longer in flight (else nobody could act on it)."""
        n.status = "Failure"
        wait = self._draw(self.readings.failure_retry_s)
        n.hidden_until = self._t + min(self._draw(self.readings.vanish_s), wait)
        if not self.readings.failure_retried:
            n.retry_due, n.in_flight = None, None
            return
        due = n.retry_due = self._t + wait

        def go() -> None:
            if n.retry_due == due and n.status == "Failure":
                n.retry_due = None
                retry()

        self._at(c, wait, go)

    def _detach(self, c: Cluster, n: Node, to_group: str, attach_s: float) -> None:
        self._release_hold(c, n)  # a move ends the isolation too
        if c.check is not None and n.logical_id in c.check.pending:
            self._check_finished(c, c.check, n, "moved")
        n.in_flight, n.status, n.isolated, n.retry_due = "move", "DetachInProgress", False, None
        self._at(c, DETACH_S, lambda: self._attach(c, n, to_group, attach_s))

    def _attach(self, c: Cluster, n: Node, to_group: str, attach_s: float) -> None:
        n.group, n.status = to_group, "AttachInProgress"  # re-imaged: the target group's scripts run
        self._listing_changes.append(n)  # its NAME sort key (group first) changes
        self._lcs_event(c, n, "Started")
        self._at(c, attach_s, lambda: self._attached(c, n))

    def _attached(self, c: Cluster, n: Node) -> None:
        n.in_flight = None
        self._lcs_done(c, n)  # Succeeded event, then Running or the target group's on-start checks

    def _on_start_check_done(self, c: Cluster, n: Node) -> None:
        checks = c.groups[n.group].on_start_checks  # a node checked on its own: NCCL with no peers
        self._write_result(c, n, passed=n.truth != "fail", checks=checks)
        if self.readings.nccl_summary and "InstanceConnectivity" in checks:
            stream = self._summary_stream(f"{c.arn}/on-start/{n.instance_id}/{_ms(self._t)}")
            self._write_nccl_summary(c, stream, 1, self._t)
        if n.truth != "fail":
            n.status = "Running"
            return
        if c.node_recovery == "Automatic":  # [DOC] the node is replaced and the replacement re-checked
            self._replace(c, n, "hyperpod")
        else:  # INFERRED: nobody acts, the node stays isolated in Failure
            n.status = "Failure"

    # ---- cluster lifecycle, events, time ----------------------------------------------------------

    def _delete(self, c: Cluster) -> None:
        c.status = "Deleting"
        c.deleting_at = self._t
        self._emit_state_change(c)
        self._at(c, DELETE_S, lambda: self._gone(c))

    def _gone(self, c: Cluster) -> None:
        c.gone = True
        del self._clusters[c.name]

    def _describe(self, c: Cluster, time: Callable[[float], float | int]) -> dict[str, Any]:
        """DescribeCluster; ``time`` renders timestamps (epoch s for the API, epoch ms for events)."""
        groups = []
        for g in c.groups.values():
            members = [n for n in c.nodes.values() if n.group == g.name]
            d: dict[str, Any] = {
                "CurrentCount": sum(1 for n in members if n.instance_id),
                "TargetCount": len(members),
                "InstanceGroupName": g.name,
                "InstanceType": g.instance_type,
                "LifeCycleConfig": dict(LIFECYCLE),
                "ExecutionRole": f"arn:aws:iam::{self.account}:role/hyperpod-exec",
                "ThreadsPerCore": 1,
                "Status": "InService",
            }
            if c.orchestrator == "Slurm":
                d["SlurmConfig"] = {"NodeType": g.node_type}
            if g.on_start_checks:
                d["OnStartDeepHealthChecks"] = list(g.on_start_checks)
            groups.append(d)
        return {
            "ClusterArn": c.arn,
            "ClusterName": c.name,
            "ClusterStatus": c.status,
            "CreationTime": time(c.creation_time),
            "FailureMessage": "",
            "InstanceGroups": groups,
            "Orchestrator": (
                {"Slurm": {}}
                if c.orchestrator == "Slurm"
                else {"Eks": {"ClusterArn": f"arn:aws:eks:{self.region}:{self.account}:cluster/{c.name}"}}
            ),
            "NodeRecovery": c.node_recovery,
            "NodeProvisioningMode": "Continuous",
        }

    def _envelope(self, c: Cluster, detail_type: str, detail: dict[str, Any]) -> None:
        self.events.append(
            {
                "version": "0",
                "id": self._uuid(),
                "detail-type": detail_type,
                "source": "aws.sagemaker",
                "account": self.account,
                "time": _iso(self._t),
                "region": self.region,
                "resources": [c.arn],
                "detail": detail,
            }
        )

    def _emit_state_change(self, c: Cluster) -> None:
        self._envelope(c, "SageMaker HyperPod Cluster State Change", self._describe(c, time=_ms))

    def _instance_event(self, c: Cluster, n: Node, description: str, level: str = "Info", **metadata: str) -> None:
        record = {
            "EventId": self._uuid(),
            "ClusterArn": c.arn,
            "ClusterName": c.name,
            "InstanceGroupName": n.group,
            "InstanceId": n.instance_id,
            "ResourceType": "Instance",
            "EventTime": _ms(self._t),
            "EventLevel": level,
            "Description": description,
            "EventDetails": {"EventMetadata": {"Instance": {"NodeLogicalId": n.logical_id, **metadata}}},
        }
        c.events.append({**record, "_seq": next(self._seq)})
        if self.readings.event_metadata == "null":  # ListClusterEvents / DescribeClusterEvent keep it
            record = {**record, "EventDetails": {"EventMetadata": None}}
        self._envelope(c, "SageMaker HyperPod Cluster Event", {"EventDetails": record})

    def _lcs_event(self, c: Cluster, n: Node, state: str) -> None:
        self._instance_event(
            c,
            n,
            f"Instance lifecycle script execution for EC2InstanceId {n.instance_id} has {state}",
            LcsExecutionState=state,
        )

    def _hostname(self, ip: str) -> str:
        domain = "ec2.internal" if self.region == "us-east-1" else f"{self.region}.compute.internal"
        return f"ip-{ip.replace('.', '-')}.{domain}"

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _reading_uuid(self) -> str:
        return str(uuid.UUID(int=self._reading_rng.getrandbits(128), version=4))

    def _draw(self, span: tuple[float, float]) -> float:
        """Uniform in [lo, hi]; a degenerate range draws nothing (so defaults consume no randomness)."""
        lo, hi = span
        return lo if lo == hi else self._reading_rng.uniform(lo, hi)

    def _listed(self, n: Node) -> bool:
        return n.hidden_until <= self._t

    def _at(self, c: Cluster, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (self._t + delay, next(self._seq), c, fn))

    def _run_until(self, now: float) -> None:
        """Run every transition due by ``now`` in time order; transitions may schedule further ones."""
        while self._timers and self._timers[0][0] <= now:
            when, _, c, fn = heapq.heappop(self._timers)
            if c.gone:
                continue
            self._t = max(self._t, when)
            fn()
        self._t = max(self._t, now)

    def _catch_up(self) -> None:
        self._run_until(self.clock.now())


@contextlib.contextmanager
def install(fake: FakeHyperPod) -> Iterator[FakeHyperPod]:
    """Route the HyperPod operations of moto's SageMaker endpoint to ``fake`` (use inside mock_aws()).

    moto's BaseResponse.call_action calls the class method named after the snake_cased action, so
    patching those names on SageMakerResponse is enough; every other SageMaker call still goes to moto."""
    from moto.core.utils import camelcase_to_underscores
    from moto.sagemaker.responses import SageMakerResponse

    def responder(operation: str) -> Callable[[SageMakerResponse], str | tuple[str, dict[str, int]]]:
        def respond(self: SageMakerResponse) -> str | tuple[str, dict[str, int]]:
            params = json.loads(self.body or "{}")
            status, body = fake.handle(operation, params, self.region, self.current_account)
            return json.dumps(body) if status == 200 else (json.dumps(body), {"status": status})

        return respond

    with contextlib.ExitStack() as stack:
        for op in OPERATIONS:
            stack.enter_context(
                mock.patch.object(SageMakerResponse, camelcase_to_underscores(op), responder(op), create=True)
            )
        yield fake
