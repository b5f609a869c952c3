"""Api: the operators' REST API behind API Gateway (IAM/SigV4 auth on every route)."""

import binascii
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.logging import correlation_paths

from hyperpod_dhc.deephealth import settings
from hyperpod_dhc.deephealth.domain.breakers import BreakerReset
from hyperpod_dhc.deephealth.domain.bridge_fence import BRIDGE_ID_PATTERN, MAX_ERRORS, BridgeStatus, SlurmctldAnswer
from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound, StaleRecord, Throttled, TransientError
from hyperpod_dhc.deephealth.domain.nodes import NodeState
from hyperpod_dhc.deephealth.domain.on_demand import NODE_REF_PATTERN, CheckRequest
from hyperpod_dhc.deephealth.domain.policy import GROUP_NAME_PATTERN
from hyperpod_dhc.deephealth.domain.slurm import MAX_STATE_PAGE, OccupancyReport
from hyperpod_dhc.deephealth.observability import MetricUnit, bridge_reported, logger, metrics
from hyperpod_dhc.deephealth.usecases import operator_actions, operator_views, slurm_bridge
from hyperpod_dhc.deephealth.wiring import build_context

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

SETTINGS = settings.load(settings.ApiSettings)
CONTEXT = build_context(SETTINGS)
app = APIGatewayRestResolver(enable_validation=True)
OPENAPI_TITLE, OPENAPI_VERSION = "hyperpod-dhc operator API", "1"

Cluster = Annotated[str, Path(pattern=GROUP_NAME_PATTERN, description="HyperPod cluster name")]


@app.get("/clusters", summary="Every watched cluster with node counts by state, open breaker and holds")
def list_clusters() -> dict[str, Any]:
    return {"clusters": operator_views.list_clusters(CONTEXT)}


@app.get(
    "/clusters/<cluster>/groups",
    summary="Per instance group: states, current round, progress, GPU-hours; open breaker, holds",
)
def list_groups(cluster: Cluster) -> dict[str, Any]:
    return {"cluster": cluster, **operator_views.list_groups(CONTEXT, cluster)}


@app.get("/clusters/<cluster>/nodes", summary="Per node: state, verdict, evidence, attempts, timings (paginated)")
def list_nodes(
    cluster: Cluster,
    group: Annotated[str | None, Query(pattern=GROUP_NAME_PATTERN)] = None,
    state: Annotated[NodeState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    next_token: Annotated[str | None, Query(pattern=NODE_REF_PATTERN)] = None,
) -> dict[str, Any]:
    nodes, token = operator_views.list_nodes(CONTEXT, cluster, group, state, limit, next_token)
    return {"cluster": cluster, "nodes": nodes, "next_token": token}


@app.get("/clusters/<cluster>/nodes/<node>", summary="One node's full history across instance ids")
def get_node(cluster: Cluster, node: Annotated[str, Path(pattern=NODE_REF_PATTERN)]) -> dict[str, Any]:
    found = operator_views.get_node(CONTEXT, cluster, node)
    if found is None:
        raise NotFoundError(f"node {node} is not known in cluster {cluster}")
    return found


@app.get(
    "/clusters/<cluster>/nodes/<node>/capture",
    summary="The node's last check as a captured check: its result log events, window and check types",
)
def capture_check(cluster: Cluster, node: Annotated[str, Path(pattern=NODE_REF_PATTERN)]) -> dict[str, Any]:
    found = operator_views.capture_check(CONTEXT, cluster, node)
    if found is None:
        raise NotFoundError(f"node {node} is not known in cluster {cluster}")
    if not found:
        raise NotFoundError(f"node {node} of cluster {cluster} has had no check yet")
    return found


@app.post("/clusters/<cluster>/checks", summary="Queue on-demand deep health checks into the next round")
def request_checks(cluster: Cluster, request: CheckRequest) -> Response[dict[str, Any]]:
    principal = app.current_event.request_context.identity.user_arn or "unknown principal"
    trigger = f"api:{app.current_event.request_context.request_id}:{principal}"
    result = operator_actions.request_checks(CONTEXT, cluster, request, trigger)
    logger.info("on-demand checks requested", extra={"principal": principal, "result": result})
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=result)


