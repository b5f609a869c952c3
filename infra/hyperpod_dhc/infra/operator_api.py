"""The operators' REST API: API Gateway in front of the Api Lambda, every method IAM (SigV4) authorized.

Routes (``ROUTES``) are the Api handler's, read from its generated OpenAPI document
``infra/hyperpod_dhc/infra/openapi.json``: a route added to ``handlers/api.py`` is deployed once ``make openapi`` has
rewritten it (until then ``tests/unit/test_openapi.py`` fails, and ``tests/infra/test_operations.py`` fails while the
synthesized API and the handler's resolver differ). They use the Lambda proxy integration; the Lambda routes and
validates requests itself (Powertools ``APIGatewayRestResolver`` with pydantic), so there is no API Gateway request
validator. Stage ``v1``: JSON access logs (caller ARN included) to a log group with the configured retention, execution
logging at ERROR without request/response data, X-Ray tracing, and stage-wide throttling.

Who may do what to which cluster (``api_policy``): the API's resource policy denies each guarded route of a
cluster to every principal whose ``aws:PrincipalArn`` is not like one of that cluster's patterns in the route's
context key (or of its ``"*"`` patterns, every cluster); a cluster not in the map can only be reached by the
``"*"`` patterns (nobody when there are none). A pattern is an exact role or user ARN or a spelled-out path then ``*``
(``infra/controller_config.principal_pattern_problem``: nothing that admits more than it spells out). The guarded
routes (``GUARDS``) and their keys:

- ``POST /clusters/{cluster}/breakers/reset`` (close the breaker, lift a capacity hold):
  ``hyperpod-dhc:breaker-resetters``.
- ``BRIDGE_ROUTES`` (the Slurm bridge's pull of the desired state and its occupancy report):
  ``hyperpod-dhc:slurm-bridges``, the execution role(s) of each cluster's Slurm controller group. Per cluster
  because that role is on every node of its group (IMDS): a job on another cluster's nodes must not be able to
  report this cluster's nodes busy, which keeps them unchecked and drained for as long as it keeps reporting.
- ``POST /clusters/{cluster}/checks`` (queue on-demand checks, which take nodes out of service for hours):
  ``hyperpod-dhc:check-requesters``.

Defaults (``cdk.json`` ships ``{}`` for each): nobody may reset, queue checks or run a bridge through the API
until named. A fresh deployment is usable without them: rounds find and check new nodes on their own, every
read route stays open to IAM-authorized operators, and the bridge is opt-in (an operator attaches its policy and
names its role). Safe: the writes that hold nodes back or take them out of service are nobody's by default.

Only Deny statements: in the same account IAM auth still needs an identity policy that allows
``execute-api:Invoke``, and an explicit deny wins over it. One statement per distinct set of principals of a
configured cluster (``Resource``: the guarded methods of every cluster and key with exactly those principals,
``ArnNotLike``: them), and one per distinct set of ``"*"`` patterns for every other cluster (``NotResource``:
every method those keys do not guard and their configured clusters' guarded ones; ``ArnNotLike``: the ``"*"``
patterns, no condition when there are none). Grouping keeps the policy short: API Gateway caps it at
``POLICY_LENGTH_QUOTA`` characters and synth fails beyond (measured with the longest partition and region).
ARNs name the API as ``*`` (the policy is a property of the API, which cannot reference its own id) and every
stage. Measured: shipped empty, about 670 characters; each configured cluster with principals of its own adds
about 425 per key (610 for the bridge's two routes), about 180 per route when it shares them with another
cluster or key. So about 17 clusters fit in one key alone, 12 in the bridges alone; in all three, 5 with
different principals per key, 6 when a cluster's resetters are its check requesters, 10 when those are ``"*"``
patterns and only the bridges are per cluster (beyond: raise the quota, Service Quotas L-8B81B02C).

The Slurm bridge (``SlurmBridgePolicy``, a customer-managed policy the stack exports as ``SlurmBridgePolicyArn``):
the agent on a cluster's Slurm controller node calls ``BRIDGE_ROUTES`` with the instance group's execution role
(SigV4), so an operator attaches this policy to that role and names the role for its cluster in
``hyperpod-dhc:slurm-bridges``. It allows ``execute-api:Invoke`` on those two methods of this API's stage, for
every cluster, and nothing else: one policy for every cluster (a role shared by clusters needs no second one),
whose cluster is then decided by the resource policy. The Api function counts each accepted state pull and
occupancy report as metric ``SlurmBridgeReports`` (dimensions ``service``, ``cluster``); the operations
dashboard alarms on a named cluster's bridge when it stops (``infra/hyperpod_dhc/infra/operations_dashboard.py``).

Deployment precondition: REST API stages log to CloudWatch Logs (access and execution logs alike) only
when the region's API Gateway account settings name a CloudWatch Logs role (``cloudWatchRoleArn``).
That setting is one per account and region, shared by every API there, so this stack does not own it
(``@aws-cdk/aws-apigateway:disableCloudWatchRole``); in a region where it was never set, set it once
(``aws apigateway update-account``) before the first deployment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import Aws, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from hyperpod_dhc.infra.acknowledgements import acknowledge, acknowledge_wildcard_resource
from hyperpod_dhc.infra.controller_config import (
    BREAKER_RESETTERS_KEY,
    CHECK_REQUESTERS_KEY,
    EVERY_CLUSTER,
    SLURM_BRIDGES_KEY,
    ConfigError,
    prop_name,
)

STAGE_NAME = "v1"
THROTTLE_RATE_RPS = 20
THROTTLE_BURST = 40
# The routes' one source (`make openapi` writes it from the Api handler): beside this module, so the wheel ships it.
OPENAPI_DOCUMENT = Path(__file__).resolve().parent / "openapi.json"
HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch"})
# Closes a cluster's breaker or lifts a group's capacity hold: only the cluster's resetters (api_policy).
RESET_ROUTE = ("POST", "/clusters/{cluster}/breakers/reset")
# Queues on-demand checks: only the cluster's check requesters (api_policy).
CHECKS_ROUTE = ("POST", "/clusters/{cluster}/checks")


def openapi_routes(document: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(HTTP method, path) of every operation of an OpenAPI document, in the order the resolver matches them
    (paths without a parameter first, each kind in the order of the handler's decorators). The order is the
    template's: of the methods, of the deployment's hash and of the resource policy's ``NotResource``."""
    routes = [(m.upper(), path) for path, item in document["paths"].items() for m in item if m in HTTP_METHODS]
    return tuple(sorted(routes, key=lambda route: "{" in route[1]))


