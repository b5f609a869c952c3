"""The controller's eight Lambdas and their shared settings.

``ControllerFunction`` is the only place that decides runtime, architecture, memory, logging, tracing
and the common environment; ``FUNCTIONS`` says what differs per Lambda (handler, timeout, HyperPod
actions). What they run (runtime, code asset, dependency layer) is ``infra/hyperpod_dhc/infra/lambda_assets.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from hyperpod_dhc.deephealth.domain.rounds import ROUND_STEPS
from hyperpod_dhc.infra.acknowledgements import acknowledge, acknowledge_wildcard_resource
from hyperpod_dhc.infra.cluster_access import grant_cluster_access
from hyperpod_dhc.infra.dead_letter_queue import DeadLetterQueue
from hyperpod_dhc.infra.lambda_assets import ARCHITECTURE, PYTHON_VERSION, RUNTIME, DependenciesLayer, lambda_code_dir
from hyperpod_dhc.infra.nodes_table import SAVED_INDEX

MEMORY_MB = 512
SERVICE_NAME = "hyperpod-dhc"
METRICS_NAMESPACE = "HyperPodDHC"


@dataclass(frozen=True)
class FunctionSpec:
    """What a function's code calls decides its grants: every call its handler can reach, nothing more.
    `tests/simulation/test_iam.py` runs the twin with IAM enforced and fails on a call without a grant and on
    a grant no run uses (or that its NOT_EXERCISED table does not name with the code path that needs it)."""

    handler: str
    timeout_s: int
    description: str
    sagemaker_actions: tuple[str, ...] = ()
    reads_check_logs: bool = False  # logs:FilterLogEvents on HyperPod's result logs (a cluster observation)
    lists_clusters: bool = False  # only granted when the config watches "all" clusters
    invoked_async: bool = False  # by EventBridge: gets an on-failure DLQ and 2 retries


# A cluster observation (observe_cluster) asks whether a check operation is active when a node's status cannot
# tell (stuck in, or never in, its check); Start check asks it before requesting a check and on a refusal;
# Recover nodes before acting on a node still showing DeepHealthCheckInProgress.
OBSERVE_OPERATIONS = "ListClusterOperations"

FUNCTIONS: Mapping[str, FunctionSpec] = {
    "Intake": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.intake.lambda_handler",
        60,
        "Turns HyperPod EventBridge events into node records and starts check rounds",
        ("DescribeCluster", "DescribeClusterNode", "ListClusterNodes", OBSERVE_OPERATIONS),
        reads_check_logs=True,
        invoked_async=True,
    ),
    "Reconcile": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.reconcile.lambda_handler",
        300,
        "Periodic sweep: finds nodes the events missed and stuck rounds",
        ("DescribeCluster", "ListClusterNodes", OBSERVE_OPERATIONS),
        reads_check_logs=True,
        lists_clusters=True,
        invoked_async=True,
    ),
    "ClaimRound": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.claim_round.lambda_handler",
        300,
        "Check round: claims the nodes of a round",
        ("DescribeCluster", "ListClusterNodes", OBSERVE_OPERATIONS),
        reads_check_logs=True,
    ),
    "StartCheck": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.start_check.lambda_handler",
        120,
        "Check round: starts the deep health check",
        ("DescribeCluster", "ListClusterNodes", "StartClusterHealthCheck", OBSERVE_OPERATIONS),
        reads_check_logs=True,
    ),
    "PollCheck": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.poll_check.lambda_handler",
        300,
        "Check round: polls node status and check results into verdicts",
        ("ListClusterNodes", "DescribeCluster", OBSERVE_OPERATIONS),
        reads_check_logs=True,
    ),
    "RecoverNodes": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.recover_nodes.lambda_handler",
        300,
        "Check round: reboots or replaces failed nodes",
        # ListClusterEvents: did HyperPod act on a failed node during its grace (NodeRecovery=Automatic)
        # ListClusterOperations: a node left in DeepHealthCheckInProgress is isolated, not busy, once no check runs
        (
            "DescribeCluster",
            "BatchRebootClusterNodes",
            "BatchReplaceClusterNodes",
            "ListClusterEvents",
            OBSERVE_OPERATIONS,
        ),
    ),
    "FinishRound": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.finish_round.lambda_handler",
        120,
        "Check round: records the outcome, releases the claim, chains the next round",
        ("DescribeCluster",),
    ),
    "Api": FunctionSpec(
        "hyperpod_dhc.deephealth.handlers.api.lambda_handler",
        30,
        "Operator REST API: cluster, group and node views; queues on-demand checks; captures a node's check",
        ("DescribeCluster",),
        reads_check_logs=True,  # GET .../nodes/{node}/capture (hpdhc readings capture)
    ),
}
# Exactly the DynamoDB calls of the code (adapters/node_table.py), instead of grant_read_write_data's twelve
# actions (Scan, Batch*, stream reads...); tests/infra/test_security.py fails when code and grant drift apart.
TABLE_ACTIONS = (
    "dynamodb:BatchGetItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
)
# The SSM call of the code (adapters/config_store.py, through Powertools' parameters utility).
CONFIG_ACTIONS = ("ssm:GetParameter",)
# The functions that start check rounds (ROUND_STATE_MACHINE_ARN, states:StartExecution/DescribeExecution).
ROUND_STARTERS = ("Intake", "Reconcile", "FinishRound", "Api")


@dataclass(frozen=True)
class SharedSettings:
    code: lambda_.Code
    layer: lambda_.ILayerVersion
    log_retention: logs.RetentionDays
    environment: Mapping[str, str] = field(default_factory=dict)


class ControllerFunction(lambda_.Function):
    """One controller Lambda with its own role (no managed policies) and log group.

    Siblings ``<id>Role``, ``<id>Logs`` and, for async invocations, ``<id>FailedInvocations`` are
    created in the same scope.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: SharedSettings,
        handler: str,
        timeout: Duration,
        description: str,
        invoked_async: bool = False,
    ) -> None:
        log_group = logs.LogGroup(scope, f"{id}Logs", retention=settings.log_retention)
        role = iam.Role(
            scope,
            f"{id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"hyperpod-dhc {id} Lambda",
        )
        # Instead of AWSLambdaBasicExecutionRole (which allows any log group): this one only.
        log_group.grant_write(role)
        failed = (
            DeadLetterQueue(scope, f"{id}FailedInvocations", holds=f"async invocations of {id} that failed")
            if invoked_async
            else None
        )
        super().__init__(
            scope,
            id,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=settings.code,
            handler=handler,
            layers=[settings.layer],
            memory_size=MEMORY_MB,
            timeout=timeout,
            description=description,
            role=role,
            environment={
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "POWERTOOLS_LOG_LEVEL": "INFO",
                **settings.environment,
            },
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            dead_letter_queue=failed,
            retry_attempts=2 if invoked_async else None,
        )
        self.failed_invocations = failed
        if failed is not None:
            failed.grant_send(role)  # Lambda sends to the (KMS-encrypted) on-failure queue with this role
        acknowledge_wildcard_resource(
            role,
            "*",
            "tracing=ACTIVE adds xray:PutTraceSegments and xray:PutTelemetryRecords, which support no "
            'resource-level permissions ("*" is the only valid resource); no other action of this role '
            "uses *.",
        )
        if RUNTIME.name != _latest_python().name:
            acknowledge(
                self,
                "AwsSolutions-L1",
                f"{RUNTIME.name} is pinned on purpose: the dependency layer is built for CPython "
                f"{PYTHON_VERSION} wheels (pydantic-core is compiled), so runtime and layer move together.",
            )