@app.get("/clusters/<cluster>/breakers", summary="Breaker, bad-capacity holds, replacement budgets and held nodes")
def get_breakers(cluster: Cluster) -> dict[str, Any]:
    return operator_views.get_breakers(CONTEXT, cluster)


@app.post("/clusters/<cluster>/breakers/reset", summary="Close the cluster breaker or lift a group's capacity hold")
def reset_breaker(cluster: Cluster, request: BreakerReset) -> dict[str, Any]:
    principal = app.current_event.request_context.identity.user_arn or "unknown principal"
    trigger = f"api:{app.current_event.request_context.request_id}:{principal}"
    return operator_actions.reset_breaker(CONTEXT, cluster, request.group, principal, request.reason, trigger)


@app.get("/clusters/<cluster>/readings", summary="What the cluster was seen to do: stream names, line shapes, lag")
def get_readings(cluster: Cluster) -> dict[str, Any]:
    return operator_views.get_readings(CONTEXT, cluster)


@app.get("/clusters/<cluster>/slurm", summary="Slurm bridge: each node's desired Slurm state (paginated)")
def slurm_state(
    cluster: Cluster,
    limit: Annotated[int, Query(ge=1, le=MAX_STATE_PAGE)] = MAX_STATE_PAGE,
    next_token: Annotated[str | None, Query(pattern=NODE_REF_PATTERN)] = None,
    since: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    digest: Annotated[str | None, Query(pattern=r"^[0-9a-f]{16}$")] = None,
    # What the bridge says of itself, on every page (domain.bridge_fence; an older bridge sends none of them).
    bridge: Annotated[str | None, Query(pattern=BRIDGE_ID_PATTERN, description="<hostname>:<uuid>")] = None,
    synced_at: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    slurmctld: Annotated[SlurmctldAnswer | None, Query()] = None,
    errors: Annotated[int | None, Query(ge=0, le=MAX_ERRORS)] = None,
    take_over: Annotated[int, Query(ge=0, le=1)] = 0,
) -> dict[str, Any]:
    status = BridgeStatus(bridge, synced_at, slurmctld, errors, bool(take_over))
    document = slurm_bridge.slurm_state(CONTEXT, cluster, limit, next_token, since, digest, status)
    bridge_reported(cluster)  # a pull counts too: a bridge with no node in Slurm yet posts no occupancy
    return document


@app.post("/clusters/<cluster>/slurm/occupancy", summary="Slurm bridge: which nodes run jobs now")
def report_occupancy(cluster: Cluster, report: OccupancyReport) -> dict[str, Any]:
    answer = slurm_bridge.report_occupancy(CONTEXT, cluster, report.nodes, CONTEXT.clock())
    bridge_reported(cluster)  # after it was accepted: the bridge-silence alarm counts these
    return answer


_Handler = TypeVar("_Handler", bound=Callable[..., Response[dict[str, Any]]])


def _handles(exc_class: type[Exception] | list[type[Exception]]) -> Callable[[_Handler], _Handler]:
    """`app.exception_handler`, typed: Powertools leaves that decorator unannotated (strict mypy rejects it)."""
    register: Callable[[_Handler], _Handler] = app.exception_handler(exc_class)
    return register


@_handles(StaleRecord)
def _changed_concurrently(err: StaleRecord) -> Response[dict[str, Any]]:
    _rejected(409, f"changed concurrently: {err}")
    return _error(409, "changed concurrently; retry")


