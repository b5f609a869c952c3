"""Synthesize the example app's stack (the HyperPodDhc construct) once per session; every infra test reads the same
template."""

from __future__ import annotations

import os
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.harness import synth
from tests.harness.asl import round_definition, round_task_functions
from tests.infra.stacks import controller_stack


def pytest_configure(config: pytest.Config) -> None:
    # Registered by pytest-xdist too; repeated here so the marker is known with `-p no:xdist`.
    config.addinivalue_line("markers", "xdist_group(name): run in the same xdist worker")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # All infra tests share the session-scoped synth: keep them on one worker under `--dist loadgroup`.
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here + os.sep):
            item.add_marker(pytest.mark.xdist_group("infra"))


@pytest.fixture(scope="session")
def stack() -> cdk.Stack:
    return controller_stack()


@pytest.fixture(scope="session")
def template(stack: cdk.Stack) -> Template:
    return Template.from_stack(stack)


@pytest.fixture(scope="session")
def template_json(template: Template) -> dict[str, Any]:
    return template.to_json()


@pytest.fixture(scope="session")
def scoped_template_json() -> dict[str, Any]:
    """The stack when the config names its clusters instead of watching "all"."""
    app = synth.app(synth.config_with(clusters=["train-a", "train-b"]))
    return Template.from_stack(controller_stack(app)).to_json()


@pytest.fixture(scope="session")
def function_arns(template_json: dict[str, Any]) -> dict[str, str]:
    """Construct id -> a fake but well-formed ARN for each task function of the round."""
    return {
        name: f"arn:aws:lambda:us-east-1:123456789012:function:HyperPodDhc-{name}"
        for name in round_task_functions(template_json)
    }


@pytest.fixture(scope="session")
def resolved_definition(template_json: dict[str, Any], function_arns: dict[str, str]) -> str:
    return round_definition(template_json, function_arns)
