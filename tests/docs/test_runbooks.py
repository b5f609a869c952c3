"""Every alert links a runbook that is there: each notification kind, as rendered, and each alarm of the synthesized
template (the Slurm bridges' too, per cluster and stack-wide) carries a link to docs/RUNBOOKS.md whose anchor is one
of its headings by GitHub's slug rules; and the page has no section for an alert that no longer exists."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Template

from hyperpod_dhc.deephealth.domain.messages import render
from hyperpod_dhc.deephealth.domain.policy import NOTIFICATION_KINDS
from hyperpod_dhc.deephealth.domain.runbooks import RUNBOOKS_URL
from hyperpod_dhc.infra.controller_config import SLURM_BRIDGES_KEY
from tests.docs.test_docs import ROOT, anchors, outside_code_blocks, slug
from tests.harness import synth
from tests.infra.stacks import controller_stack

RUNBOOKS = ROOT / "docs" / "RUNBOOKS.md"
LINK = re.compile(re.escape(RUNBOOKS_URL) + r"#([A-Za-z0-9_-]+)")
BRIDGE_ROLE = "arn:aws:iam::123456789012:role/prod-cluster-execution-role"
ALARM_DESCRIPTION_MAX = 1024  # CloudFormation's limit on AlarmDescription


TOKEN = "t" * 80  # a reference resolved at deploy time (a state machine's name): its longest


def linked_anchors(text: str) -> set[str]:
    return set(LINK.findall(text))


def described(value: Any) -> str:
    """An AlarmDescription as deployed: a string, or an `Fn::Join` of strings and references."""
    if isinstance(value, str):
        return value
    separator, parts = value["Fn::Join"]
    return separator.join(p if isinstance(p, str) else TOKEN for p in parts)


@pytest.fixture(scope="module")
def alarms() -> dict[str, dict[str, Any]]:
    """Every alarm of a stack with named bridges and a "*" entry: every kind of alarm the construct makes."""
    context = {SLURM_BRIDGES_KEY: {"prod": [BRIDGE_ROLE], "*": [BRIDGE_ROLE]}}
    template = Template.from_stack(controller_stack(synth.app(context))).to_json()
    return {
        props["AlarmName"]: props
        for res in template["Resources"].values()
        if res["Type"] == "AWS::CloudWatch::Alarm"
        for props in [res["Properties"]]
    }


def test_the_runbook_url_is_the_repositorys_runbooks_page():
    assert RUNBOOKS_URL.startswith("https://github.com/") and RUNBOOKS_URL.endswith("/blob/main/docs/RUNBOOKS.md")


@pytest.mark.parametrize("kind", NOTIFICATION_KINDS)
def test_each_notification_kind_links_a_runbook_section(kind):
    doc = json.loads(render(kind, "ml-cluster", "gpu", "hyperpod-dhc: s", {}).message)
    for protocol in ("email", "https", "default"):
        assert linked_anchors(doc[protocol]) == {f"notification-{kind}"}, protocol
    assert f"notification-{kind}" in anchors(RUNBOOKS)


def test_each_alarm_links_a_runbook_section(alarms):
    sections = anchors(RUNBOOKS)
    assert len(alarms) > 15, "every alarm kind of the construct, bridges' included"
    for name, props in alarms.items():
        description = described(props["AlarmDescription"])
        assert len(description) <= ALARM_DESCRIPTION_MAX, name
        (anchor,) = linked_anchors(description)
        assert description.endswith(f"Runbook: {RUNBOOKS_URL}#{anchor}"), name
        assert anchor in sections, f"{name}: no heading #{anchor} in docs/RUNBOOKS.md"


def test_every_runbook_section_is_of_an_alert_that_exists(alarms):
    """A kind or an alarm renamed or removed leaves no stale section behind."""
    headings = {
        slug(m.group(1))
        for line in outside_code_blocks(RUNBOOKS.read_text())
        if (m := re.match(r"^### ((?:Notification|Alarm): .*)$", line))
    }
    linked = {a for props in alarms.values() for a in linked_anchors(described(props["AlarmDescription"]))}
    assert headings == linked | {f"notification-{kind}" for kind in NOTIFICATION_KINDS}
