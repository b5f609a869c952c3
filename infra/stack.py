"""HyperPodDhcStack: composes the constructs; all decisions live in the construct modules."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from constructs import Construct

from infra.controller_config import (
    config_parameter,
    read_controller_config,
    read_deletion_protection,
    retention,
)
from infra.controller_functions import ControllerFunctions
from infra.nodes_table import NodesTable
from infra.round_workflow import RoundWorkflow
from infra.triggers import Triggers


class HyperPodDhcStack(Stack):
    def __init__(self, scope: Construct, id: str, **kwargs: Any) -> None:
        super().__init__(scope, id, description="hyperpod-dhc: deep health checks for HyperPod Slurm nodes", **kwargs)
        Tags.of(self).add("project", "hyperpod-dhc")
        self.config = read_controller_config(self)  # raises ConfigError naming the bad keys
        log_retention = retention(self.config)

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
        self.workflow = RoundWorkflow(
            self,
            "RoundWorkflow",
            tasks=self.functions.round_tasks,
            starters=[self.functions[name] for name in ("Intake", "Reconcile", "FinishRound")],
            log_retention=log_retention,
        )
        self.triggers = Triggers(
            self,
            "Triggers",
            config=self.config,
            intake=self.functions["Intake"],
            reconcile=self.functions["Reconcile"],
        )

        CfnOutput(self, "RoundStateMachineArn", value=self.workflow.state_machine.state_machine_arn)
        CfnOutput(self, "NodesTableName", value=self.table.table_name)
        CfnOutput(self, "ConfigParameterName", value=self.config_parameter.parameter_name)
