"""The HyperPod fake's state and its API helpers (types, wire formats, pagination), shared by ``hyperpod.py``
and ``checks.py``. Import them from ``tests.fakes.hyperpod``, which re-exports them."""

from __future__ import annotations

import base64
import bisect
import heapq
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

START_EPOCH = 1_790_000_000.0

NodeType = Literal["Compute", "Controller", "Login"]
Outcome = Literal["pass", "fail", "skip"]
Cure = Literal["reboot", "replace"]

CHECK_TYPES = ("InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation")
DEFAULT_PAGE_SIZE = 10  # INFERRED; small on purpose so callers that forget to paginate are caught
CHECK_START_DELAY_S = 30.0  # request accepted -> nodes show DeepHealthCheckInProgress (readings' default)
JOB_WAIT_S = 600.0  # [DOC] a check waits up to 10 min for a running job, then skips the node
SHUTDOWN_S = 60.0  # replace: ShuttingDown before the new instance id appears
DETACH_S = 60.0  # MoveClusterNodes: DetachInProgress before the node joins its new group
DELETE_S = 300.0
LIFECYCLE = {"SourceS3Uri": "s3://sagemaker-lifecycle/scripts/", "OnCreate": "on_create.sh"}
NODE_ID_RE = re.compile(r"i-[a-f0-9]{8}(?:[a-f0-9]{9})?")
BUSY_STATUSES = {"DeepHealthCheckInProgress", "Pending", "ShuttingDown", "SystemUpdating"}
# failed_status readings outside the API's enum: shown only by a node isolated after a failed check
OFF_ENUM_FAILED = {"Failed", "DeepHealthCheckFailed"}
FAULT_MSG = (
    "Encountered FaultyInstance. Replace the Instance. Region: {region}, InstanceType: {itype}. "
    "ERROR: DCGM diagnostic level 4 failed on GPU 3"
)


class Clock:
    """Virtual epoch seconds. Listeners run after every advance, so fakes that share the clock stay current
    whichever of them (or the test) moves time."""

    def __init__(self, start: float = START_EPOCH) -> None:
        self._now = float(start)
        self._listeners: list[Callable[[float], None]] = []

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time only moves forward")
        self._now += seconds
        for listener in list(self._listeners):
            listener(self._now)

    def subscribe(self, listener: Callable[[float], None]) -> None:
        self._listeners.append(listener)


@dataclass(frozen=True)
class GroupSpec:
    name: str
    instance_type: str = "ml.p5.48xlarge"
    count: int = 0
    node_type: NodeType = "Compute"
    on_start_checks: tuple[str, ...] = ()


@dataclass
class Node:
    logical_id: str
    group: str
    instance_type: str
    created: float  # the logical node's creation, stable across replacements
    seq: int  # tie-breaker so sort keys (and page cursors) are unique
    az: str
    status: str = "Pending"
    instance_id: str = ""  # "" while EC2 has not launched an instance for this node yet
    instance_ids: list[str] = field(default_factory=list)  # every instance this logical node ever had
    launch_time: float = 0.0
    private_ip: str = ""
    truth: Outcome = "pass"  # result of the next deep health check of the current instance
    cured_by: Cure = "replace"  # for truth "fail": does a reboot fix it, or only new hardware
    replacement_truth: Outcome = "pass"  # one-shot: what the next replacement instance will be
    replacement_cured_by: Cure = "replace"
    in_flight: str | None = None  # "reboot" | "replace" | "move" while one runs: a second action gets InstanceIdInUse
    busy_until: float = 0.0  # a Slurm job holds the node until then (a check requested meanwhile queues)
    # failed_status DeepHealthCheckInProgress (or Failed, DeepHealthCheckFailed): the check is over but the node
    # stays isolated in that status until rebooted or replaced, so node actions are allowed on it (unlike a
    # node in a running check).
    isolated: bool = False
    retry_due: float | None = None  # in Failure: when HyperPod retries with a new instance (None: no retry)
    hidden_until: float = 0.0  # vanish_s: missing from ListClusterNodes / DescribeClusterNode until then
    check_began: float | None = None  # when its current (or last) check began: `line_stamps: test-time`

    @property
    def launched(self) -> float:
        """LaunchTime as the API shows it; a node still waiting for EC2 shows its creation time (INFERRED)."""
        return self.launch_time or self.created


