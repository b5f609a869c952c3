"""``make deploy-moto``: the whole ``make deploy`` path against moto's server standing in for AWS.

    python -m tests.deploy [--keep DIR]

Steps, each checked (not only its exit code: unpatched moto lets `cdk deploy` exit 0 with half a stack):
  1. moto's server (with tests/deploy/moto_shim.py) and a HyperPod Slurm cluster ``ml-cluster`` in it
  2. ``make plan`` with README's example file refuses, before any CloudFormation call: not CDK-bootstrapped
  3. ``cdk bootstrap``
  4. ``make deploy``: preflight, synth, plan, asset publishing (S3), the deploy role, change set, execution;
     then boto3 finds every resource moto models (table and index, state machine, functions, layer, config
     parameter, topic, API methods, rules, alarms, dashboard) and the stack's outputs
  5. ``make deploy`` again: the update path (a change set with no changes); its plan says nothing changes
  6. ``make plan`` with a webhook whose path is a token: the plan lists the one subscription it adds, by host,
     against the deployed template (GetTemplate), and prints the token nowhere
  7. ``make destroy``: the stack, its functions and state machine are gone, the nodes table is retained
  8. the resource types moto does not model are exactly those docs/DEVELOPING.md lists as untested
Everything goes through AWS_ENDPOINT_URL; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3

from tests.harness.node import venv_node_first

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "infra" / "hyperpod_dhc" / "infra" / "deploy.example.toml"
CDK = REPO / ".venv" / "cdk-cli" / "node_modules" / ".bin" / "cdk"
STACK = "HyperPodDhc"
ACCOUNT, REGION = "123456789012", "us-west-2"  # moto's default account; the example file's region
# What moto 5.2.5's CloudFormation does not model (it logs "No Moto CloudFormation support for X" and counts the
# resource created): these are deployed by nothing here. The shim stands in for the GlobalTable and the alarms.
NOT_MODELLED = {
    "AWS::ApiGateway::Stage",
    "AWS::CDK::Metadata",
    "AWS::Lambda::EventInvokeConfig",
    "AWS::Logs::QueryDefinition",
    "AWS::S3::BucketPolicy",  # the bootstrap's
    "AWS::SNS::Subscription",  # the example file's email subscription
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="keep the server's log and the assembly in DIR")
    args = parser.parse_args(argv)
    return against_moto("deploy-moto", args.keep, _deploy_moto_steps)


def _deploy_moto_steps(step: Step, env: dict[str, str], work: Path) -> str:
    """The steps of `make deploy-moto`, in order; the last one's name."""
    step("1. moto's server and a HyperPod Slurm cluster ml-cluster", lambda: _cluster("ml-cluster"))
    step("2. make plan before bootstrap refuses", lambda: _refuses_unbootstrapped(env))
    bootstrap = [str(CDK), "bootstrap", f"aws://{ACCOUNT}/{REGION}", "--no-notices"]
    step("3. cdk bootstrap", lambda: _run(bootstrap, env))
    assembly = work / "cdk.out"
    deploy = [sys.executable, "-m", "hyperpod_dhc.infra.deploy", "deploy", "--config", str(EXAMPLE), "--yes"]
    deploy += ["--cdk", str(CDK), "--output", str(assembly)]
    step("4. make deploy (create)", lambda: (_run(deploy, env), _deployed()))
    step("5. make deploy again (update, no changes)", lambda: (_unchanged(deploy, env), _deployed()))
    step("6. make plan of a token webhook: the change, by host", lambda: _plans_a_webhook(env, work))
    destroy = [sys.executable, "-m", "hyperpod_dhc.infra.deploy", "destroy", "--config", str(EXAMPLE), "--yes"]
    destroy += ["--cdk", str(CDK), "--output", str(assembly)]
    step("7. make destroy", lambda: (_run(destroy, env), _destroyed()))
    step("8. the types moto does not model are the documented ones", lambda: _not_modelled(work / "moto.log"))
    return "destroy"


class StepFailed(RuntimeError):
    pass


Step = Callable[[str, Callable[[], object]], None]


