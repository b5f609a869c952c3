"""Api: the operators' REST API behind API Gateway (IAM/SigV4 auth on every route)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.logging import correlation_paths

from deephealth import settings
from deephealth.domain.errors import ClusterNotFound
from deephealth.domain.nodes import NodeState
from deephealth.domain.on_demand import NODE_REF_PATTERN, CheckRequest
from deephealth.domain.policy import GROUP_NAME_PATTERN
from deephealth.observability import logger, metrics
from deephealth.wiring import build_controller

SETTINGS = settings.load(settings.ApiSettings)
CONTROLLER = build_controller(SETTINGS)
app = APIGatewayRestResolver(enable_validation=True)
OPENAPI_TITLE, OPENAPI_VERSION = "hyperpod-dhc operator API", "1"

Cluster = Annotated[str, Path(pattern=GROUP_NAME_PATTERN, description="HyperPod cluster name")]


@app.get("/clusters", summary="Every watched cluster with node counts by state")
def list_clusters() -> dict:
    return {"clusters": CONTROLLER.clusters_view()}


@app.get("/clusters/<cluster>/groups", summary="Per instance group: states, current round, progress, GPU-hours")
def list_groups(cluster: Cluster) -> dict:
    return {"cluster": cluster, "groups": CONTROLLER.groups_view(cluster)}


@app.get("/clusters/<cluster>/nodes", summary="Per node: state, verdict, evidence, attempts, timings (paginated)")
def list_nodes(
    cluster: Cluster,
    group: Annotated[str | None, Query(pattern=GROUP_NAME_PATTERN)] = None,
    state: Annotated[NodeState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    next_token: Annotated[str | None, Query(pattern=NODE_REF_PATTERN)] = None,
) -> dict:
    nodes, token = CONTROLLER.nodes_view(cluster, group, state, limit, next_token)
    return {"cluster": cluster, "nodes": nodes, "next_token": token}


@app.get("/clusters/<cluster>/nodes/<node>", summary="One node's full history across instance ids")
def get_node(cluster: Cluster, node: Annotated[str, Path(pattern=NODE_REF_PATTERN)]) -> dict:
    found = CONTROLLER.node_view(cluster, node)
    if found is None:
        raise NotFoundError(f"node {node} is not known in cluster {cluster}")
    return found


@app.post("/clusters/<cluster>/checks", summary="Queue on-demand deep health checks into the next round")
def request_checks(cluster: Cluster, request: CheckRequest) -> Response[dict]:
    principal = app.current_event.request_context.identity.user_arn or "unknown principal"
    trigger = f"api:{app.current_event.request_context.request_id}:{principal}"
    result = CONTROLLER.request_checks(cluster, request, trigger)
    logger.info("on-demand checks requested", extra={"principal": principal, "result": result})
    return Response(status_code=202, content_type=content_types.APPLICATION_JSON, body=result)


@app.exception_handler(ClusterNotFound)
def _cluster_not_found(err: ClusterNotFound) -> Response:
    return _error(404, str(err))


def _error(status: int, message: str) -> Response:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body={"statusCode": status, "message": message}
    )


def openapi_json() -> str:
    """The OpenAPI document of this API (committed as docs/openapi.json; `make openapi` rewrites it)."""
    return app.get_openapi_json_schema(title=OPENAPI_TITLE, version=OPENAPI_VERSION) + "\n"


@metrics.log_metrics
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
def lambda_handler(event: dict, context: object) -> dict:
    return app.resolve(event, context)