ROUTES = openapi_routes(json.loads(OPENAPI_DOCUMENT.read_text()))
# What the Slurm bridge calls: its nodes' desired state, and their occupancy.
BRIDGE_ROUTES = (("GET", "/clusters/{cluster}/slurm"), ("POST", "/clusters/{cluster}/slurm/occupancy"))


@dataclass(frozen=True)
class Guard:
    """Routes of a cluster that only the principals its context key names for that cluster may call."""

    key: str
    routes: tuple[tuple[str, str], ...]


GUARDS = (
    Guard(BREAKER_RESETTERS_KEY, (RESET_ROUTE,)),
    Guard(SLURM_BRIDGES_KEY, BRIDGE_ROUTES),
    Guard(CHECK_REQUESTERS_KEY, (CHECKS_ROUTE,)),
)
for _guard in GUARDS:  # a guard of a route the API lacks guards nothing: the route it meant would be open
    if missing := [route for route in _guard.routes if route not in ROUTES]:
        raise RuntimeError(f"{OPENAPI_DOCUMENT} has no route {missing} of {_guard.key}: update GUARDS")

# API Gateway's quota on a resource policy, in characters (adjustable; Service Quotas L-8B81B02C). Checked at
# synth with the ARNs expanded as long as they get (the partition aws-us-gov, a 15-character region).
POLICY_LENGTH_QUOTA = 8192
_LONGEST_PSEUDO = {"AWS::Partition": "aws-us-gov", "AWS::Region": "x" * 15, "AWS::AccountId": "0" * 12}

F = apigw.AccessLogField
ACCESS_LOG_FORMAT = {
    "requestId": F.context_request_id(),
    "extendedRequestId": F.context_extended_request_id(),
    "requestTime": F.context_request_time(),
    "httpMethod": F.context_http_method(),
    "resourcePath": F.context_resource_path(),
    "path": F.context_path(),
    "status": F.context_status(),
    "responseLength": F.context_response_length(),
    "responseLatency": F.context_response_latency(),
    "integrationStatus": F.context_integration_status(),
    "integrationLatency": F.context_integration_latency(),
    "errorResponseType": F.context_error_response_type(),
    "sourceIp": F.context_identity_source_ip(),
    "userAgent": F.context_identity_user_agent(),
    "accountId": F.context_identity_account_id(),
    "caller": F.context_identity_caller(),
    "userArn": F.context_identity_user_arn(),
}


