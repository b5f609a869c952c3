"""The deployable bundle ``make release`` builds: the example app's stack as a plain CloudFormation template with
Parameters, and its file assets as zips, deployable with ``aws cloudformation deploy`` alone (no CDK, Node.js or
Python, no CDK bootstrap).

    python -m hyperpod_dhc.infra.bundle --out dist    # dist/hyperpod-dhc-<version>-cloudformation.zip

Two CDK mechanisms, no rewriting of the synthesized template:

- ``BundleSynthesizer``, a ``StackSynthesizer`` of its own: a file asset lives at ``s3://<AssetsBucket>/
  <AssetsKeyPrefix><hash>.zip``, both CloudFormation parameters, instead of the bootstrap's bucket; no bootstrap
  role, no ``BootstrapVersion`` parameter or rule. It records the assets it was given; ``write_bundle`` zips them
  from the cloud assembly into the bundle under those names.
- ``DeployParameters``: ``Clusters`` and ``NotificationEmail`` are parameters, wired into the one
  ``HyperPodDhc`` through its L1 resources (escape hatches on what the construct built):

  - the configuration parameter's value is the validated configuration's JSON with its ``clusters`` member built by
    ``Fn::Join`` from ``Clusters`` (``"all"``, or the names as a JSON list);
  - each HyperPod event rule's pattern is ``Fn::If``: no cluster filter for ``all``, else the names (``Fn::Split``);
  - the email subscription exists only under the ``HasNotificationEmail`` condition.

What is fixed when the bundle is built, because a parameter cannot reach it (docs/DEVELOPING.md, "The release"):
the construct is built with ``clusters = "all"``, the widest setting, so the reconciler may call
``sagemaker:ListClusters`` (read-only; needed only for ``all``) and the dashboard has no per-cluster rows. The
Lambdas and the rules still watch exactly ``Clusters``. Everything else is cdk.json's context as ``make synth``
reads it: the policy, table deletion protection (on), no principals admitted by the operator API (cdk.json names
none), no Slack, Teams or webhooks. The stack's resources are named after the stack, so it must be deployed as
``HyperPodDhc`` (the README says so; ``hpdhc`` finds that stack by default).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import json
import shutil
import stat
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from hyperpod_dhc.deephealth.domain.events import SOURCE
from hyperpod_dhc.deephealth.domain.policy import GROUP_NAME_PATTERN, ControllerConfig
from hyperpod_dhc.infra.construct import STACK_DESCRIPTION, HyperPodDhc, HyperPodDhcProps
from hyperpod_dhc.infra.controller_config import EMAIL, REPO_ROOT, STANDARD_TIER_LIMIT
from hyperpod_dhc.infra.lambda_assets import DISTRIBUTION, PYPROJECT
from hyperpod_dhc.infra.triggers import HYPERPOD_EVENTS, cluster_name_filter

STACK_NAME = "HyperPodDhc"  # the resources' names are the stack's (<stack>-check-round, ...): deploy it as this
TEMPLATE_NAME = "hyperpod-dhc.template.json"
ASSETS_DIR = "assets"
CHECKSUMS = "SHA256SUMS"
# Parameter names: the bundle's interface, in its README and in `aws cloudformation deploy --parameter-overrides`.
ASSETS_BUCKET = "AssetsBucket"
ASSETS_KEY_PREFIX = "AssetsKeyPrefix"
CLUSTERS = "Clusters"
NOTIFICATION_EMAIL = "NotificationEmail"
WATCH_ALL = "WatchAllClusters"  # condition: Clusters is "all"
HAS_EMAIL = "HasNotificationEmail"  # condition: NotificationEmail is not empty
ALL = "all"
_NAME = GROUP_NAME_PATTERN.removeprefix("^").removesuffix("$")  # a cluster name (HyperPod's pattern)
CLUSTERS_PATTERN = f"^({ALL}|{_NAME}(,{_NAME})*)$"
EMAIL_PATTERN = f"^({EMAIL.pattern})?$"  # synth's own check of an address (controller_config), or empty
BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
KEY_PREFIX_PATTERN = r"^([0-9A-Za-z!_.*'()/-]*/)?$"  # empty, or ending in "/"
CLUSTERS_JSON_HEAD = '{"clusters":'  # ControllerConfig's first field, as model_dump_json writes it


def release_version() -> str:
    """pyproject.toml's version in a checkout (the one place it is written), else the installed distribution's."""
    if PYPROJECT.is_file():
        project = tomllib.loads(PYPROJECT.read_text()).get("project", {})
        if project.get("name") == DISTRIBUTION:
            return str(project["version"])
    return importlib.metadata.version(DISTRIBUTION)


@dataclasses.dataclass(frozen=True)
class BundleAsset:
    """A file asset of the stack: where the assembly staged it and its object key under ``AssetsKeyPrefix``."""

    source_hash: str
    staged: str  # relative to the cloud assembly (FileAssetSource.fileName)
    key: str  # <hash>.zip for a directory, <hash><suffix> for a file
    zip_directory: bool


class BundleSynthesizer(cdk.StackSynthesizer):
    """File assets in the deployer's own bucket (parameters ``AssetsBucket``, ``AssetsKeyPrefix``); nothing of the
    CDK bootstrap: no bucket, roles, ``BootstrapVersion`` parameter or rule. Docker image assets are refused."""

    def __init__(self) -> None:
        super().__init__()
        self.assets: dict[str, BundleAsset] = {}
        self.bucket: cdk.CfnParameter | None = None
        self.prefix: cdk.CfnParameter | None = None

    def bind(self, stack: cdk.Stack) -> None:
        super().bind(stack)
        self.bucket = cdk.CfnParameter(
            stack,
            ASSETS_BUCKET,
            type="String",
            allowed_pattern=BUCKET_PATTERN,
            constraint_description="an S3 bucket name of this account and region",
            description="The S3 bucket, in the stack's region, holding the bundle's assets/ (the Lambda code and "
            "layer zips)",
        )
        self.prefix = cdk.CfnParameter(
            stack,
            ASSETS_KEY_PREFIX,
            type="String",
            default="",
            allowed_pattern=KEY_PREFIX_PATTERN,
            constraint_description='empty, or a key prefix ending in "/"',
            description='The key prefix the assets were uploaded under, ending in "/" (empty: the bucket\'s root)',
        )

    def add_file_asset(
        self,
        *,
        source_hash: str,
        file_name: str | None = None,
        packaging: cdk.FileAssetPackaging | None = None,
        **_: Any,
    ) -> cdk.FileAssetLocation:
        assert self.bucket is not None and self.prefix is not None, "the synthesizer is bound to its stack"
        if file_name is None:
            raise ValueError("the bundle holds file assets with a file name only (no executable assets)")
        zip_directory = packaging == cdk.FileAssetPackaging.ZIP_DIRECTORY
        key = f"{source_hash}.zip" if zip_directory else f"{source_hash}{Path(file_name).suffix}"
        self.assets[source_hash] = BundleAsset(source_hash, file_name, key, zip_directory)
        bucket = self.bucket.value_as_string
        object_key = cdk.Fn.join("", [self.prefix.value_as_string, key])
        return cdk.FileAssetLocation(
            bucket_name=bucket,
            object_key=object_key,
            http_url=cdk.Fn.join(
                "", ["https://s3.", cdk.Aws.REGION, ".", cdk.Aws.URL_SUFFIX, "/", bucket, "/", object_key]
            ),
            s3_object_url=cdk.Fn.join("", ["s3://", bucket, "/", object_key]),
        )

    def add_docker_image_asset(self, **_: Any) -> cdk.DockerImageAssetLocation:
        raise ValueError("the CloudFormation bundle cannot hold Docker image assets")

    def synthesize(self, session: cdk.ISynthesisSession) -> None:
        self._synthesize_template(session)
        self._emit_artifact(session)


@dataclasses.dataclass(frozen=True)
class DeployParameters:
    """``Clusters`` and ``NotificationEmail``, and the conditions they give."""

    clusters: cdk.CfnParameter
    email: cdk.CfnParameter
    watch_all: cdk.CfnCondition
    has_email: cdk.CfnCondition


def deploy_parameters(stack: cdk.Stack, config: ControllerConfig) -> DeployParameters:
    clusters = cdk.CfnParameter(
        stack,
        CLUSTERS,
        type="String",
        default=ALL,
        allowed_pattern=CLUSTERS_PATTERN,
        max_length=clusters_max_length(config),
        constraint_description='"all", or cluster names separated by commas (no spaces)',
        description='The HyperPod Slurm clusters to watch: "all" (every cluster of the region, present and future) '
        "or names separated by commas, e.g. ml-a,ml-b",
    )
    email = cdk.CfnParameter(
        stack,
        NOTIFICATION_EMAIL,
        type="String",
        default="",
        allowed_pattern=EMAIL_PATTERN,
        constraint_description="an email address, or empty",
        description="An address subscribed by email to the notifications topic (alarms, quarantines); empty: none",
    )
    watch_all = cdk.CfnCondition(stack, WATCH_ALL, expression=cdk.Fn.condition_equals(clusters.value_as_string, ALL))
    has_email = cdk.CfnCondition(
        stack, HAS_EMAIL, expression=cdk.Fn.condition_not(cdk.Fn.condition_equals(email.value_as_string, ""))
    )
    return DeployParameters(clusters, email, watch_all, has_email)


def clusters_max_length(config: ControllerConfig) -> int:
    """The longest ``Clusters`` that keeps the configuration parameter in SSM's standard tier (4 KB): n characters
    with c commas become a JSON list of n + 2c + 4 <= 2n + 4 characters in place of ``"all"``."""
    rest = len(config.model_dump_json().encode()) - len(f'"{ALL}"')
    return (STANDARD_TIER_LIMIT - rest - 4) // 2


def config_value(config: ControllerConfig, parameters: DeployParameters) -> str:
    """The configuration parameter's value: ``config``'s JSON with ``clusters`` from the ``Clusters`` parameter."""
    text = config.model_dump_json()
    every = f'{CLUSTERS_JSON_HEAD}"{ALL}"'
    if config.clusters != ALL or not text.startswith(every):
        raise ValueError(f"the bundle's configuration must start {every}, got {text[:40]}...")
    names = cdk.Fn.split(",", parameters.clusters.value_as_string)
    listed = cdk.Fn.join("", ['["', cdk.Fn.join('","', names), '"]'])
    clusters = cdk.Fn.condition_if(parameters.watch_all.logical_id, f'"{ALL}"', listed).to_string()
    return cdk.Fn.join("", [CLUSTERS_JSON_HEAD, clusters, text[len(every) :]])


def parameterize(controller: HyperPodDhc, parameters: DeployParameters) -> None:
    """Wire ``parameters`` into ``controller`` (built for every cluster, without an email subscription)."""
    config_resource = controller.config_parameter.node.default_child
    assert isinstance(config_resource, ssm.CfnParameter)
    config_resource.value = config_value(controller.config, parameters)
    names = cdk.Fn.split(",", parameters.clusters.value_as_string)
    for name, (detail_type, path) in HYPERPOD_EVENTS.items():
        rule = controller.triggers.rules[name].node.default_child
        assert isinstance(rule, events.CfnRule)
        every = {"source": [SOURCE], "detail-type": [detail_type]}
        named = {**every, "detail": cluster_name_filter(path, tuple(names))}
        rule.add_property_override("EventPattern", cdk.Fn.condition_if(parameters.watch_all.logical_id, every, named))
    subscription = sns.CfnSubscription(
        controller.notifications,
        "EmailSubscription",
        protocol="email",
        endpoint=parameters.email.value_as_string,
        topic_arn=controller.notifications.topic.topic_arn,
    )
    subscription.cfn_options.condition = parameters.has_email


def bundle_props(scope: Construct) -> HyperPodDhcProps:
    """cdk.json's context as ``make synth`` reads it, for every cluster and without an email address: the
    parameters decide those."""
    props = HyperPodDhcProps.from_context(scope)
    config = props.config.model_copy(update={"clusters": ALL})
    return dataclasses.replace(props, config=config, notification_email=None)


def bundle_stack(app: cdk.App) -> tuple[cdk.Stack, BundleSynthesizer]:
    """The example app's stack (infra/hyperpod_dhc/infra/app.py) as the bundle deploys it, in ``app``."""
    synthesizer = BundleSynthesizer()
    stack = cdk.Stack(
        app, STACK_NAME, synthesizer=synthesizer, description=STACK_DESCRIPTION, analytics_reporting=False
    )
    props = bundle_props(stack)
    parameters = deploy_parameters(stack, props.config)
    controller = HyperPodDhc(stack, "Default", props=props)
    parameterize(controller, parameters)
    stack.template_options.metadata = {
        "AWS::CloudFormation::Interface": {
            "ParameterGroups": [
                {"Label": {"default": "What to watch"}, "Parameters": [CLUSTERS, NOTIFICATION_EMAIL]},
                {
                    "Label": {"default": "Where the assets were uploaded"},
                    "Parameters": [ASSETS_BUCKET, ASSETS_KEY_PREFIX],
                },
            ]
        }
    }
    return stack, synthesizer


