"""The CDK app: ``python -m infra.app`` from the repository root (``cdk.json``).

cdk-nag's AwsSolutions pack runs on every synth; a finding without an acknowledgement fails it.
"""

from __future__ import annotations

import os

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.stack import HyperPodDhcStack

STACK_ID = "HyperPodDhc"


def environment() -> cdk.Environment | None:
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    return cdk.Environment(account=account, region=region) if account or region else None


def build(app: cdk.App, *, nag: bool = True) -> HyperPodDhcStack:
    stack = HyperPodDhcStack(app, STACK_ID, env=environment())
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


def main() -> None:
    app = cdk.App()
    build(app)
    app.synth()


if __name__ == "__main__":
    main()