def arn_path(path: str) -> str:
    """A route's path as an execute-api ARN names its methods: each path parameter ``*``."""
    return re.sub(r"\{\w+\}", "*", path)


def method_arn(http_method: str, path: str) -> str:
    """The execute-api ARN of a method of this API in every stage; path parameters become ``*``."""
    return f"arn:{Aws.PARTITION}:execute-api:{Aws.REGION}:{Aws.ACCOUNT_ID}:*/*/{http_method}{arn_path(path)}"


def cluster_arn(route: tuple[str, str], cluster: str) -> str:
    """The method ARN of ``route`` for one cluster (every stage)."""
    method, path = route
    return method_arn(method, path.replace("{cluster}", cluster))


def _deny(
    sid: str, patterns: list[str], *, resources: list[str] | None = None, not_resources: list[str] | None = None
) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid=sid,
        effect=iam.Effect.DENY,
        principals=[iam.AnyPrincipal()],
        actions=["execute-api:Invoke"],
        conditions={"ArnNotLike": {"aws:PrincipalArn": patterns}} if patterns else None,
        resources=resources,
        not_resources=not_resources,
    )


def api_policy(authorities: Mapping[str, Mapping[str, Sequence[str]]]) -> iam.PolicyDocument:
    """The API's resource policy: every guard's denies (see the module doc), ``authorities`` keyed by each guard's
    context key (a key not given: ``{}``). One statement per distinct set of principals, however many clusters
    and guards share it, and one per distinct set of ``"*"`` patterns: the policy's length is API Gateway's quota.
    """
    own: dict[tuple[str, ...], list[str]] = {}  # a configured cluster's principals -> its guarded method ARNs
    everywhere: dict[tuple[str, ...], list[Guard]] = {}  # "*" patterns -> the guards whose other clusters they are
    configured: dict[Guard, list[str]] = {}  # guard -> its configured clusters' method ARNs
    for guard in GUARDS:
        authority = authorities.get(guard.key, {})
        of_all = tuple(sorted(authority.get(EVERY_CLUSTER, ())))
        everywhere.setdefault(of_all, []).append(guard)
        for cluster in sorted(c for c in authority if c != EVERY_CLUSTER):
            arns = [cluster_arn(route, cluster) for route in guard.routes]
            own.setdefault(tuple(sorted({*authority[cluster], *of_all})), []).extend(arns)
            configured.setdefault(guard, []).extend(arns)
    statements = [
        _deny(f"ClusterRoutes{i}OnlyByTheirPrincipals", list(principals), resources=arns)
        for i, (principals, arns) in enumerate(own.items(), 1)
    ]
    for i, (of_all, guards) in enumerate(everywhere.items(), 1):
        # Every other cluster: NotResource is every method these guards do not cover, and their configured clusters'.
        guarded = {route for guard in guards for route in guard.routes}
        others = [method_arn(m, p) for m, p in ROUTES if (m, p) not in guarded]
        mine = [arn for guard in guards for arn in configured.get(guard, [])]
        statements.append(_deny(f"OtherClusters{i}OnlyByPrincipalsOfAll", list(of_all), not_resources=others + mine))
    return iam.PolicyDocument(statements=statements)


def expand_longest(value: object) -> object:
    """A resolved policy with each Fn::Join of pseudo parameters as its longest string."""
    if isinstance(value, list):
        return [expand_longest(v) for v in value]
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(p if isinstance(p, str) else _LONGEST_PSEUDO[p["Ref"]] for p in parts)
    if isinstance(value, dict):
        return {k: expand_longest(v) for k, v in value.items()}
    return value


def policy_length(scope: Construct, document: iam.PolicyDocument) -> int:
    """Characters of the policy as API Gateway stores it (compact JSON, full ARNs), at most."""
    return len(json.dumps(expand_longest(Stack.of(scope).resolve(document.to_json())), separators=(",", ":")))


