"""HyperPodDhcStack: composes the constructs; all decisions live in the construct modules."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from constructs import Construct

from infra.audit_queries import AuditQueries
from infra.controller_config import (
    config_parameter,
    read_breaker_resetters,
    read_check_requesters,
    read_controller_config,
    read_deletion_protection,
    read_notification_email,
    read_slurm_bridges,
    retention,
)
from infra.controller_functions import ROUND_STARTERS, ControllerFunctions
from infra.nodes_table import NodesTable
from infra.notifications import Notifications
from infra.operations_dashboard import OperationsDashboard
from infra.operator_api import OperatorApi
from infra.round_workflow import RoundWorkflow
from infra.triggers import Triggers


class HyperPodDhcStack(Stack):
    def __init__(self, scope: Construct, id: str, **kwargs: Any) -> None:
        super().__init__(scope, id, description="hyperpod-dhc: deep health checks for HyperPod Slurm nodes", **kwargs)
        Tags.of(self).add("project", "hyperpod-dhc")
        self.config = read_controller_config(self)  # raises ConfigError naming the bad keys
        log_retention = retention(self.config)
        notification_email = read_notification_email(self)  # raises ConfigError naming the key
        resetters = read_breaker_resetters(self, self.config)  # raises ConfigError naming the key
        bridges = read_slurm_bridges(self, self.config)  # raises ConfigError naming the key
        check_requesters = read_check_requesters(self, self.config)  # raises ConfigError naming the key

        self.table = NodesTable(self, "Nodes", deletion_protection=read_deletion_protection(self))
        self.config_parameter = config_parameter(self, "ControllerConfig", self.config)
        self.functions = ControllerFunctions(
            self,
            "Functions",
            table=self.table,
            config_parameter=self.config_parameter,
            log_retention=log_retention,
            list_clusters=self.config.clusters == "all",
        )
        self.notifications = Notifications(self, "Notifications", email=notification_email)
        for function in self.functions:
            self.notifications.add_publisher(function)
        self.workflow = RoundWorkflow(
            self,
            "RoundWorkflow",
            tasks=self.functions.round_tasks,
            starters=[self.functions[name] for name in ROUND_STARTERS],
            log_retention=log_retention,
        )
        self.triggers = Triggers(
            self,
            "Triggers",
            config=self.config,
            intake=self.functions["Intake"],
            reconcile=self.functions["Reconcile"],
        )
        self.operator_api = OperatorApi(
            self,
            "OperatorApi",
            handler=self.functions["Api"],
            log_retention=log_retention,
            resetters=resetters,
            bridges=bridges,
            check_requesters=check_requesters,
        )
        self.dashboard = OperationsDashboard(
            self,
            "Operations",
            config=self.config,
            state_machine=self.workflow.state_machine,
            dead_letter_queues={
                "undelivered-events": self.triggers.undelivered,
                **{
                    f"{name.lower()}-failed-invocations": fn.failed_invocations
                    for name, fn in self.functions.functions.items()
                    if fn.failed_invocations is not None
                },
            },
            functions=self.functions.functions,
            topic=self.notifications.topic,
            api=self.operator_api.api,
            slurm_bridges=bridges,
        )
        self.audit_queries = AuditQueries(
            self, "AuditQueries", log_groups=[function.log_group for function in self.functions]
        )

        CfnOutput(self, "RoundStateMachineArn", value=self.workflow.state_machine.state_machine_arn)
        CfnOutput(self, "NodesTableName", value=self.table.table_name)
        CfnOutput(self, "ConfigParameterName", value=self.config_parameter.parameter_name)
        CfnOutput(self, "NotificationsTopicArn", value=self.notifications.topic.topic_arn)
        CfnOutput(self, "ApiEndpoint", value=self.operator_api.url, description="Stage URL of the operator API")
        CfnOutput(self, "ApiId", value=self.operator_api.api.rest_api_id)
        CfnOutput(
            self,
            "SlurmBridgePolicyArn",
            value=self.operator_api.bridge_policy.managed_policy_arn,
            description="Attach to the execution role of each cluster's Slurm controller group (the Slurm bridge), "
            "and name that role for its cluster in hyperpod-dhc:slurm-bridges",
        )