def against_moto(target: str, keep: Path | None, steps: Callable[[Step, dict[str, str], Path], str]) -> int:
    """`make <target>`'s frame (deploy-moto, deploy-bundle-moto): moto's server on a free port, its log in the work
    directory (`keep`, else a temporary one); `steps` run against it, this process's boto3 pointed at it too; the
    server stopped whatever happens. 0 when every step passed, 1 at the first that failed."""
    work = keep or Path(tempfile.mkdtemp(prefix=f"hyperpod-dhc-{target}-"))
    work.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = _environment(port, work)
    log = (work / "moto.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.deploy.moto_server", str(port)], cwd=REPO, env=env, stdout=log, stderr=log
    )
    started = time.monotonic()
    try:
        os.environ.update(env)  # this process's boto3 checks go to the same server
        _wait_for(f"{env['AWS_ENDPOINT_URL']}/moto-api/", server)
        last = steps(_stepper(started), env, work)
    except StepFailed as err:
        print(f"make {target}: {err} (server log: {work / 'moto.log'})", file=sys.stderr)
        return 1
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    print(f"make {target}: every step passed in {time.monotonic() - started:.0f} s; last step: {last}")
    return 0


def _stepper(started: float) -> Step:
    def step(name: str, run: Callable[[], object]) -> None:
        print(f"== {name}", flush=True)
        try:
            run()
        except (AssertionError, subprocess.CalledProcessError, KeyError) as err:
            raise StepFailed(f"{name}: {type(err).__name__}: {err}") from err
        print(f"== {name}: ok (t+{time.monotonic() - started:.0f} s)", flush=True)

    return step


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _environment(port: int, work: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AWS_", "CDK_")) or key == "AWS_CA_BUNDLE"
    }
    # Connections go to 127.0.0.1, where the server listens (whatever "localhost" resolves to first); the CDK CLI
    # switches S3 to path-style for a loopback endpoint by itself. The template URLs it hands CloudFormation say
    # "localhost": moto reads a TemplateURL as path-style (bucket/key) only then.
    env.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ENDPOINT_URL_S3_FOR_CLOUDFORMATION=f"http://localhost:{port}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        AWS_REGION=REGION,
        AWS_CONFIG_FILE=str(work / "aws-config"),  # no ~/.aws leaks in
        AWS_SHARED_CREDENTIALS_FILE=str(work / "aws-credentials"),
        CDK_HOME=str(work / "cdk-home"),
        CDK_DISABLE_CLI_TELEMETRY="true",
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "functions")]),
    )
    venv_node_first(env)  # the CDK CLI and jsii on make install's Node.js 22 LTS, with or without make
    return env


def _wait_for(url: str, server: subprocess.Popen[bytes]) -> None:
    for _ in range(150):
        if server.poll() is not None:
            raise StepFailed(f"moto's server exited ({server.returncode})")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise StepFailed("moto's server did not answer in 30 s")


def _run(command: list[str], env: dict[str, str]) -> None:
    subprocess.run(command, cwd=REPO, env=env, check=True)


