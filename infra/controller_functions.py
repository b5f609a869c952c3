"""The controller's eight Lambdas, their shared settings and the dependency layer.

``ControllerFunction`` is the only place that decides runtime, architecture, memory, logging, tracing
and the common environment; ``FUNCTIONS`` says what differs per Lambda (handler, timeout, HyperPod
actions). The code asset is the ``deephealth`` package as infra imports it (a checkout's ``functions/deephealth``
or the installed wheel's), nothing else; third-party packages come from ``DependenciesLayer``, built from the
``lambda`` dependency group of ``pyproject.toml`` by a local ``pip install`` (no Docker).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, Duration, ILocalBundling
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

import deephealth
from deephealth.domain.rounds import ROUND_STEPS
from infra.acknowledgements import acknowledge, acknowledge_wildcard_resource
from infra.cluster_access import grant_cluster_access
from infra.controller_config import ASSET_EXCLUDE, REPO_ROOT
from infra.dead_letter_queue import DeadLetterQueue
from infra.nodes_table import SAVED_INDEX

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
PYTHON_VERSION = "3.13"  # must match RUNTIME: the layer holds cp313 wheels (pydantic-core)
PIP_PLATFORM = "manylinux2014_aarch64"  # must match ARCHITECTURE
MEMORY_MB = 512
SERVICE_NAME = "hyperpod-dhc"
METRICS_NAMESPACE = "HyperPodDHC"
PYPROJECT = REPO_ROOT / "pyproject.toml"
DISTRIBUTION = "hyperpod-dhc"
LAMBDA_EXTRA = "lambda"  # the layer's pins
_EXTRA_MARKER = re.compile(rf'\s*;\s*extra\s*==\s*"{LAMBDA_EXTRA}"\s*$')


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
        "deephealth.handlers.intake.lambda_handler",
        60,
        "Turns HyperPod EventBridge events into node records and starts check rounds",
        ("DescribeCluster", "DescribeClusterNode", "ListClusterNodes", OBSERVE_OPERATIONS),
        reads_check_logs=True,
        invoked_async=True,
    ),
    "Reconcile": FunctionSpec(
        "deephealth.handlers.reconcile.lambda_handler",
        300,
        "Periodic sweep: finds nodes the events missed and stuck rounds",
        ("DescribeCluster", "ListClusterNodes", OBSERVE_OPERATIONS),
        reads_check_logs=True,
        lists_clusters=True,
        invoked_async=True,
    ),
    "ClaimRound": FunctionSpec(
        "deephealth.handlers.claim_round.lambda_handler",
        300,
        "Check round: claims the nodes of a round",
        ("DescribeCluster", "ListClusterNodes", OBSERVE_OPERATIONS),
        reads_check_logs=True,
    ),
    "StartCheck": FunctionSpec(
        "deephealth.handlers.start_check.lambda_handler",
        120,
        "Check round: starts the deep health check",
        ("DescribeCluster", "ListClusterNodes", "StartClusterHealthCheck", OBSERVE_OPERATIONS),
        reads_check_logs=True,
    ),
    "PollCheck": FunctionSpec(
        "deephealth.handlers.poll_check.lambda_handler",
        300,
        "Check round: polls node status and check results into verdicts",
        ("ListClusterNodes", "DescribeCluster", OBSERVE_OPERATIONS),
        reads_check_logs=True,
    ),
    "RecoverNodes": FunctionSpec(
        "deephealth.handlers.recover_nodes.lambda_handler",
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
        "deephealth.handlers.finish_round.lambda_handler",
        120,
        "Check round: records the outcome, releases the claim, chains the next round",
        ("DescribeCluster",),
    ),
    "Api": FunctionSpec(
        "deephealth.handlers.api.lambda_handler",
        30,
        "Operator REST API: cluster, group and node views; queues on-demand checks",
        ("DescribeCluster",),
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


def lambda_requirements() -> list[str]:
    """The layer's pins, the ``lambda`` extra: in a checkout pyproject.toml's, the one place they are written;
    installed, the distribution's metadata (a wheel carries its extras), so both read the same list."""
    project = tomllib.loads(PYPROJECT.read_text()).get("project", {}) if PYPROJECT.is_file() else {}
    if project.get("name") == DISTRIBUTION:
        return list(project["optional-dependencies"][LAMBDA_EXTRA])
    requires = importlib.metadata.requires(DISTRIBUTION) or []
    return [_EXTRA_MARKER.sub("", requirement) for requirement in requires if _EXTRA_MARKER.search(requirement)]


