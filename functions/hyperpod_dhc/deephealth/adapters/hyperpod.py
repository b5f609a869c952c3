"""SageMaker HyperPod control-plane calls, with errors mapped onto the workflow's exception names."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from hyperpod_dhc.deephealth.adapters import aws
from hyperpod_dhc.deephealth.domain.errors import CheckRefused, ClusterBusy, ClusterNotFound, Throttled, TransientError
from hyperpod_dhc.deephealth.domain.listing_windows import ListingWindow
from hyperpod_dhc.deephealth.domain.nodes import Action, NodeSnapshot
from hyperpod_dhc.deephealth.domain.rounds import MAX_NODES_PER_ACTION_CALL, CheckConfiguration, chunks
from hyperpod_dhc.deephealth.observability import MetricUnit, metrics

NOT_FOUND_CODES = frozenset({"ResourceNotFound", "ResourceNotFoundException"})
# Refusals by IAM (a missing grant, an SCP, a permissions boundary), never a verdict on the check request.
NOT_HYPERPODS_REFUSAL = frozenset({"AccessDeniedException", "AccessDenied", "UnauthorizedOperation"})
OPERATIONS_PAGE = 10  # ListClusterOperations MaxResults: one page answers "is one in progress?"
MAX_PAGES = 5  # pages read per question (operations in progress; a node's events since its verdict)
# A refusal that says a check is already running, in any of the words a service uses for it: busy, whatever a
# second look at the operations finds (the operation it met may just have ended).
BUSY_CODES = frozenset({"ConflictException", "ResourceInUse", "ResourceInUseException", "ConcurrentModification"})
BUSY_WORDS = re.compile(
    r"already (?:in progress|running|active)|"
    r"only one\b.{0,60}\b(?:check|request|operation)s?\b.{0,40}\b(?:active|in progress|at a time|running)|"
    r"existing \w+ ?operation|\bbusy\b|concurrent (?:operation|request|check)|another \w+ ?(?:operation|check) is",
    re.IGNORECASE,
)


def says_busy(code: str, message: str) -> bool:
    """The refusal's code or words say a check (or another operation) is already running."""
    return code in BUSY_CODES or BUSY_WORDS.search(message) is not None


@dataclass(frozen=True)
class ActiveCheck:
    """A DeepHealthCheck cluster operation InProgress."""

    operation_id: str
    created_at: float | None  # epoch s


@dataclass(frozen=True)
class GroupInfo:
    name: str
    node_type: str | None  # SlurmConfig.NodeType: Controller | Login | Compute, None when not set
    on_start_checks: tuple[str, ...] = ()
    instance_type: str | None = None

    @property
    def worker(self) -> bool:
        return self.node_type not in ("Controller", "Login")


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    cluster_id: str
    arn: str
    status: str
    node_recovery: str
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    # The keys of DescribeCluster's Orchestrator block: none (clusters made before it existed) or Slurm alone is
    # a Slurm cluster; anything else (Eks, or one this code does not know) is not, an allow-list.
    orchestrators: tuple[str, ...] = ()

    @property
    def slurm(self) -> bool:
        return set(self.orchestrators) <= {"Slurm"}

    @property
    def log_group(self) -> str:
        return f"/aws/sagemaker/Clusters/{self.name}/{self.cluster_id}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterInfo:
        groups = {
            name: GroupInfo(g["name"], g["node_type"], tuple(g["on_start_checks"]), g["instance_type"])
            for name, g in data["groups"].items()
        }
        return cls(
            str(data["name"]),
            str(data["cluster_id"]),
            str(data["arn"]),
            str(data["status"]),
            str(data["node_recovery"]),
            groups=groups,
            orchestrators=tuple(str(o) for o in data.get("orchestrators", ())),
        )


@dataclass(frozen=True)
class ActionOutcome:
    key: str  # the id we sent (logical id or instance id)
    ok: bool
    code: str = ""
    message: str = ""
    # The answer was lost (5xx, timeout, connection): HyperPod may have carried the action out. Such an action is
    # neither sent again nor taken back; what the node does next (down, replaced, or no effect) decides.
    unconfirmed: bool = False


