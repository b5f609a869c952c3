"""HyperPod EventBridge events: typed detail models and a pure classification.

Descriptions are free text and events arrive at least once and out of order, so an event is only ever a
hint: the intake confirms the node's real state with the API before anything is decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

CLUSTER_EVENT = "SageMaker HyperPod Cluster Event"
NODE_HEALTH_EVENT = "SageMaker HyperPod Cluster Node Health Event"
STATE_CHANGE_EVENT = "SageMaker HyperPod Cluster State Change"
DETAIL_TYPES = (CLUSTER_EVENT, NODE_HEALTH_EVENT, STATE_CHANGE_EVENT)
CLOSING_CLUSTER_STATUSES = frozenset({"Deleting", "Failed"})

_Name = Field(min_length=1, max_length=256)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class InstanceMeta(_Lenient):
    NodeLogicalId: str | None = Field(default=None, max_length=128)
    LcsExecutionState: str | None = None
    FailureMessage: str | None = None


class EventMeta(_Lenient):
    Instance: InstanceMeta | None = None


class InnerEventDetails(_Lenient):
    EventMetadata: EventMeta | None = None


class ClusterEventDetails(_Lenient):
    EventId: str | None = None
    ClusterArn: str | None = None
    ClusterName: str = _Name
    InstanceGroupName: str | None = Field(default=None, max_length=63)
    InstanceId: str | None = Field(default=None, max_length=32)
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
    ClusterArn: str | None = None
    InstanceId: str = Field(min_length=1, max_length=32)
    HealthSummary: HealthSummaryDetail | None = None


class StateChangeDetail(_Lenient):
    ClusterName: str = _Name
    ClusterArn: str | None = None
    ClusterStatus: str


@dataclass(frozen=True)
class NodeSignal:
    """Something may have happened to one node: confirm with DescribeClusterNode, then observe."""

    cluster: str
    event_id: str
    reason: str
    group: str | None = None
    instance_id: str | None = None
    logical_id: str | None = None
    unhealthy: bool = False


@dataclass(frozen=True)
class ClusterSignal:
    """Something happened to a cluster: reconcile it (or close it out when it is going away)."""

    cluster: str
    event_id: str
    reason: str
    closing: bool = False


@dataclass(frozen=True)
class Ignored:
    reason: str


class MalformedEvent(ValueError):
    """The event does not have the documented shape; the message says what is wrong."""


def classify(detail_type: str, detail: object, event_id: str) -> NodeSignal | ClusterSignal | Ignored:
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
                reason=f"health {status}: {summary.HealthStatusReason or ''}".strip(),
                unhealthy=status.lower() == "unhealthy",
            )
        if detail_type == STATE_CHANGE_EVENT:
            change = StateChangeDetail.model_validate(detail)
            return ClusterSignal(
                cluster=change.ClusterName,
                event_id=event_id,
                reason=f"cluster {change.ClusterStatus}",
                closing=change.ClusterStatus in CLOSING_CLUSTER_STATUSES,
            )
    except ValidationError as err:
        raise MalformedEvent(_describe(err)) from None
    return Ignored(f"unknown detail-type {detail_type[:100]!r}")


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
        )
    if d.ResourceType in ("Cluster", "InstanceGroup"):
        return ClusterSignal(cluster=d.ClusterName, event_id=eid, reason=description)
    return Ignored(f"unknown ResourceType {d.ResourceType[:50]!r}")


def _describe(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5])