class OperatorApi(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        handler: lambda_.IFunction,
        log_retention: logs.RetentionDays,
        resetters: Mapping[str, Sequence[str]],
        bridges: Mapping[str, Sequence[str]] | None = None,
        check_requesters: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        super().__init__(scope, id)
        authorities = {
            BREAKER_RESETTERS_KEY: resetters,
            SLURM_BRIDGES_KEY: bridges or {},
            CHECK_REQUESTERS_KEY: check_requesters or {},
        }
        policy = api_policy(authorities)
        if (length := policy_length(self, policy)) > POLICY_LENGTH_QUOTA:
            keys = ", ".join(f'"{key}"' for key, authority in authorities.items() if authority) or "(none set)"
            fields = ", ".join(prop_name(key) for key, authority in authorities.items() if authority)
            raise ConfigError(
                f"context keys {keys} (HyperPodDhcProps {fields or '-'}): the API's resource policy would be "
                f"{length} characters, "
                f"above API Gateway's quota of {POLICY_LENGTH_QUOTA}: name fewer clusters or patterns (wildcards, "
                '"*"), or raise the quota and POLICY_LENGTH_QUOTA'
            )
        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=log_retention)
        # `$context.error.messageString` is already a quoted JSON string; every other field is quoted here.
        access_log_format = json.dumps(ACCESS_LOG_FORMAT)[:-1] + ', "error": ' + F.context_error_message_string() + "}"
        self.api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=f"{Stack.of(self).stack_name}-operator-api",
            description="hyperpod-dhc operator API (IAM/SigV4 on every method)",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            policy=policy,
            cloud_watch_role=False,  # the account-wide logging role is not this stack's (see module doc)
            default_method_options=apigw.MethodOptions(authorization_type=apigw.AuthorizationType.IAM),
            deploy_options=apigw.StageOptions(
                stage_name=STAGE_NAME,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.custom(access_log_format),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # never log request or response bodies
                tracing_enabled=True,
                throttling_rate_limit=THROTTLE_RATE_RPS,
                throttling_burst_limit=THROTTLE_BURST,
            ),
        )
        # A changed resource policy only takes effect with a new deployment of the stage: the policy is in its id.
        deployment = self.api.latest_deployment
        assert deployment is not None  # RestApi deploys a stage unless deploy=False
        deployment.add_to_logical_id({"policy": Stack.of(self).resolve(policy.to_json())})
        # RestApi adds an `Endpoint` output of its own; the stack exports the URL as `ApiEndpoint`.
        self.api.node.try_remove_child("Endpoint")

        integration = apigw.LambdaIntegration(handler, proxy=True, allow_test_invoke=False)
        self.methods: dict[tuple[str, str], apigw.Method] = {}
        for http_method, path in ROUTES:
            resource = self.api.root.resource_for_path(path)
            self.methods[(http_method, path)] = resource.add_method(
                http_method, integration, authorization_type=apigw.AuthorizationType.IAM
            )

        self.bridge_policy = self._bridge_policy()

        acknowledge(
            self.api,
            "AwsSolutions-APIG2",
            "Requests are validated in the Lambda with pydantic (Powertools APIGatewayRestResolver with "
            "enable_validation: path, query and body models), which answers 422 naming the bad field; an "
            "API Gateway request validator would duplicate those models in a second, weaker schema.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "IAM-authorized internal API: every method requires a SigV4 signature from a principal of this "
            "account with execute-api:Invoke, so anonymous traffic is rejected before the integration; "
            "stage throttling (20 rps, burst 40) bounds what an authorized caller can send. No WAF web ACL.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-COG4",
            "IAM auth is used: every method is AWS_IAM (SigV4) authorized, so operators call it with their "
            "own IAM roles and CloudTrail/access logs record the caller ARN; there are no end users and "
            "hence no Cognito user pool to authorize against.",
        )

    def _bridge_policy(self) -> iam.ManagedPolicy:
        """``execute-api:Invoke`` on exactly the bridge's methods of this API's stage (see the module doc)."""
        stage = self.api.deployment_stage.stage_name
        methods = [self.api.arn_for_execute_api(m, arn_path(p), stage) for m, p in BRIDGE_ROUTES]
        policy = iam.ManagedPolicy(
            self,
            "SlurmBridgePolicy",
            description="hyperpod-dhc Slurm bridge: attach to the execution role of the Slurm controller's group",
            statements=[iam.PolicyStatement(actions=["execute-api:Invoke"], resources=methods)],
        )
        for method in methods:
            acknowledge_wildcard_resource(
                policy,
                method,
                "The * is the path parameter {cluster}: the bridge of every cluster this controller watches calls "
                "the same two methods with the instance role of its Slurm controller's group. Which cluster a role "
                "may call them for is the API's resource policy's decision (hyperpod-dhc:slurm-bridges: every other "
                "principal is denied each cluster's bridge routes), and the API answers 404 for a cluster it does "
                "not watch; nothing else of the API is allowed.",
            )
        return policy

    @property
    def url(self) -> str:
        return self.api.url
