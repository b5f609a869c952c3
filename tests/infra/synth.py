"""In-process synthesis of the stack for tests, with the context of ``cdk.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_ID = "HyperPodDhc"
TEST_CONTEXT = {
    "aws:cdk:bundling-stacks": [],  # no pip install of the layer in unit tests
    "aws:cdk:enable-path-metadata": True,  # aws:cdk:path on every resource, as `cdk synth` writes it
}


def cdk_context() -> dict[str, Any]:
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


def app(overrides: dict[str, Any] | None = None, *, outdir: Path | None = None) -> cdk.App:
    context = {**cdk_context(), **TEST_CONTEXT, **(overrides or {})}
    return cdk.App(context=context, outdir=str(outdir) if outdir else None)


def config_with(**changes: Any) -> dict[str, Any]:
    """The ``hyperpod-dhc`` context of cdk.json with top-level keys replaced."""
    return {"hyperpod-dhc": {**cdk_context()["hyperpod-dhc"], **changes}}
