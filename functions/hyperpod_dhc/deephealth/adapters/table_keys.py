"""The nodes table's keys and its one conditional write, shared by the adapters of its items (node_table: nodes,
cluster documents, registry; round_item: the round item)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hyperpod_dhc.deephealth.adapters import aws

NODE_PREFIX = "NODE#"
ROUND_SK = "ROUND"
SAFETY_SK = "SAFETY"
READINGS_SK = "READINGS"
INFO_SK = "INFO"  # the cluster's last DescribeCluster answer, shared by every function (Context.describe)
NOT_SLURM_SK = "NOT_SLURM"  # the cluster ARN a "not a Slurm cluster" alert was sent for (one alert per cluster)
REGISTRY_PK = "CLUSTERS"


def Key(name: str) -> Any:
    """boto3's ``Key`` condition, imported on first use (it imports boto3, which the first call needs anyway)."""
    return aws.conditions().Key(name)


def Attr(name: str) -> Any:
    """boto3's ``Attr`` condition, imported on first use."""
    return aws.conditions().Attr(name)


def cluster_pk(cluster: str) -> str:
    return f"CLUSTER#{cluster}"


def conditional(write: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """Make one conditional write: DynamoDB's answer, None when its condition did not hold (any other error is
    raised)."""
    try:
        return write()
    except aws.ClientError as err:
        if err.response["Error"]["Code"] == "ConditionalCheckFailedException":
            return None
        raise


def written(write: Callable[[], dict[str, Any]]) -> bool:
    """`conditional`, as whether the write was made."""
    return conditional(write) is not None
