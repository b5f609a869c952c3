"""The stack synthesized in-process for tests and the twin, and the one place tests read `cdk.json`.

`app()` builds a CDK app with cdk.json's context (template assertions, cdk-nag); `synthesized_template()` is
the template as `cdk synth` writes it, once per process (jsii start-up dominates: ~3-5 s); `base_config()`
is the controller configuration cdk.json ships, which scenarios and harness tests start from."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from tests.harness.node import venv_node_first

# Before aws_cdk starts jsii (the twin and `hpdhc simulate` import this first): make install's Node.js 22 LTS.
venv_node_first()

# Who may reset breakers and queue checks in the twin (cdk.json ships none, so nobody could): the twin's own
# operators, for every cluster: `Harness.api`'s default principal and the one `hpdhc simulate --serve` signs as.
# Its Slurm bridges sign as one execution role (tests/twin/slurm.py), for every cluster. A test of the policy
# itself passes its own `hyperpod-dhc:breaker-resetters` (slurm-bridges, check-requesters) to
# `synthesized_template`.
TWIN_OPERATOR = "arn:aws:iam::123456789012:user/operator"
LOCAL_OPERATOR = "arn:aws:iam::123456789012:user/local-operator"
TWIN_RESETTERS = {"*": [TWIN_OPERATOR, LOCAL_OPERATOR]}
TWIN_CHECK_REQUESTERS = TWIN_RESETTERS
TWIN_BRIDGE_ROLE = "arn:aws:iam::123456789012:role/hyperpod-cluster-execution-role"
TWIN_SLURM_BRIDGES = {"*": [TWIN_BRIDGE_ROLE]}


REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_ID = "HyperPodDhc"
TEST_CONTEXT = {
    "aws:cdk:bundling-stacks": [],  # no pip install of the layer in unit tests
    "aws:cdk:enable-path-metadata": True,  # aws:cdk:path on every resource, as `cdk synth` writes it
}


def cdk_context() -> dict[str, Any]:
    """cdk.json's context, as the CDK CLI passes it to the app."""
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return context


def base_config() -> dict[str, Any]:
    """The controller configuration cdk.json ships (its `hyperpod-dhc` context)."""
    config: dict[str, Any] = cdk_context().get("hyperpod-dhc", {})
    return config


def app(overrides: dict[str, Any] | None = None, *, outdir: Path | None = None) -> Any:
    import aws_cdk as cdk

    context = {**cdk_context(), **TEST_CONTEXT, **(overrides or {})}
    return cdk.App(context=context, outdir=str(outdir) if outdir else None)


def config_with(**changes: Any) -> dict[str, Any]:
    """The ``hyperpod-dhc`` context of cdk.json with top-level keys replaced."""
    return {"hyperpod-dhc": {**base_config(), **changes}}


@functools.cache
def _synth(context_json: str) -> dict[str, Any]:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from hyperpod_dhc.infra.app import build
    from hyperpod_dhc.infra.controller_config import (
        BREAKER_RESETTERS_KEY,
        CHECK_REQUESTERS_KEY,
        CONTEXT_KEY,
        SLURM_BRIDGES_KEY,
    )

    cdk_json = cdk_context()
    twin = {
        "aws:cdk:bundling-stacks": [],
        BREAKER_RESETTERS_KEY: TWIN_RESETTERS,
        SLURM_BRIDGES_KEY: TWIN_SLURM_BRIDGES,
        CHECK_REQUESTERS_KEY: TWIN_CHECK_REQUESTERS,
    }
    context = {**cdk_json, **twin, **json.loads(context_json)}
    context.setdefault(CONTEXT_KEY, {})
    app = cdk.App(context=context)
    return dict(Template.from_stack(build(app, nag=False)).to_json())


def synthesized_template(context: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CloudFormation template as `cdk synth` writes it from cdk.json (layer bundling skipped, the twin's
    operators as breaker resetters and check requesters, its bridge role as every cluster's), with `context` on
    top."""
    return _synth(json.dumps(context or {}, sort_keys=True))
