"""What each Lambda may do to HyperPod clusters, as one ``<Id>ClusterAccess`` policy per function.

HyperPod cluster ARNs end in the 12-character cluster id (``cluster/a1b2c3d4e5f6``), not the cluster
name, and the id is only known once a cluster exists. So the configured cluster *names* cannot scope
the resource; every statement uses ``cluster/*`` in this account and region, and the code filters by
name (``ControllerConfig.watches``). The actions are the minimum each function calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from hyperpod_dhc.infra.acknowledgements import acknowledge_wildcard_resource

# HyperPod writes deep-health-check results to /aws/sagemaker/Clusters/<cluster name>/<cluster id>.
CHECK_LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters/"

_CLUSTER_REASON = (
    "HyperPod cluster ARNs carry the 12-character cluster id, not the name, so configured cluster names "
    "cannot scope the ARN; access is limited to clusters of this account and region (cluster/*) and "
    "to the listed {actions} actions, and the function filters clusters by configured name."
)
_CHECK_LOGS_REASON = (
    "Deep health check results are written by HyperPod to /aws/sagemaker/Clusters/<name>/<cluster id> "
    "with one DeepHealthCheckResults/<id> stream per check; the id is unknown before the cluster "
    "exists, so logs:FilterLogEvents is limited to that prefix in this account and region."
)


def grant_cluster_access(
    scope: Construct,
    id: str,
    function: lambda_.Function,
    *,
    sagemaker_actions: Sequence[str],
    list_clusters: bool = False,
    read_check_logs: bool = False,
) -> iam.Policy | None:
    """Attach the HyperPod permissions of one function; returns None when it needs none."""
    stack = Stack.of(scope)
    statements: list[iam.PolicyStatement] = []
    wildcards: list[tuple[str, str]] = []
    if sagemaker_actions:
        clusters = stack.format_arn(service="sagemaker", resource="cluster", resource_name="*")
        statements.append(
            iam.PolicyStatement(
                sid="HyperPodClusters",
                actions=[f"sagemaker:{action}" for action in sagemaker_actions],
                resources=[clusters],
            )
        )
        wildcards.append((clusters, _CLUSTER_REASON.format(actions=", ".join(sagemaker_actions))))
    if list_clusters:
        statements.append(
            iam.PolicyStatement(
                sid="ListHyperPodClusters",
                actions=["sagemaker:ListClusters"],
                resources=["*"],  # ListClusters has no resource type: "*" is the only valid resource
            )
        )
        wildcards.append(
            (
                "*",
                "sagemaker:ListClusters supports no resource-level permission (the service authorization "
                'reference lists no resource type, so "*" is required); it is granted only because '
                'clusters is "all", and it is the only action in its statement.',
            )
        )
    if read_check_logs:
        groups = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{CHECK_LOG_GROUP_PREFIX}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        streams = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{CHECK_LOG_GROUP_PREFIX}*:log-stream:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        statements.append(
            iam.PolicyStatement(
                sid="ReadDeepHealthCheckResults",
                actions=["logs:FilterLogEvents"],
                resources=[groups, streams],
            )
        )
        wildcards += [(groups, _CHECK_LOGS_REASON), (streams, _CHECK_LOGS_REASON)]
    if not statements:
        return None
    assert function.role is not None
    policy = iam.Policy(scope, id, statements=statements, roles=[function.role])
    function.node.add_dependency(policy)  # no invocation before its permissions exist
    for resource, reason in wildcards:
        acknowledge_wildcard_resource(policy, resource, reason)
    return policy
