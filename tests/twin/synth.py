"""Synthesize the stack in-process, once per test session (jsii start-up dominates: ~3-5 s)."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

# jsii prints a large end-of-life banner under node 20 unless told which version to stay quiet about.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

# Who may reset breakers in the twin (cdk.json ships none, so nobody could): the twin's own operators, for
# every cluster: `Harness.api`'s default principal and the one `hpdhc simulate --serve` signs as. A test of
# the policy itself passes its own `hyperpod-dhc:breaker-resetters` to `synthesized_template`.
TWIN_OPERATOR = "arn:aws:iam::123456789012:user/operator"
LOCAL_OPERATOR = "arn:aws:iam::123456789012:user/local-operator"
TWIN_RESETTERS = {"*": [TWIN_OPERATOR, LOCAL_OPERATOR]}


@functools.cache
def _synth(context_json: str) -> dict[str, Any]:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.app import build
    from infra.controller_config import BREAKER_RESETTERS_KEY, CONTEXT_KEY, REPO_ROOT

    cdk_json = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    twin = {"aws:cdk:bundling-stacks": [], BREAKER_RESETTERS_KEY: TWIN_RESETTERS}
    context = {**cdk_json, **twin, **json.loads(context_json)}
    context.setdefault(CONTEXT_KEY, {})
    app = cdk.App(context=context)
    return Template.from_stack(build(app, nag=False)).to_json()


def synthesized_template(context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CloudFormation template as `cdk synth` writes it from cdk.json (layer bundling skipped, the twin's
    operators as breaker resetters), with `context` on top."""
    return _synth(json.dumps(context or {}, sort_keys=True))
