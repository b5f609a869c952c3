"""The controller's state: one item per node and per round, keyed ``pk``/``sk`` (single-table design)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from constructs import Construct


class NodesTable(ddb.TableV2):
    def __init__(self, scope: Construct, id: str, *, deletion_protection: bool = True) -> None:
        super().__init__(
            scope,
            id,
            partition_key=ddb.Attribute(name="pk", type=ddb.AttributeType.STRING),
            sort_key=ddb.Attribute(name="sk", type=ddb.AttributeType.STRING),
            billing=ddb.Billing.on_demand(),
            encryption=ddb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=ddb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=deletion_protection,
            # The node history (attempts, quarantines) outlives the stack; delete the table by hand.
            removal_policy=RemovalPolicy.RETAIN,
        )