@_handles([Throttled, TransientError])
def _try_again(err: Exception) -> Response[dict[str, Any]]:
    """AWS throttled us or failed (after botocore's retries): the caller may retry; nothing was half-done."""
    logger.warning("request failed transiently", extra={"error": type(err).__name__, "reason": str(err)[:300]})
    return Response(
        status_code=503,
        content_type=content_types.APPLICATION_JSON,
        body={"statusCode": 503, "message": f"{type(err).__name__}; retry"},
        headers={"Retry-After": "5"},
    )


@_handles(ClusterNotFound)
def _cluster_not_found(err: ClusterNotFound) -> Response[dict[str, Any]]:
    _rejected(404, str(err))
    return _error(404, str(err))


@_handles(NotFoundError)
def _not_found(err: NotFoundError) -> Response[dict[str, Any]]:
    """An unknown node (raised by a route) or no route for the method and path (raised by the resolver)."""
    event = app.current_event
    message = err.msg if err.msg and err.msg != "Not found" else f"no route for {event.http_method[:10]} {event.path}"
    _rejected(404, message[:300])
    return _error(404, message[:300])


@_handles([RecursionError, binascii.Error, UnicodeDecodeError])
def _undecodable_body(err: Exception) -> Response[dict[str, Any]]:
    """A body Powertools cannot decode (bad base64, not UTF-8, JSON nested deeper than the recursion limit).

    These escape Powertools' own JSON error handling and would end the invocation (a 502 in API Gateway).
    """
    _rejected(422, f"body cannot be decoded: {type(err).__name__}: {str(err)[:200]}")
    return Response(
        status_code=422,
        content_type=content_types.APPLICATION_JSON,
        body={"statusCode": 422, "detail": [{"loc": ["body"], "type": "json_invalid"}]},
    )


MAX_VALIDATION_ERRORS = 20  # a 3,000-item body can fail 3,000 times: the first ones say what is wrong


@_handles(RequestValidationError)
def _invalid_request(err: RequestValidationError) -> Response[dict[str, Any]]:
    """422 with Powertools' validation detail (`loc`, `type`; no message, no input echoed), logged and counted."""
    errors = list(err.errors())
    first = errors[:MAX_VALIDATION_ERRORS]
    detail = [{"loc": [_short(p) for p in e.get("loc", ())], "type": e.get("type")} for e in first]
    reasons = "; ".join(
        f"{'.'.join(str(p) for p in d['loc'])}: {str(e.get('msg', ''))[:200]}"
        for d, e in zip(detail, first, strict=True)
    )
    _rejected(422, f"{len(errors)} validation error(s): {reasons}")
    return Response(
        status_code=422, content_type=content_types.APPLICATION_JSON, body={"statusCode": 422, "detail": detail}
    )


def _short(part: object) -> object:
    """A `loc` element; a key the caller made up (extra="forbid") is cut, so a 1 MB key is not echoed back."""
    return part if isinstance(part, int) else str(part)[:100]


def _rejected(status: int, reason: str) -> None:
    """Every 4xx answer: one warning line with the reason, and the `RejectedRequests` metric."""
    event = app.current_event
    logger.warning(
        "request rejected",
        extra={
            "status": status,
            "reason": reason[:1000],
            "method": event.http_method[:10],
            "path": event.path[:200],
            "principal": event.request_context.identity.user_arn,
        },
    )
    metrics.add_metric(name="RejectedRequests", unit=MetricUnit.Count, value=1)


def _error(status: int, message: str) -> Response[dict[str, Any]]:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body={"statusCode": status, "message": message}
    )


def openapi_json() -> str:
    """The OpenAPI document of this API (committed as infra/hyperpod_dhc/infra/openapi.json; `make openapi` rewrites
    it)."""
    return app.get_openapi_json_schema(title=OPENAPI_TITLE, version=OPENAPI_VERSION) + "\n"


@metrics.log_metrics
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
def lambda_handler(event: dict[str, Any], context: "LambdaContext") -> dict[str, Any]:
    return app.resolve(event, context)