def _unchanged(deploy: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(deploy, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    print(result.stdout, end="")
    print(result.stderr, end="", file=sys.stderr)
    assert result.returncode == 0, result.returncode
    none = "  changes to the deployed stack: none (the same resources, properties and parameters)\n"
    assert none in result.stdout, "the plan of an unchanged deploy lists changes"


TOKEN = "SECRETTOKEN123"


def _plans_a_webhook(env: dict[str, str], work: Path) -> None:
    config = work / "deploy-webhook.toml"
    config.write_text(EXAMPLE.read_text().replace("webhooks = []", f'webhooks = ["https://example.com/hooks/{TOKEN}"]'))
    plan = [sys.executable, "-m", "hyperpod_dhc.infra.deploy", "plan", "--config", str(config), "--cdk", str(CDK)]
    plan += ["--output", str(work / "cdk.out.webhook")]
    result = subprocess.run(plan, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    print(result.stdout, end="")
    assert result.returncode == 0, (result.returncode, result.stderr)
    changes = result.stdout.split("  changes to the deployed stack (its template against this one; names only")[1]
    # The new subscription; and CDK's usage analytics (AWS::CDK::Metadata), which count its construct too.
    lines = [line for line in changes.splitlines()[1:] if not line.startswith("    ~ CDKMetadata AWS::CDK::Metadata")]
    assert lines == ["    + AWS::SNS::Subscription (webhook to example.com)"], changes
    assert TOKEN not in result.stdout + result.stderr
    template = json.loads((work / "cdk.out.webhook" / f"{STACK}.template.json").read_text())
    assert not [logical_id for logical_id in template["Resources"] if TOKEN.lower() in logical_id.lower()]


def _cluster(name: str) -> None:
    boto3.client("sagemaker").create_cluster(
        ClusterName=name,
        InstanceGroups=[
            {
                "InstanceGroupName": group,
                "InstanceType": kind,
                "InstanceCount": count,
                "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/", "OnCreate": "on_create.sh"},
                "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/{group}-exec",
                "ThreadsPerCore": 1,
            }
            for group, kind, count in (("controller", "ml.m5.xlarge", 1), ("gpu-workers", "ml.p5.48xlarge", 4))
        ],
    )


def _refuses_unbootstrapped(env: dict[str, str]) -> None:
    plan = [sys.executable, "-m", "hyperpod_dhc.infra.deploy", "plan", "--config", str(EXAMPLE), "--cdk", str(CDK)]
    result = subprocess.run(plan, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    refusal = r"make plan: .* is not CDK-bootstrapped: run `cdk bootstrap [^`]*` first.*\n"
    assert re.fullmatch(refusal, result.stderr), result.stderr
    print(result.stderr, end="")


def _deployed() -> None:
    cloudformation = boto3.client("cloudformation")
    stack = cloudformation.describe_stacks(StackName=STACK)["Stacks"][0]
    assert stack["StackStatus"] in ("CREATE_COMPLETE", "UPDATE_COMPLETE"), stack["StackStatus"]
    out = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    template: dict[str, Any] = cloudformation.get_template(StackName=STACK)["TemplateBody"]
    want = collections.Counter(resource["Type"] for resource in template["Resources"].values())

    table = boto3.client("dynamodb").describe_table(TableName=out["NodesTableName"])["Table"]
    assert [index["IndexName"] for index in table["GlobalSecondaryIndexes"]] == ["BySavedAt"], table
    machine = boto3.client("stepfunctions").describe_state_machine(stateMachineArn=out["RoundStateMachineArn"])
    assert json.loads(machine["definition"])["States"], machine
    functions = [f for f in boto3.client("lambda").list_functions()["Functions"] if f["FunctionName"].startswith(STACK)]
    assert len(functions) == want["AWS::Lambda::Function"], [f["FunctionName"] for f in functions]
    assert all(f["CodeSize"] > 0 for f in functions)  # the code came from the published asset
    assert len(boto3.client("lambda").list_layers()["Layers"]) == want["AWS::Lambda::LayerVersion"]
    config = json.loads(boto3.client("ssm").get_parameter(Name=out["ConfigParameterName"])["Parameter"]["Value"])
    assert config["clusters"] == ["ml-cluster"], config["clusters"]  # the deploy file's, through the context
    assert boto3.client("sns").get_topic_attributes(TopicArn=out["NotificationsTopicArn"])["Attributes"]
    api = boto3.client("apigateway").get_resources(restApiId=out["ApiId"], limit=500)["items"]
    methods = sum(len(resource.get("resourceMethods", {})) for resource in api)
    assert methods == want["AWS::ApiGateway::Method"], methods
    assert len(boto3.client("events").list_rules()["Rules"]) == want["AWS::Events::Rule"]
    assert len(boto3.client("cloudwatch").describe_alarms()["MetricAlarms"]) == want["AWS::CloudWatch::Alarm"]
    assert boto3.client("cloudwatch").list_dashboards()["DashboardEntries"]
    print(
        f"deployed: {len(functions)} functions, {methods} API methods, table {table['TableName']}, "
        f"state machine {machine['name']}, {sum(want.values())} resources in the template"
    )


def _destroyed() -> None:
    stacks = [s["StackName"] for s in boto3.client("cloudformation").describe_stacks()["Stacks"]]
    assert STACK not in stacks, stacks
    functions = [f["FunctionName"] for f in boto3.client("lambda").list_functions()["Functions"]]
    assert not [name for name in functions if name.startswith(STACK)], functions
    assert not boto3.client("stepfunctions").list_state_machines()["stateMachines"]
    assert boto3.client("dynamodb").list_tables()["TableNames"], "the nodes table is retained"


def _not_modelled(log: Path) -> None:
    seen = set(re.findall(r"No Moto CloudFormation support for (\S+)", log.read_text()))
    assert seen == NOT_MODELLED, f"moto skipped {sorted(seen)}; documented: {sorted(NOT_MODELLED)}"


if __name__ == "__main__":
    sys.exit(main())
