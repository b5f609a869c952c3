"""Example app (`cdk.json`): HyperPodDhc in a stack of its own, configured by CDK context, cdk-nag on every synth
(the `nag` extra; the dev venv has it)."""

import os

import aws_cdk as cdk

from hyperpod_dhc.infra.construct import STACK_DESCRIPTION, HyperPodDhc, HyperPodDhcProps


def build(app: cdk.App, *, nag: bool = True) -> cdk.Stack:
    env = cdk.Environment(account=os.getenv("CDK_DEFAULT_ACCOUNT"), region=os.getenv("CDK_DEFAULT_REGION"))
    stack = cdk.Stack(app, "HyperPodDhc", env=env, description=STACK_DESCRIPTION)
    HyperPodDhc(stack, "Default", props=HyperPodDhcProps.from_context(stack))  # "Default": not in logical ids
    if nag:  # a finding without an acknowledgement fails synth
        from cdk_nag import AwsSolutionsChecks

        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


if __name__ == "__main__":
    app = cdk.App()
    build(app)
    app.synth()