@dataclass
class PeerSet:
    """The nodes one configuration of a check names for InstanceConnectivity: NCCL tests them together."""

    members: list[str]  # logical ids the configuration names (skipped ones too), in its order
    open: set[str] = field(default_factory=set)  # members still to end their check
    began: int = 0  # members whose check began
    completed: int = 0  # members whose check ended (pass or fail)
    first_end: float | None = None  # when the first member's check ended: the set's NCCL test was over by then
    stream: str = ""  # nccl_summary: the opaque stream of its summary line


@dataclass
class HealthCheck:
    """One on-demand StartClusterHealthCheck request (one cluster operation), plus anything merged into it."""

    requested: float
    pending: set[str] = field(default_factory=set)  # logical ids not finished or skipped yet
    results: dict[str, str] = field(default_factory=dict)  # logical id -> "pass" | "fail" | "skip" | ...
    ended: float | None = None
    operation_id: str = ""
    configurations: list[dict[str, Any]] = field(default_factory=list)  # as requested (merges append)
    superseded: bool = False
    seq: int = 0  # tie-breaker for the operation listing
    queued: set[str] = field(default_factory=set)  # logical ids waiting for a job to end
    held: set[str] = field(default_factory=set)  # shown DeepHealthCheckInProgress by the check before it began
    began: set[str] = field(default_factory=set)  # logical ids whose check began
    # isolated_holds_operation: failed nodes left isolated, still pending until rebooted or replaced
    holding: set[str] = field(default_factory=set)
    peer_sets: list[PeerSet] = field(default_factory=list)  # one per configuration with InstanceConnectivity
    peers_of: dict[str, list[PeerSet]] = field(default_factory=dict)  # logical id -> its peer sets
    foreign_written: bool = False  # foreign_lines: the check's foreign stream has its lines

    @property
    def status(self) -> Literal["InProgress", "Superseded", "Done"]:
        if self.superseded:
            return "Superseded"
        return "InProgress" if self.ended is None else "Done"


@dataclass
class Cluster:
    name: str
    cluster_id: str
    arn: str
    groups: dict[str, GroupSpec]
    node_recovery: str
    creation_time: float
    status: str = "InService"
    nodes: dict[str, Node] = field(default_factory=dict)  # by NodeLogicalId
    events: list[dict[str, Any]] = field(default_factory=list)  # ListClusterEvents records (EventTime in ms)
    check: HealthCheck | None = None  # the active on-demand check, if any
    checks: list[HealthCheck] = field(default_factory=list)  # history (the DeepHealthCheck operations)
    gone: bool = False
    deleting_at: float | None = None  # when DeleteCluster was accepted
    orchestrator: Literal["Slurm", "Eks"] = "Slurm"  # DescribeCluster's Orchestrator block

    def by_instance(self, instance_id: str) -> Node | None:
        return next((n for n in self.nodes.values() if n.instance_id and n.instance_id == instance_id), None)


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _validation(message: str) -> ApiError:
    return ApiError("ValidationException", message)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ms(t: float) -> int:
    return round(t * 1000)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _api_event(record: dict[str, Any]) -> dict[str, Any]:
    """A stored event record as the API returns it: EventTime in epoch seconds, no private fields."""
    return {k: (v / 1000 if k == "EventTime" else v) for k, v in record.items() if k != "_seq"}


def _check_node_ids(ids: list[str], member: str) -> None:
    # botocore does not enforce patterns client-side; the service does
    if bad := [i for i in ids if not NODE_ID_RE.fullmatch(i)]:
        raise _validation(
            f"Value {bad} at '{member}' failed to satisfy constraint: Member must satisfy "
            f"regular expression pattern: {NODE_ID_RE.pattern}"
        )


def _page_size(p: dict[str, Any]) -> int:
    size = p.get("MaxResults", DEFAULT_PAGE_SIZE)
    if not 1 <= size <= 100:
        raise _validation("MaxResults must be between 1 and 100.")
    return int(size)


