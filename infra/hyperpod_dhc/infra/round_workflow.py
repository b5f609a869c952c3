"""The check-round state machine (``statemachines/check_round.asl.json``) and who may start it.

The machine has a fixed name, ``<stack name>-check-round``, so its ARN is a plain ``format_arn``: the
Lambdas that start rounds (one of which, FinishRound, is also a task of the machine) get the ARN in
``ROUND_STATE_MACHINE_ARN`` without a reference to the machine, hence without a dependency cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from hyperpod_dhc.infra.acknowledgements import acknowledge_wildcard_resource

DEFINITION_FILE = Path(__file__).resolve().parent / "statemachines" / "check_round.asl.json"
ENV_STATE_MACHINE_ARN = "ROUND_STATE_MACHINE_ARN"


def placeholder(task: str) -> str:
    """The ASL placeholder naming a task function: ``ClaimRound`` -> ``ClaimRoundFunctionArn``."""
    return f"{task}FunctionArn"


class RoundWorkflow(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        tasks: Mapping[str, lambda_.IFunction],
        starters: Sequence[lambda_.Function],
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.state_machine_name = f"{stack.stack_name}-check-round"
        self.state_machine_arn = stack.format_arn(
            service="states",
            resource="stateMachine",
            resource_name=self.state_machine_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        executions_arn = stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{self.state_machine_name}:*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

        log_group = logs.LogGroup(self, "Logs", retention=log_retention, removal_policy=RemovalPolicy.RETAIN)
        # The definition goes into the template verbatim as DefinitionString; CloudFormation fills the
        # `${<Task>FunctionArn}` placeholders from DefinitionSubstitutions. (`DefinitionBody.from_file`
        # would upload it to S3 as DefinitionS3Location instead, out of reach of template tests.)
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_name=self.state_machine_name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(DEFINITION_FILE.read_text()),
            definition_substitutions={placeholder(name): fn.function_arn for name, fn in tasks.items()},
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True,
        )
        role = self.state_machine.role
        for name, fn in tasks.items():
            fn.grant_invoke(role)
            acknowledge_wildcard_resource(
                role,
                f"{fn.function_arn}:*",
                f"grant_invoke adds <{name} ARN>:* so that versions and aliases of the {name} function "
                "can be invoked; it is one function, not a wildcard over functions.",
            )
        acknowledge_wildcard_resource(
            role,
            "*",
            "Step Functions logging (logs:CreateLogDelivery, GetLogDelivery, UpdateLogDelivery, "
            "DeleteLogDelivery, ListLogDeliveries, PutResourcePolicy, DescribeResourcePolicies, "
            "DescribeLogGroups) and X-Ray tracing (xray:PutTraceSegments, PutTelemetryRecords, "
            'GetSamplingRules, GetSamplingTargets) support no resource-level permissions; "*" is required.',
        )

        for fn in starters:
            fn.add_environment(ENV_STATE_MACHINE_ARN, self.state_machine_arn)
            fn.add_to_role_policy(
                iam.PolicyStatement(
                    sid="StartCheckRounds", actions=["states:StartExecution"], resources=[self.state_machine_arn]
                )
            )
            fn.add_to_role_policy(
                iam.PolicyStatement(
                    sid="DescribeCheckRounds", actions=["states:DescribeExecution"], resources=[executions_arn]
                )
            )
            assert fn.role is not None
            acknowledge_wildcard_resource(
                fn.role,
                executions_arn,
                f"Execution ARNs end in the execution name, chosen per round at run time; the wildcard "
                f"covers only executions of the {self.state_machine_name} state machine.",
            )
