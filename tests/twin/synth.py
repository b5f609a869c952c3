"""Synthesize the stack in-process, once per test session (jsii start-up dominates: ~3-5 s)."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

# jsii prints a large end-of-life banner under node 20 unless told which version to stay quiet about.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


@functools.cache
def _synth(context_json: str) -> dict[str, Any]:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.app import build
    from infra.controller_config import CONTEXT_KEY, REPO_ROOT

    cdk_json = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    context = {**cdk_json, "aws:cdk:bundling-stacks": [], **json.loads(context_json)}
    context.setdefault(CONTEXT_KEY, {})
    app = cdk.App(context=context)
    return Template.from_stack(build(app, nag=False)).to_json()


def synthesized_template(context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CloudFormation template as `cdk synth` writes it from cdk.json (layer bundling skipped)."""
    return _synth(json.dumps(context or {}, sort_keys=True))