def write_bundle(assembly: Path, synthesizer: BundleSynthesizer, bundle: Path, version: str) -> None:
    """The bundle directory: the template as synthesized, ``assets/<key>`` each, README.md and SHA256SUMS."""
    bundle.mkdir(parents=True)
    template = json.loads((assembly / f"{STACK_NAME}.template.json").read_text())
    (bundle / TEMPLATE_NAME).write_text(json.dumps(template, indent=1) + "\n")
    (bundle / ASSETS_DIR).mkdir()
    for asset in sorted(synthesizer.assets.values(), key=lambda a: a.key):
        source, target = assembly / asset.staged, bundle / ASSETS_DIR / asset.key
        if asset.zip_directory:
            zip_tree(source, target)
        else:
            shutil.copyfile(source, target)
    (bundle / "README.md").write_text(readme(version, template, sorted(a.key for a in synthesizer.assets.values())))
    files = sorted(p for p in bundle.rglob("*") if p.is_file())
    (bundle / CHECKSUMS).write_text(
        "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(bundle).as_posix()}\n" for p in files)
    )


_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest time: the same tree gives the same bytes


def zip_tree(directory: Path, target: Path, *, root: str = "") -> None:
    """``directory``'s files into ``target`` (``root/`` before each name), sorted, with fixed times and modes."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(f"{root}{path.relative_to(directory).as_posix()}", _EPOCH)
            mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            out.writestr(info, path.read_bytes())


def readme(version: str, template: dict[str, Any], asset_keys: Iterable[str]) -> str:
    """The bundle's README: what to upload where, the commands, the parameters."""
    parameters = template["Parameters"]
    rows = "\n".join(
        f"| `{name}` | {'`' + str(p['Default']) + '`' if 'Default' in p else '(required)'} | {p['Description']} |"
        for name, p in parameters.items()
    )
    assets = "\n".join(f"- `{ASSETS_DIR}/{key}`" for key in asset_keys)
    return f"""# hyperpod-dhc {version}: CloudFormation bundle

The hyperpod-dhc controller as one CloudFormation template and its assets. Deploying it needs the AWS CLI and
nothing else: no CDK, Node.js or Python, no CDK bootstrap. What it is and how to operate it: the project's
README.md and docs/ (DAY1.md, OPERATIONS.md).

Files:
- `{TEMPLATE_NAME}`: the template (Parameters below).
{assets}
  The Lambda functions' code and their dependency layer (Python 3.13, arm64), as the template references them.
- `{CHECKSUMS}`: the SHA-256 of every file here (`sha256sum -c {CHECKSUMS}`).

## 1. Upload the assets
To a bucket of your own, in the region you deploy to (the stack reads them when it creates the functions; keep
them while the stack exists: an update may read them again):
```bash
BUCKET=my-bucket PREFIX=hyperpod-dhc/{version}/ REGION=us-west-2
aws s3 cp {ASSETS_DIR}/ "s3://$BUCKET/$PREFIX" --recursive --region "$REGION"
```

## 2. Deploy
The stack must be named `{STACK_NAME}` (its resources are named after it, and `hpdhc` finds it by that name).
The template is larger than CloudFormation's 51,200-byte inline limit, so `deploy` uploads it to the same bucket:
```bash
aws cloudformation deploy --region "$REGION" --stack-name {STACK_NAME} \\
  --template-file {TEMPLATE_NAME} --s3-bucket "$BUCKET" --s3-prefix "${{PREFIX}}templates" \\
  --capabilities CAPABILITY_IAM \\
  --parameter-overrides AssetsBucket="$BUCKET" AssetsKeyPrefix="$PREFIX" Clusters=ml-cluster \\
    NotificationEmail=oncall@example.com
```
Or, with the template uploaded yourself: `aws cloudformation create-stack --stack-name {STACK_NAME}
--template-url https://$BUCKET.s3.$REGION.amazonaws.com/${{PREFIX}}{TEMPLATE_NAME} --capabilities CAPABILITY_IAM
--parameters ParameterKey=AssetsBucket,ParameterValue=$BUCKET ...`, then `aws cloudformation wait
stack-create-complete --stack-name {STACK_NAME}`. An email address gets a confirmation mail from SNS first.

## Parameters
| Parameter | Default | |
|---|---|---|
{rows}

## What differs from `make deploy`
Fixed when this bundle was built (from the repository's cdk.json, as `make synth` reads it):
- The controller's policy (checks, recovery, safety limits): cdk.json's defaults. `Clusters` is the only policy
  value a parameter sets.
- Built for every cluster: the reconciler may call `sagemaker:ListClusters` (read-only, used only with `all`), and
  the dashboard has no per-cluster rows. What is watched is exactly `Clusters` (the configuration and the event
  rules carry it).
- The operator API admits nobody to reset breakers, queue checks or run a Slurm bridge, and nothing is sent to
  Slack, Teams or webhooks: those need `make deploy` with a deploy.toml (or a bundle built from your cdk.json).
- The nodes table has deletion protection on and is retained when the stack is deleted.

Remove it with `aws cloudformation delete-stack --stack-name {STACK_NAME}` (the nodes table stays).
"""


def build(out: Path, *, context: dict[str, Any] | None = None, nag: bool = True) -> Path:
    """Synthesize the bundle stack with cdk.json's context (and ``context`` over it), write the bundle and zip it
    into ``out``; returns the zip's path."""
    from cdk_nag import AwsSolutionsChecks

    version = release_version()
    cdk_json = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    with tempfile.TemporaryDirectory(prefix="hyperpod-dhc-bundle-") as tmp:
        assembly = Path(tmp) / "cdk.out"
        app = cdk.App(outdir=str(assembly), context={**cdk_json, **(context or {})})
        _, synthesizer = bundle_stack(app)
        if nag:
            cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
        app.synth()
        name = f"{DISTRIBUTION}-{version}-cloudformation"
        directory = Path(tmp) / name
        write_bundle(assembly, synthesizer, directory, version)
        out.mkdir(parents=True, exist_ok=True)
        target = out / f"{name}.zip"
        zip_tree(directory, target, root=f"{name}/")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyperpod_dhc.infra.bundle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist", help="where the zip goes (default dist/)")
    args = parser.parse_args(argv)
    print(build(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