def _cursor(p: dict[str, Any]) -> list | None:
    """The sort key of the last item of the previous page (NextToken), None on a first page."""
    if not (token := p.get("NextToken")):
        return None
    try:
        return list(json.loads(base64.urlsafe_b64decode(token.encode())))
    except ValueError as e:
        raise _validation("Invalid pagination token.") from e


def _next_token(key: list) -> dict[str, str]:
    return {"NextToken": base64.urlsafe_b64encode(json.dumps(key).encode()).decode()}


def _paginate(
    items: list[Any], key: Callable[[Any], list], p: dict[str, Any], descending: bool
) -> tuple[list[Any], dict[str, str]]:
    """Sort, then page with a cursor (the sort key of the last item returned), so items that appear or
    change between pages are neither repeated nor skipped."""
    size, cursor = _page_size(p), _cursor(p)
    keyed = [(key(i), i) for i in items]
    if cursor is not None:
        keyed = [(k, i) for k, i in keyed if (k < cursor if descending else k > cursor)]
    # Only the page (and one more, to know there is a next) is ordered: a 10,000-node listing is 100 pages.
    first = (heapq.nlargest if descending else heapq.nsmallest)(size + 1, keyed, key=lambda ki: ki[0])
    page = [i for _, i in first[:size]]
    return (page, _next_token(first[size - 1][0])) if len(first) > size else (page, {})


@dataclass
class SortedIndex:
    """Items in their sort order, for paging in O(page): `_paginate`'s pages, without sorting every item per page
    (a 10,000-node listing is 100 pages). Its owner says which items came or had their key change (`moved`): each
    is taken out at its old key and put in at its new one, not the whole index sorted again (a node arrives every
    few seconds in a 10,000-node fleet). `seen`: how many of the owner's changes it holds."""

    seen: int
    keys: list[list]
    items: list[Any]
    held: dict[int, list] = field(default_factory=dict)  # id(item) -> its key in `keys`

    @classmethod
    def of(cls, seen: int, items: Iterable[Any], key: Callable[[Any], list]) -> SortedIndex:
        keyed = sorted(((key(i), i) for i in items), key=lambda ki: ki[0])
        return cls(seen, [k for k, _ in keyed], [i for _, i in keyed], {id(i): k for k, i in keyed})

    def moved(self, seen: int, items: Iterable[Any], key: Callable[[Any], list]) -> None:
        """`items` came, or their keys changed (keys are unique: the old one is found by bisection)."""
        for item in items:
            old = self.held.get(id(item))
            if old is not None:
                at = bisect.bisect_left(self.keys, old)
                del self.keys[at], self.items[at]
            new = self.held[id(item)] = key(item)
            at = bisect.bisect_right(self.keys, new)
            self.keys.insert(at, new)
            self.items.insert(at, item)
        self.seen = seen

    def page(
        self,
        keep: Callable[[Any], bool],
        p: dict[str, Any],
        descending: bool,
        above: Any = None,
        below: Any = None,
    ) -> tuple[list[Any], dict[str, str]]:
        """`_paginate` of the items `keep` admits: the same pages and tokens. `above`, `below`: `keep` admits no item
        whose key's first part is not above or not below these (a creation-time window: only it is walked)."""
        size, cursor = _page_size(p), _cursor(p)
        lo = 0 if above is None else bisect.bisect_right(self.keys, [above, math.inf])
        hi = len(self.keys) if below is None else bisect.bisect_left(self.keys, [below, -math.inf])
        if descending:
            end = hi if cursor is None else min(hi, bisect.bisect_left(self.keys, cursor))
            positions: Iterable[int] = range(end - 1, lo - 1, -1)
        else:
            positions = range(lo if cursor is None else max(lo, bisect.bisect_right(self.keys, cursor)), hi)
        first: list[int] = []
        for i in positions:
            if keep(self.items[i]):
                first.append(i)
                if len(first) > size:
                    break
        page = [self.items[i] for i in first[:size]]
        return (page, _next_token(self.keys[first[size - 1]])) if len(first) > size else (page, {})