def _latest_python() -> lambda_.Runtime:
    latest = lambda_.Runtime.PYTHON_3_13
    for minor in range(14, 20):
        runtime = getattr(lambda_.Runtime, f"PYTHON_3_{minor}", None)
        if runtime is not None and not runtime.is_variable:
            latest = runtime
    return latest


class ControllerFunctions(Construct):
    """The Lambdas of ``FUNCTIONS``, wired to the table and the configuration parameter."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        table: ddb.ITableV2,
        config_parameter: ssm.IStringParameter,
        log_retention: logs.RetentionDays,
        list_clusters: bool,
    ) -> None:
        super().__init__(scope, id)
        self.layer = DependenciesLayer(self, "Dependencies")
        settings = SharedSettings(
            code=lambda_.Code.from_asset(str(lambda_code_dir())),
            layer=self.layer,
            log_retention=log_retention,
            environment={
                "TABLE_NAME": table.table_name,
                "CONFIG_PARAMETER_NAME": config_parameter.parameter_name,
            },
        )
        self.functions: dict[str, ControllerFunction] = {}
        for name, spec in FUNCTIONS.items():
            function = ControllerFunction(
                self,
                name,
                settings=settings,
                handler=spec.handler,
                timeout=Duration.seconds(spec.timeout_s),
                description=spec.description,
                invoked_async=spec.invoked_async,
            )
            # The table and its one index by name (table.grant would add <table>/index/*): every function loads
            # records through the index of what was saved since (NodeTable.load_cluster, warm).
            iam.Grant.add_to_principal(grantee=function, actions=list(TABLE_ACTIONS), resource_arns=[table.table_arn])
            index = f"{table.table_arn}/index/{SAVED_INDEX}"
            iam.Grant.add_to_principal(grantee=function, actions=["dynamodb:Query"], resource_arns=[index])
            # Only the call the code makes (grant_read would add ssm:GetParameters, GetParameterHistory and
            # DescribeParameters, none of which any function calls).
            iam.Grant.add_to_principal(
                grantee=function, actions=list(CONFIG_ACTIONS), resource_arns=[config_parameter.parameter_arn]
            )
            grant_cluster_access(
                self,
                f"{name}ClusterAccess",
                function,
                sagemaker_actions=spec.sagemaker_actions,
                list_clusters=spec.lists_clusters and list_clusters,
                read_check_logs=spec.reads_check_logs,
            )
            self.functions[name] = function

    def __getitem__(self, name: str) -> ControllerFunction:
        return self.functions[name]

    def __iter__(self) -> Iterator[ControllerFunction]:
        return iter(self.functions.values())

    @property
    def round_tasks(self) -> dict[str, ControllerFunction]:
        """The state machine's Task functions: the round's steps, in the order of the ASL placeholders
        (``${<step>FunctionArn}``)."""
        return {name: self.functions[name] for name in ROUND_STEPS}
