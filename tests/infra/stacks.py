"""The stacks infra tests synthesize: the example app's (infra/hyperpod_dhc/infra/app.py), i.e. the HyperPodDhc
construct in a stack of its own, configured by cdk.json's context with a test's keys on top."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk

from hyperpod_dhc.infra.app import build
from hyperpod_dhc.infra.construct import HyperPodDhc
from tests.harness import synth


def controller_stack(app: cdk.App | None = None) -> cdk.Stack:
    """The example app's stack in ``app`` (default: cdk.json's context, layer bundling skipped), without cdk-nag."""
    return build(app or synth.app(), nag=False)


def controller(stack: cdk.Stack) -> HyperPodDhc:
    """The HyperPodDhc of a ``controller_stack``."""
    found = stack.node.find_child("Default")
    assert isinstance(found, HyperPodDhc)
    return found


def controller_template(context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The template of the example app with ``context`` over cdk.json's."""
    return dict(cdk.assertions.Template.from_stack(controller_stack(synth.app(context))).to_json())
