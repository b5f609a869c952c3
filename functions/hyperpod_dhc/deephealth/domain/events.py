"""HyperPod EventBridge events: typed detail models and a pure classification.

Descriptions are free text and events arrive at least once and out of order, so an event is only ever a
hint: nothing is decided from it. A node event wakes the cluster's round, whose ListClusterNodes pass says what
is true; an unhealthy report is confirmed with DescribeClusterNode first.

Names and ids are held to the SageMaker API's own patterns (botocore model), so a hostile or garbled
value is a `MalformedEvent` here instead of a `ValidationException` (and a retry) in the API call later.
`foreign_origin` tells an event of another account or region from one of ours; the intake drops those.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError

CLUSTER_EVENT = "SageMaker HyperPod Cluster Event"
NODE_HEALTH_EVENT = "SageMaker HyperPod Cluster Node Health Event"
STATE_CHANGE_EVENT = "SageMaker HyperPod Cluster State Change"
DETAIL_TYPES = (CLUSTER_EVENT, NODE_HEALTH_EVENT, STATE_CHANGE_EVENT)
CLOSING_CLUSTER_STATUSES = frozenset({"Deleting", "Failed"})
SOURCE = "aws.sagemaker"
MAX_EVENT_ID = 128  # an event id becomes the trigger of the audit line and of the node's history entry

# The SageMaker API's patterns (botocore model shapes ClusterName, ClusterInstanceGroupName, ClusterNodeId,
# ClusterNodeLogicalId, ClusterArn), anchored.
NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
INSTANCE_ID_PATTERN = r"^i-[a-f0-9]{8}(?:[a-f0-9]{9})?$"
LOGICAL_ID_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9-]{0,126}[a-zA-Z0-9]$"
CLUSTER_ARN_PATTERN = r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]*:[0-9]{12}:cluster/[a-z0-9]{12}$"

_Name = Field(max_length=63, pattern=NAME_PATTERN)
_ClusterArn = Field(default=None, max_length=256, pattern=CLUSTER_ARN_PATTERN)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class InstanceMeta(_Lenient):
    NodeLogicalId: str | None = Field(default=None, max_length=128, pattern=LOGICAL_ID_PATTERN)
    LcsExecutionState: str | None = None
    FailureMessage: str | None = None


class EventMeta(_Lenient):
    Instance: InstanceMeta | None = None


class InnerEventDetails(_Lenient):
    EventMetadata: EventMeta | None = None


class ClusterEventDetails(_Lenient):
    EventId: str | None = Field(default=None, min_length=1, max_length=128)  # becomes the audit trigger
    ClusterArn: str | None = _ClusterArn
    ClusterName: str = _Name
    InstanceGroupName: str | None = Field(default=None, max_length=63, pattern=NAME_PATTERN)
    # Empty while the node is still provisioning (no EC2 instance yet).
    InstanceId: str | None = Field(default=None, max_length=19, pattern=f"^$|{INSTANCE_ID_PATTERN}")
    ResourceType: str
    EventTime: int | float | None = None
    EventLevel: str | None = None
    Description: str | None = None
    EventDetails: InnerEventDetails | None = None


class ClusterEventDetail(_Lenient):
    EventDetails: ClusterEventDetails


class HealthSummaryDetail(_Lenient):
    HealthStatus: str | None = None
    HealthStatusReason: str | None = None
    RepairAction: str | None = None
    Recommendation: str | None = None


class NodeHealthDetail(_Lenient):
    ClusterName: str = _Name
    ClusterArn: str | None = _ClusterArn
    InstanceId: str = Field(max_length=19, pattern=INSTANCE_ID_PATTERN)
    HealthSummary: HealthSummaryDetail | None = None


class StateChangeDetail(_Lenient):
    ClusterName: str = _Name
    ClusterArn: str | None = _ClusterArn
    ClusterStatus: str = Field(max_length=64)


@dataclass(frozen=True)
class NodeSignal:
    """Something may have happened to one node. Readiness wakes the cluster's round, whose listing records the
    node; an unhealthy report is confirmed with DescribeClusterNode, then observed."""

    cluster: str
    event_id: str
    reason: str
    group: str | None = None
    instance_id: str | None = None
    logical_id: str | None = None
    unhealthy: bool = False
    cluster_arn: str | None = field(default=None, compare=False)  # provenance, checked by `foreign_origin`
    # False for steps known to come before readiness: they wake nothing and cost no call.
    wakes_round: bool = True


@dataclass(frozen=True)
class ClusterSignal:
    """Something happened to a cluster: reconcile it (or close it out when it is going away)."""

    cluster: str
    event_id: str
    reason: str
    closing: bool = False
    cluster_arn: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Ignored:
    reason: str


class MalformedEvent(ValueError):
    """The event does not have the documented shape; the message says what is wrong."""


def classify(detail_type: str, detail: object, event_id: str) -> NodeSignal | ClusterSignal | Ignored:
    if not isinstance(event_id, str) or not 0 < len(event_id) <= MAX_EVENT_ID:
        raise MalformedEvent(f"id: must be a string of 1-{MAX_EVENT_ID} characters")
    try:
        if detail_type == CLUSTER_EVENT:
            return _cluster_event(ClusterEventDetail.model_validate(detail).EventDetails, event_id)
        if detail_type == NODE_HEALTH_EVENT:
            health = NodeHealthDetail.model_validate(detail)
            summary = health.HealthSummary or HealthSummaryDetail()
            status = summary.HealthStatus or "unknown"
            return NodeSignal(
                cluster=health.ClusterName,
                event_id=event_id,
                instance_id=health.InstanceId,
                reason=f"health {status[:50]}: {(summary.HealthStatusReason or '')[:300]}".strip(),
                unhealthy=status.lower() == "unhealthy",
                cluster_arn=health.ClusterArn,
            )
        if detail_type == STATE_CHANGE_EVENT:
            change = StateChangeDetail.model_validate(detail)
            return ClusterSignal(
                cluster=change.ClusterName,
                event_id=event_id,
                reason=f"cluster {change.ClusterStatus}",
                closing=change.ClusterStatus in CLOSING_CLUSTER_STATUSES,
                cluster_arn=change.ClusterArn,
            )
    except ValidationError as err:
        raise MalformedEvent(describe(err)) from None
    return Ignored(f"unknown detail-type {quoted(detail_type, 100)}")


def _cluster_event(d: ClusterEventDetails, event_id: str) -> NodeSignal | ClusterSignal | Ignored:
    eid = d.EventId or event_id
    description = (d.Description or "")[:300]
    if d.ResourceType == "Instance":
        meta = (
            d.EventDetails.EventMetadata.Instance if d.EventDetails and d.EventDetails.EventMetadata else None
        ) or InstanceMeta()
        if not (d.InstanceId or meta.NodeLogicalId):
            raise MalformedEvent("Instance event has neither InstanceId nor EventMetadata.Instance.NodeLogicalId")
        return NodeSignal(
            cluster=d.ClusterName,
            event_id=eid,
            reason=description,
            group=d.InstanceGroupName,
            instance_id=d.InstanceId or None,
            logical_id=meta.NodeLogicalId,
            cluster_arn=d.ClusterArn,
            wakes_round=not _before_readiness(meta.LcsExecutionState, description),
        )
    if d.ResourceType in ("Cluster", "InstanceGroup"):
        return ClusterSignal(cluster=d.ClusterName, event_id=eid, reason=description, cluster_arn=d.ClusterArn)
    return Ignored(f"unknown ResourceType {quoted(d.ResourceType, 50)}")


# Instance events that only announce a step towards readiness (the documented descriptions; "replacement
# started" is the fake's wording, "is starting as part of instance replacement" the events reference's).
# Anything else, unknown wording included, wakes the cluster's round: a missed signal costs a listing, never a node.
BEFORE_READINESS = (
    "successfully provisioned",
    "replacement started",
    "is starting as part of instance replacement",
    "currently in progress",
)


def _before_readiness(lcs_state: str | None, description: str) -> bool:
    if lcs_state is not None:
        return lcs_state == "Started"
    text = description.lower()
    return any(phrase in text for phrase in BEFORE_READINESS)


def foreign_origin(
    account: str, region: str, arns: Iterable[str | None], own_account: str | None, own_region: str | None
) -> str | None:
    """Why an event is not this controller's (another account or region), or None when it is.

    `account`/`region` come from the EventBridge envelope, `arns` from its `resources` and the detail's
    `ClusterArn`. Our own account/region come from the function's ARN; an unknown one is not compared.
    """
    if own_account and account != own_account:
        return f"envelope account {quoted(account, 20)} is not this account"
    if own_region and region != own_region:
        return f"envelope region {quoted(region, 30)} is not this region"
    for arn in arns:
        if not isinstance(arn, str) or not arn.startswith("arn:"):
            continue  # not an ARN: nothing to compare (ClusterArn itself is validated by the models)
        parts = arn.split(":", 5)
        if len(parts) < 6:
            continue  # too few fields for an ARN
        arn_region, arn_account = parts[3], parts[4]
        if own_account and arn_account and arn_account != own_account:
            return f"{quoted(arn, 200)} names another account"
        if own_region and arn_region and arn_region != own_region:
            return f"{quoted(arn, 200)} names another region"
    return None


def quoted(text: str, limit: int) -> str:
    """`text` quoted for a log line, at most `limit` characters long: `repr` can turn one character into ten."""
    shown = repr(text[:limit])
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def describe(err: ValidationError) -> str:
    """The first errors as `location: message`, without the offending input (it may be huge or hostile)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in err.errors()[:5])