THROTTLED_ATTEMPTS = 3  # a throttled action call was not carried out, so it may be sent again at once


def _raise_mapped(err: aws.ClientError | aws.BotoCoreError) -> NoReturn:
    if isinstance(err, aws.ClientError):
        code, message = _error(err)
        if code in NOT_FOUND_CODES:
            raise ClusterNotFound(message or code) from err
    mapped = aws.transient(err)
    if mapped is None:
        raise err
    if isinstance(mapped, Throttled):
        metrics.add_metric(name="Throttled", unit=MetricUnit.Count, value=1)  # after botocore's own retries
    raise mapped from err


class HyperPod:
    def __init__(self, sagemaker: Any | None = None) -> None:
        self._sm = sagemaker

    @property
    def sm(self) -> Any:
        return self._sm or aws.client("sagemaker")

    def describe_cluster(self, cluster: str) -> ClusterInfo:
        try:
            d = self.sm.describe_cluster(ClusterName=cluster)
        except (aws.ClientError, aws.BotoCoreError) as err:
            _raise_mapped(err)
        groups = {
            g["InstanceGroupName"]: GroupInfo(
                name=g["InstanceGroupName"],
                node_type=(g.get("SlurmConfig") or {}).get("NodeType"),
                on_start_checks=tuple(g.get("OnStartDeepHealthChecks") or ()),
                instance_type=g.get("InstanceType"),
            )
            for g in d.get("InstanceGroups", [])
        }
        arn = d["ClusterArn"]
        return ClusterInfo(
            name=d["ClusterName"],
            cluster_id=arn.rsplit("/", 1)[-1],
            arn=arn,
            status=d.get("ClusterStatus", ""),
            node_recovery=d.get("NodeRecovery", "Automatic"),
            groups=groups,
            orchestrators=tuple(sorted(d.get("Orchestrator") or {})),
        )

    def list_cluster_names(self) -> list[str]:
        try:
            pages = self.sm.get_paginator("list_clusters").paginate()
            return [
                c["ClusterName"]
                for p in pages
                for c in p.get("ClusterSummaries", [])
                if c.get("ClusterStatus") not in ("Deleting", "Failed")
            ]
        except (aws.ClientError, aws.BotoCoreError) as err:
            _raise_mapped(err)

    def list_nodes(self, cluster: str, window: ListingWindow | None = None) -> list[NodeSnapshot]:
        """Every node of the cluster, provisioning ones included, in one paginated pass; with a `window`, only
        the nodes launched within it (and of its group), which is how a round's poll lists just its members."""
        params: dict[str, Any] = {"ClusterName": cluster, "IncludeNodeLogicalIds": True}
        if window is not None:
            # The filters are exclusive; whole seconds either side keep a member on the boundary inside.
            params["CreationTimeAfter"] = _utc(window.launched_after - 1)
            params["CreationTimeBefore"] = _utc(window.launched_before + 1)
            if window.group:
                params["InstanceGroupNameContains"] = window.group
        return self._listing(params)

    def list_nodes_created_after(self, cluster: str, after: float) -> list[NodeSnapshot]:
        """The nodes HyperPod created after `after` (epoch s), provisioning ones included: Reconcile's probe of a
        resting cluster (domain/quiet_sweep.py), usually one page."""
        return self._listing({"ClusterName": cluster, "IncludeNodeLogicalIds": True, "CreationTimeAfter": _utc(after)})

    def _listing(self, params: dict[str, Any]) -> list[NodeSnapshot]:
        try:
            pages = self.sm.get_paginator("list_cluster_nodes").paginate(**params, PaginationConfig={"PageSize": 100})
            return [_snapshot(s) for p in pages for s in p.get("ClusterNodeSummaries", [])]
        except (aws.ClientError, aws.BotoCoreError) as err:
            _raise_mapped(err)

    def describe_node(self, cluster: str, logical_id: str | None, instance_id: str | None) -> NodeSnapshot | None:
        params = {"NodeLogicalId": logical_id} if logical_id else {"NodeId": instance_id}
        try:
            d = self.sm.describe_cluster_node(ClusterName=cluster, **params)["NodeDetails"]
        except aws.ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            # The caller has just described the cluster, so "not found" here is about the node.
            if code in NOT_FOUND_CODES or (code == "ValidationException" and "node" in str(err).lower()):
                return None
            _raise_mapped(err)
        except aws.BotoCoreError as err:
            _raise_mapped(err)
        return _snapshot(d)

    def check_in_progress(self, cluster: str) -> bool:
        """Whether an on-demand deep health check is active on the cluster, by HyperPod's own record of it (a
        DeepHealthCheck cluster operation InProgress), not by what node statuses suggest: a node can stay
        DeepHealthCheckInProgress after its check ended."""
        return self.active_check(cluster) is not None

    def active_check(self, cluster: str) -> ActiveCheck | None:
        """The oldest DeepHealthCheck cluster operation InProgress on the cluster, or None."""
        params: dict[str, Any] = {
            "ClusterName": cluster,
            "Type": "DeepHealthCheck",
            "Status": "InProgress",
            "MaxResults": OPERATIONS_PAGE,
        }
        found: list[ActiveCheck] = []
        try:
            for _ in range(MAX_PAGES):  # a filtered page may come back empty with a token
                page = self.sm.list_cluster_operations(**params)
                found += [
                    ActiveCheck(o.get("OperationId", ""), _epoch(o.get("CreationTime")))
                    for o in page.get("ClusterOperationSummaries", [])
                    if o.get("Status", "InProgress") == "InProgress"
                ]
                if found or not page.get("NextToken"):
                    break
                params["NextToken"] = page["NextToken"]
        except (aws.ClientError, aws.BotoCoreError) as err:
            _raise_mapped(err)
        return min(found, key=lambda a: a.created_at or 0.0) if found else None

    def instance_events_since(self, cluster: str, instance_id: str, since_s: float) -> list[str]:
        """The descriptions of the Instance events HyperPod recorded for `instance_id` after `since_s` (epoch s),
        oldest first; at most MAX_PAGES pages."""
        params: dict[str, Any] = {
            "ClusterName": cluster,
            "NodeId": instance_id,
            "ResourceType": "Instance",
            "EventTimeAfter": _utc(since_s),
            "SortOrder": "Ascending",
        }
        try:
            pages = self.sm.get_paginator("list_cluster_events").paginate(
                **params, PaginationConfig={"PageSize": 100, "MaxItems": 100 * MAX_PAGES}
            )
            return [e.get("Description") or "" for p in pages for e in p.get("Events", [])]
        except (aws.ClientError, aws.BotoCoreError) as err:
            _raise_mapped(err)

    def start_health_check(self, cluster: str, configurations: list[CheckConfiguration]) -> None:
        """Sent once, like reboots and replacements: a request HyperPod accepted but answered with a 5xx, sent
        again, would be a second request while the first check runs. Throttling (not carried out) is sent again,
        up to THROTTLED_ATTEMPTS times; a 5xx surfaces as TransientError, for the caller to treat as unknown.

        The error for "a check is already active" is undocumented: a refusal whose code or words say busy is
        ClusterBusy whatever else is seen (the operation it met may have ended by the time we ask); any other is
        read against HyperPod's operations: ClusterBusy while a DeepHealthCheck operation is in progress,
        otherwise CheckRefused (the request itself was refused). Throttling to the end is read the same way: a service
        may answer "busy" with throttling."""
        sm = self._sm or aws.client_without_retries("sagemaker")
        for attempt in range(THROTTLED_ATTEMPTS):
            try:
                sm.start_cluster_health_check(ClusterName=cluster, DeepHealthCheckConfigurations=configurations)
                return
            except (aws.ClientError, aws.BotoCoreError) as err:
                try:
                    _raise_mapped(err)
                except Throttled as throttled:
                    if attempt + 1 < THROTTLED_ATTEMPTS:
                        time.sleep(0.1 * 2**attempt)
                        continue
                    if self.check_in_progress(cluster):
                        raise ClusterBusy(str(throttled)) from err
                    raise
                except aws.ClientError as refused:
                    code, message = _error(refused)
                    if code in NOT_HYPERPODS_REFUSAL:
                        raise  # IAM refused the call, not HyperPod the request: the round fails and shows it
                    if says_busy(code, message) or self.check_in_progress(cluster):
                        raise ClusterBusy(f"{code}: {message}", refusal=(code, message)) from refused
                    raise CheckRefused(code, message) from refused

    def act(
        self, cluster: str, action: Action, logical_ids: Iterable[str], instance_ids: Iterable[str]
    ) -> list[ActionOutcome]:
        """BatchReboot/BatchReplaceClusterNodes in calls of at most 25 ids per list.

        Reboots and replacements are not idempotent, so each request is sent once (no botocore retries): a
        request HyperPod carried out but answered with a 5xx or a timeout, sent again, would meet its own
        action in flight (InstanceIdInUse) and be mistaken for a refusal. Such a chunk comes back unconfirmed.
        Throttling means the request was not carried out: it is sent again, up to THROTTLED_ATTEMPTS times,
        then its ids come back refused. A chunk's failure fails only its own ids; a deleted cluster still
        raises ClusterNotFound.
        """
        sm = self._sm or aws.client_without_retries("sagemaker")
        call = sm.batch_reboot_cluster_nodes if action == Action.REBOOT else sm.batch_replace_cluster_nodes
        outcomes: list[ActionOutcome] = []
        for param, ids in (("NodeLogicalIds", list(logical_ids)), ("NodeIds", list(instance_ids))):
            for part in chunks(ids, MAX_NODES_PER_ACTION_CALL):
                outcomes += self._act_chunk(call, cluster, param, part)
        return outcomes

    def _act_chunk(self, call: Any, cluster: str, param: str, part: list[str]) -> list[ActionOutcome]:
        for attempt in range(THROTTLED_ATTEMPTS):
            try:
                r = call(ClusterName=cluster, **{param: part})
                break
            except (aws.ClientError, aws.BotoCoreError) as err:
                try:
                    _raise_mapped(err)
                except Throttled as mapped:
                    if attempt + 1 < THROTTLED_ATTEMPTS:
                        time.sleep(0.1 * 2**attempt)
                        continue
                    return [ActionOutcome(key=k, ok=False, code="Throttled", message=str(mapped)[:300]) for k in part]
                except TransientError as mapped:
                    lost = str(mapped)[:300]
                    return [ActionOutcome(k, False, "TransientError", lost, unconfirmed=True) for k in part]
                except aws.ClientError as refused:
                    code = refused.response.get("Error", {}).get("Code", "ClientError")
                    return [ActionOutcome(key=k, ok=False, code=code, message=str(refused)[:300]) for k in part]
        if param == "NodeIds":
            ok, failed, id_key = r.get("Successful", []), r.get("Failed", []), "NodeId"
        else:
            ok, failed = r.get("SuccessfulNodeLogicalIds", []), r.get("FailedNodeLogicalIds", [])
            id_key = "NodeLogicalId"
        return [ActionOutcome(key=k, ok=True) for k in ok] + [
            ActionOutcome(key=f[id_key], ok=False, code=f.get("ErrorCode", ""), message=f.get("Message", ""))
            for f in failed
        ]


def _snapshot(s: dict[str, Any]) -> NodeSnapshot:
    launched = s.get("LaunchTime")
    return NodeSnapshot(
        group=s["InstanceGroupName"],
        instance_id=s.get("InstanceId") or None,
        logical_id=s.get("NodeLogicalId"),
        status=(s.get("InstanceStatus") or {}).get("Status", "Pending"),
        instance_type=s.get("InstanceType"),
        launched_at=launched.timestamp() if isinstance(launched, dt.datetime) else None,
        hostname=s.get("PrivateDnsHostname") or None,
    )


def _error(err: aws.ClientError) -> tuple[str, str]:
    body = err.response.get("Error", {})
    return body.get("Code", ""), body.get("Message", "")


def _epoch(value: object) -> float | None:
    return value.timestamp() if isinstance(value, dt.datetime) else None


def _utc(epoch_s: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.UTC)
