"""The controller's state: one item per node and per round, keyed ``pk``/``sk`` (single-table design)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from constructs import Construct

from hyperpod_dhc.deephealth.adapters.node_table import SAVED_INDEX  # the code's name for it: one name


class NodesTable(ddb.TableV2):
    def __init__(self, scope: Construct, id: str, *, deletion_protection: bool = True) -> None:
        super().__init__(
            scope,
            id,
            partition_key=ddb.Attribute(name="pk", type=ddb.AttributeType.STRING),
            sort_key=ddb.Attribute(name="sk", type=ddb.AttributeType.STRING),
            billing=ddb.Billing.on_demand(),
            # Node items by when they were saved: the Slurm bridge's idle pass asks "anything since t?" and reads
            # at most one key (adapters/node_table.py SAVED_INDEX), not the cluster.
            global_secondary_indexes=[
                ddb.GlobalSecondaryIndexPropsV2(
                    index_name=SAVED_INDEX,
                    partition_key=ddb.Attribute(name="pk", type=ddb.AttributeType.STRING),
                    sort_key=ddb.Attribute(name="saved_at", type=ddb.AttributeType.NUMBER),
                    projection_type=ddb.ProjectionType.KEYS_ONLY,
                )
            ],
            # Encrypted at rest with KMS, under the AWS managed key `aws/dynamodb`, on purpose: only DynamoDB may
            # use it, for principals of this account (its key policy: kms:ViaService + kms:CallerAccount), every
            # use is in CloudTrail, and AWS rotates it. Access is decided by IAM: the functions' roles hold only
            # the five item actions on this table. A customer-managed key would have to outlive the stack with
            # the retained table (a deleted or disabled key makes the node history unreadable), and every role
            # would need DynamoDB's wildcard key actions (kms:GenerateDataKey*, kms:ReEncrypt*), which this stack
            # keeps out of its policies; the table holds node states and verdicts, no secrets. Asserted by
            # tests/infra/test_security.py.
            encryption=ddb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=ddb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=deletion_protection,
            # The node history (attempts, quarantines) outlives the stack; delete the table by hand.
            removal_policy=RemovalPolicy.RETAIN,
        )
