"""``make plan`` / ``make deploy`` / ``make destroy``: check what can be checked before CloudFormation, then run CDK.

    python -m hyperpod_dhc.infra.deploy plan    --config deploy.toml   # checks, synth, the plan; changes nothing
    python -m hyperpod_dhc.infra.deploy deploy  --config deploy.toml   # the same, then `cdk deploy` of what was planned
    python -m hyperpod_dhc.infra.deploy destroy --config deploy.toml

The file is checked whole first (``infra/hyperpod_dhc/infra/deploy_config.py``: one line naming its key, no AWS call).
Then the checks run in order and stop at the first failure with one line (exit 1), before any CloudFormation call: the
region the AWS configuration names, if any, is the file's (no call); credentials (STS); HyperPod's API in that region;
the clusters named (they exist and are Slurm, not EKS) and the isolating groups; the CDK bootstrap (its SSM version
parameter), last, so that a wrong region is not answered with a bootstrap request for it. Then the app is synthesized
with the file's values as context, the plan is printed from the synthesized template, and `cdk deploy` deploys that very
assembly. ``AWS_ENDPOINT_URL`` is honoured by boto3 and the CDK CLI alike (``make deploy-moto`` points both at moto's
server).

Against a stack that exists, the plan also lists what changes: the deployed template (CloudFormation GetTemplate)
against the synthesized one, resource by resource and parameter by parameter (``template_changes``). Not `cdk diff`:
it prints property values, a webhook's whole URL among them; this prints names only, and a webhook by its host.

The plan prints each principal pattern of ``[breaker_resetters]``, ``[slurm_bridges]`` and ``[check_requesters]``
with what it admits now (``admissions``: IAM ``ListRoles`` / ``ListUsers`` under the pattern's path, read-only):
the roles or users a ``PATH/*`` pattern matches, whether an exact one exists, or why they cannot be listed.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from hyperpod_dhc.infra.controller_config import REPO_ROOT
from hyperpod_dhc.infra.deploy_config import DeployConfig, DeployConfigError, load
from hyperpod_dhc.infra.notifications import webhook_host

STACK_NAME = "HyperPodDhc"
BOOTSTRAP_QUALIFIER = "hnb659fds"  # the CDK default; `cdk bootstrap` without --qualifier
BOOTSTRAP_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
MIN_BOOTSTRAP_VERSION = 6  # what aws-cdk-lib's default synthesizer asks (the assembly says so too)
DEFAULT_CDK = REPO_ROOT / ".venv" / "cdk-cli" / "node_modules" / ".bin" / "cdk"
ADMITTED_NAMES_SHOWN = 10  # the plan names at most this many of the principals a pattern admits, then "and N more"
_IAM_LISTS = {"role": ("list_roles", "Roles", "RoleName"), "user": ("list_users", "Users", "UserName")}
_Listed = list[tuple[str, str, str]] | str  # (ARN, path, name) of each role or user; or why IAM did not list them


class PreflightError(RuntimeError):
    """A check that failed before CloudFormation: the message is the one line an operator reads."""


@dataclass(frozen=True)
class ClusterFacts:
    name: str
    status: str
    groups: tuple[tuple[str, str, int], ...]  # (group, instance type, current count)


@dataclass(frozen=True)
class Preflight:
    account: str
    caller: str
    region: str
    bootstrap_version: int
    clusters: tuple[ClusterFacts, ...]


def preflight(
    config: DeployConfig,
    session: boto3.Session,
    *,
    destroying: bool = False,
    environ: Mapping[str, str] = os.environ,
) -> Preflight:
    """The checks, in order; raises PreflightError at the first that fails. Calls STS, SageMaker and SSM only.

    The file's region was checked by its model (a SageMaker region); here first, still without a call, that the
    AWS configuration does not name another one. The clusters are looked for before the bootstrap: a wrong region
    then says the clusters are not there, instead of asking for a bootstrap of that region.
    ``destroying``: the region and the credentials only (a stack outlives the clusters it watched)."""
    region = config.region
    _regions_agree(config, session, environ)
    try:
        identity = session.client("sts", region_name=region).get_caller_identity()
    except NoCredentialsError:
        raise PreflightError("no AWS credentials: set AWS_PROFILE or run `aws configure` / `aws sso login`") from None
    except (ClientError, BotoCoreError) as err:
        raise PreflightError(f"the credentials do not work in {region}: {_reason(err)}") from None
    account = identity["Account"]
    if destroying:
        return Preflight(account=account, caller=identity["Arn"], region=region, bootstrap_version=0, clusters=())
    sagemaker = session.client("sagemaker", region_name=region)
    try:
        listed = _list_clusters(sagemaker)
    except (ClientError, BotoCoreError) as err:
        raise PreflightError(f"HyperPod's API does not answer in {region}: {_reason(err)}") from None
    every = config.clusters is None
    names = config.clusters if config.clusters is not None else tuple(listed)
    clusters = tuple(_slurm_cluster(sagemaker, name, region, every=every) for name in names)
    _isolating_groups_exist(config, clusters)
    version = _bootstrap_version(session.client("ssm", region_name=region), account, region, clusters=bool(listed))
    return Preflight(
        account=account, caller=identity["Arn"], region=region, bootstrap_version=version, clusters=clusters
    )


# Where boto3 (AWS_DEFAULT_REGION, the profile's region) and the CDK CLI and other SDKs (AWS_REGION first) take a
# region from when none is given.
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")


def _regions_agree(config: DeployConfig, session: boto3.Session, environ: Mapping[str, str]) -> None:
    """The file's region is the one the AWS configuration names, if it names one (no AWS call). Every call here
    and CDK's use the file's region; another region configured means the file or the shell is not what the
    operator thinks (credentials of one region's account, a cluster in another), so neither wins silently."""
    configured = {name: environ[name] for name in REGION_VARIABLES if environ.get(name)}
    if session.region_name and session.region_name not in configured.values():
        configured["the profile's region"] = session.region_name
    for source, region in configured.items():
        if region != config.region:
            raise PreflightError(
                f"{config.path}: region is {config.region}, but {source} is {region}: make them agree "
                f'(region = "{region}" in {config.path.name}, or {REGION_VARIABLES[0]}={config.region} '
                f"{REGION_VARIABLES[1]}={config.region} make ...)"
            )


def _isolating_groups_exist(config: DeployConfig, clusters: tuple[ClusterFacts, ...]) -> None:
    """Every isolating group names an instance group of a watched cluster: a typo would leave every group undrained
    (the list is exact: the groups it leaves out are not drained)."""
    groups = {(cluster.name, group) for cluster in clusters for group, _, _ in cluster.groups}
    for entry in config.isolating_groups or ():
        cluster, _, group = entry.rpartition("/")
        if not any((cluster or name, group) == (name, known) for name, known in groups):
            where = f"cluster {cluster}" if cluster else "any watched cluster"
            raise PreflightError(f'isolating_groups: "{entry}" is not an instance group of {where}')


def _list_clusters(sagemaker: Any) -> list[str]:
    names: list[str] = []
    for page in sagemaker.get_paginator("list_clusters").paginate():
        names += [summary["ClusterName"] for summary in page.get("ClusterSummaries", [])]
    return names


def _bootstrap_version(ssm: Any, account: str, region: str, *, clusters: bool = True) -> int:
    bootstrap = f"run `cdk bootstrap aws://{account}/{region}` first (with the same credentials)"
    if not clusters:  # nothing to watch there yet: say so before sending anyone to bootstrap that region
        bootstrap += f"; {region} has no HyperPod cluster yet: is region right?"
    try:
        value = ssm.get_parameter(Name=BOOTSTRAP_PARAMETER)["Parameter"]["Value"]
    except ClientError as err:
        if err.response["Error"]["Code"] == "ParameterNotFound":
            raise PreflightError(f"{account}/{region} is not CDK-bootstrapped: {bootstrap}") from None
        raise PreflightError(f"cannot read the CDK bootstrap version ({BOOTSTRAP_PARAMETER}): {_reason(err)}") from None
    if not str(value).isdigit() or int(value) < MIN_BOOTSTRAP_VERSION:
        raise PreflightError(
            f"{account}/{region}'s CDK bootstrap is version {value}, this stack needs {MIN_BOOTSTRAP_VERSION}+: "
            f"{bootstrap}"
        )
    return int(value)


def _slurm_cluster(sagemaker: Any, name: str, region: str, *, every: bool = False) -> ClusterFacts:
    try:
        cluster = sagemaker.describe_cluster(ClusterName=name)
    except ClientError as err:
        if err.response["Error"]["Code"] in ("ResourceNotFound", "ValidationException"):
            raise PreflightError(f"cluster {name} is not a HyperPod cluster in {region} ({_reason(err)})") from None
        raise PreflightError(f"cannot describe cluster {name}: {_reason(err)}") from None
    # An allow-list: no orchestrator block (clusters made before it existed) or a Slurm one. EKS, or an
    # orchestrator this code does not know, is refused: the controller drives Slurm clusters only.
    orchestrator = set(cluster.get("Orchestrator") or {})
    if not orchestrator <= {"Slurm"}:
        hint = ' (clusters = "all" would watch it: name the Slurm clusters instead)' if every else ""
        raise PreflightError(
            f"cluster {name} is orchestrated by {', '.join(sorted(orchestrator))}, not Slurm: hyperpod-dhc "
            f"drives Slurm clusters only{hint}"
        )
    groups = tuple(
        (group.get("InstanceGroupName", "?"), group.get("InstanceType", "?"), int(group.get("CurrentCount", 0)))
        for group in cluster.get("InstanceGroups", [])
    )
    return ClusterFacts(name=name, status=str(cluster.get("ClusterStatus", "?")), groups=groups)


def _reason(err: Exception) -> str:
    if isinstance(err, ClientError):
        error = err.response.get("Error", {})
        return f"{error.get('Code', '?')}: {error.get('Message', '')}".strip().rstrip(":")
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def synthesize(config: DeployConfig, facts: Preflight, cdk: Path, out: Path) -> Path:
    """``cdk synth`` of the app with the file's values as context, into ``out``; returns the template's path."""
    base = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    command = [
        str(cdk), "synth", "--quiet", "--app", f"{sys.executable} -m hyperpod_dhc.infra.app", "--output", str(out),
        *config.cdk_context_args(base),
    ]  # fmt: skip
    _run(command, _cdk_env(facts), what="cdk synth")
    return out / f"{STACK_NAME}.template.json"


def required_bootstrap(assembly: Path) -> int:
    manifest = json.loads((assembly / "manifest.json").read_text())
    versions = [
        int(artifact.get("properties", {}).get("requiresBootstrapStackVersion", 0))
        for artifact in manifest.get("artifacts", {}).values()
    ]
    return max([MIN_BOOTSTRAP_VERSION, *versions])


def admissions(session: boto3.Session, config: DeployConfig, account: str) -> dict[str, str]:
    """Each principal pattern of ``config`` -> what it admits now, one line (IAM's list calls only, read-only).

    ``admits: a, b (2 roles)`` for a ``PATH/*`` pattern (a role under a sub-path as ``sub/name``; at most
    ``ADMITTED_NAMES_SHOWN`` names, then ``and N more``), ``the role exists`` / ``no such role ...`` for an exact one,
    ``(cannot list roles: <reason>)`` when IAM does not answer (AccessDenied, no credentials) or the pattern is of
    another account than ``account``'s (the one deployed to). One ``List{Roles,Users}`` walk per kind and path.
    """
    patterns = dict.fromkeys(arn for who in config.principals.values() for arns in who.values() for arn in arns)
    if not patterns:
        return {}
    iam = session.client("iam", region_name=config.region)
    listed: dict[tuple[str, str], _Listed] = {}  # (kind, path) -> what IAM listed there, or why not
    return {pattern: _admission(iam, pattern, account, listed) for pattern in patterns}


def _admission(iam: Any, pattern: str, account: str, listed: dict[tuple[str, str], _Listed]) -> str:
    # arn:PARTITION:iam::ACCOUNT:KIND/PATH.../NAME, as principal_pattern_problem let it through (deploy_config)
    pattern_account, _, rest = pattern.partition(":iam::")[2].partition(":")
    kind, _, path_name = rest.partition("/")  # "role" or "user"
    plural = f"{kind}s"
    if pattern_account != account:
        return f"(cannot list {plural}: they are account {pattern_account}'s, the plan runs in {account})"
    head, _, name = path_name.rpartition("/")
    path = f"/{head}/" if head else "/"
    if (kind, path) not in listed:
        listed[kind, path] = _principals_under(iam, kind, path)
    principals = listed[kind, path]
    if isinstance(principals, str):
        return f"(cannot list {plural}: {principals})"
    matched = [(arn, where, n) for arn, where, n in principals if fnmatch.fnmatchcase(arn, pattern)]
    if name != "*":
        return f"the {kind} exists" if matched else f"no such {kind} (it admits nobody until one is created)"
    if not matched:
        return f"admits: no {kind} now"
    names = sorted(f"{where[len(path) :]}{n}" for _, where, n in matched)
    shown = ", ".join(names[:ADMITTED_NAMES_SHOWN])
    more = f" and {len(names) - ADMITTED_NAMES_SHOWN} more" if len(names) > ADMITTED_NAMES_SHOWN else ""
    return f"admits: {shown}{more} ({len(names)} {kind if len(names) == 1 else plural})"


def _principals_under(iam: Any, kind: str, path: str) -> _Listed:
    """(ARN, path, name) of every role or user under ``path``, or why IAM did not list them."""
    operation, key, name = _IAM_LISTS[kind]
    try:
        return [
            (entry["Arn"], entry.get("Path", "/"), entry[name])
            for page in iam.get_paginator(operation).paginate(PathPrefix=path)
            for entry in page.get(key, [])
        ]
    except (ClientError, BotoCoreError) as err:
        return _reason(err)


def plan_text(
    config: DeployConfig,
    facts: Preflight,
    template: dict[str, Any],
    existing: str | None,
    admitted: Mapping[str, str] | None = None,
    deployed: Mapping[str, Any] | str | None = None,
) -> str:
    """What `make deploy` will do, for a human: where, for which clusters, who is told and may act, what is created.

    ``admitted``: each principal pattern's line of ``admissions``, printed under it (none: the patterns alone).
    ``deployed``: the existing stack's template (``deployed_template``), or why it could not be read: the plan then
    lists what changes (``template_changes``)."""
    lines = [
        f"{'Update' if existing else 'Create'} stack {STACK_NAME} in {facts.account}/{facts.region}"
        + (f" (now {existing})" if existing else "")
        + f", as {facts.caller}",
        f"  CDK bootstrap version {facts.bootstrap_version}",
        "  clusters:"
        + (
            " every cluster in the region, present and future (name them to leave one out)"
            if config.clusters is None
            else ""
        ),
    ]
    for cluster in facts.clusters:
        groups = ", ".join(f"{g} ({count} x {kind})" for g, kind, count in cluster.groups) or "no instance groups"
        lines.append(f"    {cluster.name} [{cluster.status}]: {groups}")
    told = [
        f"email {config.notification_email}" if config.notification_email else "",
        "Slack channel " + config.slack["channel_id"] if config.slack else "",
        "Teams channel " + config.teams["channel_id"] if config.teams else "",
        *(f"webhook to {webhook_host(url)}" for url in config.webhooks),  # the path or query may be a token
    ]
    lines.append("  notifications: " + (", ".join(t for t in told if t) or "the SNS topic only (no subscription)"))
    lines.append(
        "  isolating groups (drained in Slurm until checked): "
        + (", ".join(config.isolating_groups) if config.isolating_groups is not None else "every on-demand group")
    )
    for name, who in config.principals.items():
        lines += _principal_lines(name.replace("_", " "), who, admitted or {})
    lines.append(f"  nodes table deletion protection: {'on' if config.table_deletion_protection else 'off'}")
    kinds = collections.Counter(resource["Type"] for resource in template.get("Resources", {}).values())
    lines.append(f"  resources: {sum(kinds.values())}")
    lines += [f"    {count:3d} {kind}" for kind, count in sorted(kinds.items())]
    if isinstance(deployed, str):
        lines.append(f"  changes to the deployed stack: not known (cannot read its template: {deployed})")
    elif deployed is not None:
        changes = template_changes(deployed, template)
        lines.append(
            "  changes to the deployed stack (its template against this one; names only, no values):"
            if changes
            else "  changes to the deployed stack: none (the same resources, properties and parameters)"
        )
        lines += [f"    {change}" for change in changes]
    return "\n".join(lines)


def deployed_template(session: boto3.Session, region: str) -> dict[str, Any] | str:
    """The deployed stack's template (CloudFormation GetTemplate, read-only), or why it could not be read."""
    try:
        body = session.client("cloudformation", region_name=region).get_template(StackName=STACK_NAME)["TemplateBody"]
    except (ClientError, BotoCoreError) as err:
        return _reason(err)
    if isinstance(body, str):  # botocore decodes a JSON body itself; a string is what it could not decode
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            return "it is not JSON"
    return dict(body)


def template_changes(deployed: Mapping[str, Any], planned: Mapping[str, Any]) -> list[str]:
    """What deploying ``planned`` over ``deployed`` changes, one line each: ``+``/``-``/``~`` a resource (logical id
    and type; for ``~`` the names of what differs) or a parameter.

    `cdk diff` would print the values too, a webhook's whole URL among them: this prints names only, and a
    webhook subscription by its host instead of its logical id (an older template named it by its URL)."""
    before, after = deployed.get("Resources", {}), planned.get("Resources", {})
    lines: list[str] = []
    for logical_id in sorted(set(before) | set(after)):
        old, new = before.get(logical_id), after.get(logical_id)
        if old is not None and new is not None and old.get("Type") == new.get("Type"):
            differ = _differences(old, new)
            if differ:
                lines.append(f"~ {_resource(logical_id, new)}: {', '.join(differ)}")
            continue
        if old is not None:
            lines.append(f"- {_resource(logical_id, old)}")
        if new is not None:
            lines.append(f"+ {_resource(logical_id, new)}")
    lines.sort(key=lambda line: ("-+~".index(line[0]), line))
    params_before, params_after = deployed.get("Parameters", {}), planned.get("Parameters", {})
    for name in sorted(set(params_before) | set(params_after)):
        old, new = params_before.get(name), params_after.get(name)
        if old != new:
            lines.append(f"{'+' if old is None else '-' if new is None else '~'} parameter {name}")
    return lines


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The top-level properties, then the other attributes (DependsOn, DeletionPolicy, ...), that differ;
    CDK's Metadata (construct paths, asset paths) is not deployed state and is left out."""
    props_old, props_new = old.get("Properties", {}), new.get("Properties", {})
    differ = [p for p in sorted(set(props_old) | set(props_new)) if props_old.get(p) != props_new.get(p)]
    others = (set(old) | set(new)) - {"Type", "Properties", "Metadata"}
    return differ + [a for a in sorted(others) if old.get(a) != new.get(a)]


def _resource(logical_id: str, resource: Mapping[str, Any]) -> str:
    kind = str(resource.get("Type", "?"))
    props = resource.get("Properties", {})
    if kind == "AWS::SNS::Subscription" and str(props.get("Protocol", "")).lower() in ("http", "https"):
        endpoint = props.get("Endpoint")
        return f"{kind} (webhook to {webhook_host(endpoint) if isinstance(endpoint, str) else '?'})"
    return f"{logical_id} {kind}"


def _principal_lines(title: str, who: Mapping[str, Iterable[str]], admitted: Mapping[str, str]) -> list[str]:
    """``  slurm bridges: nobody``, or a line per cluster's pattern, each followed by what it admits when known."""
    lines = [f"  {title}:" + ("" if who else " nobody")]
    for cluster, arns in who.items():
        for arn in arns:
            lines.append(f"    {cluster}: {arn}")
            if arn in admitted:
                lines.append(f"      {admitted[arn]}")
    return lines


def existing_stack(session: boto3.Session, region: str) -> str | None:
    """The stack's status, or None when there is none (the first CloudFormation call, after every check)."""
    try:
        stacks = session.client("cloudformation", region_name=region).describe_stacks(StackName=STACK_NAME)
    except ClientError as err:
        if "does not exist" in err.response["Error"].get("Message", ""):
            return None
        raise
    return str(stacks["Stacks"][0]["StackStatus"]) if stacks.get("Stacks") else None


def _cdk_env(facts: Preflight) -> dict[str, str]:
    return {
        **os.environ,
        "AWS_REGION": facts.region,
        "AWS_DEFAULT_REGION": facts.region,
        "CDK_DEFAULT_REGION": facts.region,
        "CDK_DEFAULT_ACCOUNT": facts.account,
    }


def _run(command: Sequence[str], env: dict[str, str], *, what: str) -> None:
    result = subprocess.run(command, env=env, cwd=REPO_ROOT, check=False)
    if result.returncode != 0:
        raise PreflightError(f"{what} failed (exit {result.returncode}); its output is above")


def main(argv: Sequence[str] | None = None, *, session_factory: Callable[[], boto3.Session] = boto3.Session) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyperpod_dhc.infra.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("plan", "deploy", "destroy"))
    parser.add_argument("--config", default="deploy.toml", help="the deploy configuration (default deploy.toml)")
    parser.add_argument("--cdk", type=Path, default=DEFAULT_CDK, help="the CDK CLI (default: make install's)")
    parser.add_argument("--yes", action="store_true", help="no questions: cdk's --require-approval never / --force")
    parser.add_argument("--output", type=Path, help="the cloud assembly directory (default: a temporary one)")
    args = parser.parse_args(argv)
    name = f"make {args.action}"
    out = args.output or Path(tempfile.mkdtemp(prefix="hyperpod-dhc-assembly-"))
    try:
        return _act(args, load(args.config), session_factory(), out)
    except (DeployConfigError, PreflightError) as err:
        print(f"{name}: {err}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as err:
        print(f"{name}: AWS refused: {_reason(err)}", file=sys.stderr)
        return 1
    finally:
        if args.output is None:
            shutil.rmtree(out, ignore_errors=True)


def _act(args: argparse.Namespace, config: DeployConfig, session: boto3.Session, out: Path) -> int:
    name = f"make {args.action}"
    destroying = args.action == "destroy"
    facts = preflight(config, session, destroying=destroying)
    if destroying:
        existing = existing_stack(session, config.region)
        if existing is None:
            print(f"{name}: no stack {STACK_NAME} in {facts.account}/{facts.region}: nothing to destroy")
            return 0
        print(f"Destroy stack {STACK_NAME} in {facts.account}/{facts.region} (now {existing}), as {facts.caller}")
        print("  the nodes table is retained (RemovalPolicy RETAIN): delete it by hand if it must go", flush=True)
        synthesize(config, facts, args.cdk, out)  # `cdk destroy` finds the stack in an assembly
        _run(
            [str(args.cdk), "destroy", "--app", str(out), STACK_NAME, *(["--force"] if args.yes else [])],
            _cdk_env(facts),
            what="cdk destroy",
        )
        return 0
    template_path = synthesize(config, facts, args.cdk, out)
    needed = required_bootstrap(out)
    if facts.bootstrap_version < needed:
        raise PreflightError(
            f"the stack needs CDK bootstrap version {needed}+, the account has {facts.bootstrap_version}"
        )
    existing = existing_stack(session, config.region)
    deployed = deployed_template(session, config.region) if existing else None
    admitted = admissions(session, config, facts.account)
    template = json.loads(template_path.read_text())
    print(plan_text(config, facts, template, existing, admitted, deployed), flush=True)
    if args.action == "plan":
        return 0
    command = [
        str(args.cdk), "deploy", "--app", str(out), STACK_NAME,
        "--require-approval", "never" if args.yes else "broadening",
    ]  # fmt: skip
    _run(command, _cdk_env(facts), what="cdk deploy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