@functools.cache  # one copy per process; removed at exit, once synth has staged it into the cloud assembly
def _lambda_code_copy() -> tempfile.TemporaryDirectory[str]:
    copy = tempfile.TemporaryDirectory(prefix="hyperpod-dhc-lambda-code-")
    source = Path(deephealth.__file__).resolve().parent
    shutil.copytree(source, Path(copy.name) / "deephealth", ignore=shutil.ignore_patterns(*ASSET_EXCLUDE))
    return copy


def lambda_code_dir() -> Path:
    """A directory holding exactly the ``deephealth`` package infra imports, without bytecode: the code asset.

    A copy, because where the package lives holds more: a checkout's ``functions/`` the operator CLI, an installed
    wheel's site-packages everything else. The asset hash is a hash of relative paths and contents, so a copy hashes
    as ``functions/`` did with ``ASSET_EXCLUDE`` (an asset staged in place, ``aws:cdk:disable-asset-staging``, would
    point at the copy, which is gone when the app exits).
    """
    return Path(_lambda_code_copy().name)


@functools.cache  # asked once per process: every synth builds the layer construct
def runtime_python() -> str | None:
    """A CPython of the Lambda runtime's minor version on this machine (PATH, then pyenv), or None.

    Lambda's /opt is read-only, so a layer without bytecode is compiled from source on every cold start (about
    twice the import time, docs/BENCHMARKS.md). Bytecode is specific to the minor version, so only a 3.13
    interpreter can write what the 3.13 runtime reads.
    """
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates: list[str | None] = [
        str(d / "bin" / f"python{PYTHON_VERSION}") for d in sorted(pyenv.glob(f"{PYTHON_VERSION}.*"))
    ]
    candidates.append(shutil.which(f"python{PYTHON_VERSION}"))  # may be a pyenv shim: asked below, like the rest
    for candidate in filter(None, candidates):
        try:
            answer = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
        except OSError:
            continue
        if answer.returncode == 0 and answer.stdout.strip() == PYTHON_VERSION:
            return candidate
    return None


def compile_bytecode(python: str, directory: Path) -> None:
    """Write `python`'s bytecode for every module under `directory`, valid without checking the sources.

    unchecked-hash: valid whatever the files' mtimes in the zip; the layer never changes in place. A file that
    does not compile (none today) is compiled at import instead, as without this step.
    """
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(directory)],
        capture_output=True,
        check=False,
    )


@jsii.implements(ILocalBundling)
class PipInstall:
    """Local bundling: ``pip install`` Linux ARM64 CPython 3.13 wheels into ``<output>/python``, then, when a
    3.13 interpreter is at hand, compile them to bytecode the runtime reads without checking sources.

    Raises instead of returning False, so CDK never falls back to Docker (there is none here).
    """

    def __init__(self, requirements: Sequence[str], compiler: str | None = None, platform: str = PIP_PLATFORM) -> None:
        self.requirements = list(requirements)
        self.compiler = compiler
        self.platform = platform  # another platform only for measuring here (tests/bench/coldstart.py)

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: Any) -> bool:
        command = [
            sys.executable, "-m", "pip", "install",
            "--quiet", "--disable-pip-version-check", "--no-compile",
            "--target", str(Path(output_dir) / "python"),
            "--platform", self.platform,
            "--only-binary=:all:",
            "--python-version", PYTHON_VERSION,
            "--implementation", "cp",
            *self.requirements,
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building the dependency layer failed (pip exit {result.returncode}):\n{result.stderr}")
        if self.compiler:
            compile_bytecode(self.compiler, Path(output_dir) / "python")
        return True


class DependenciesLayer(lambda_.LayerVersion):
    """The ``lambda`` dependency group of pyproject.toml (boto3, powertools[parser], pydantic)."""

    def __init__(self, scope: Construct, id: str, *, requirements: Sequence[str] | None = None) -> None:
        requirements = list(lambda_requirements() if requirements is None else requirements)
        compiler = runtime_python()
        # The pinned requirement list, the target platform and whether bytecode is included fully determine the
        # bundle, so they are its hash: no fingerprinting of the source directory, and an unchanged layer is not
        # rebuilt.
        bundle = [requirements, PIP_PLATFORM, PYTHON_VERSION, "bytecode" if compiler else "source"]
        asset_hash = hashlib.sha256(json.dumps(bundle).encode()).hexdigest()
        super().__init__(
            scope,
            id,
            code=lambda_.Code.from_asset(
                str(Path(__file__).resolve().parent),  # unused by the local bundler (it reads no source files)
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=asset_hash,
                bundling=BundlingOptions(
                    image=RUNTIME.bundling_image,  # required by the API; never used
                    local=PipInstall(requirements, compiler),
                ),
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=f"hyperpod-dhc runtime dependencies: {', '.join(requirements)}"[:256],
        )


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
