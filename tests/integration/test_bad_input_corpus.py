"""The bad-input corpus (tests/corpus) against the real Intake and Api handlers on the twin.

For every case: the expected outcome (Intake returns without a function error: malformed / foreign /
ignored; Api answers the expected status), a log line that gives the reason, the expected metric in the
Powertools EMF output, a bounded answer (nothing large is echoed back), and an unchanged Nodes table.

One harness for the module (building one per case would cost ~1 s each): a cluster `demo` whose nodes
have been through a round, so the table is not empty and every case must leave it exactly as it was.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import boto3
import pytest

from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES
from tests.corpus import load_cases
from tests.fakes.hyperpod import Clock, FakeHyperPod, GroupSpec
from tests.harness.api_gateway import proxy_event
from tests.harness.engine import REGION, TABLE_NAME, Harness

CONFIG = {"clusters": ["demo"], "defaults": {"gather_window_s": 0}}
EVENT_CASES = load_cases("events.json")
API_CASES = load_cases("api.json")
MAX_ANSWER = 10_000  # bytes: an answer never echoes a large input back
SERVICE_LOGGER = "hyperpod-dhc"
# One worker runs the module: its `world` is built once, not once a worker.
pytestmark = pytest.mark.xdist_group("bad_input_corpus")


@pytest.fixture(scope="module")
def world(controller_template):
    fake = FakeHyperPod(Clock(), seed=7)
    with Harness(controller_template, fake, config=CONFIG) as harness:
        fake.create_cluster("demo", [GroupSpec("gpu", count=2)])

        def settled() -> bool:
            records = harness.records("demo")
            return len(records) == 2 and all(r.state in FINAL_STATES for r in records.values())

        harness.run_until(settled, horizon_s=12 * 3600)
        assert settled() and not harness.running(), "the corpus needs a quiet table to compare against"
        yield harness


def table_items() -> list[dict[str, Any]]:
    pages = boto3.client("dynamodb", region_name=REGION).get_paginator("scan").paginate(TableName=TABLE_NAME)
    return sorted((item for page in pages for item in page["Items"]), key=lambda i: (i["pk"]["S"], i["sk"]["S"]))


def node_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if i["sk"]["S"].startswith("NODE#")]


def emitted_metrics(stdout: str) -> dict[str, float]:
    """Metric name -> summed value over every EMF document printed during the case."""
    found: dict[str, float] = {}
    for line in stdout.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        doc = json.loads(line)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                values = doc[metric["Name"]]
                found[metric["Name"]] = found.get(metric["Name"], 0) + sum(
                    values if isinstance(values, list) else [values]
                )
    return found


def reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        str(record.reason)
        for record in caplog.records
        if record.name == SERVICE_LOGGER and getattr(record, "reason", None)
    ]


def check_logged_and_counted(case: dict, caplog, capsys) -> None:
    expect = case["expect"]
    logged = reasons(caplog)
    assert logged, f"no log line with a reason for {case['name']}"
    if "reason" in expect:
        assert any(expect["reason"].lower() in r.lower() for r in logged), logged
    assert all(len(r) <= 1000 for r in logged), "reasons are bounded in the log too"
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics.get(expect["metric"]) == 1, metrics
    others = {"MalformedEvents", "ForeignEvents", "IgnoredEvents", "RejectedRequests"} - {expect["metric"]}
    assert not others & set(metrics), metrics


@pytest.mark.parametrize("case", EVENT_CASES, ids=[c["name"] for c in EVENT_CASES])
def test_intake_rejects_bad_events(world, case, caplog, capsys):
    caplog.set_level(logging.INFO, logger=SERVICE_LOGGER)
    before = table_items()
    calls_before = dict(world.fake.calls)
    capsys.readouterr()

    result = world.invoke(world.intake_arn, case["input"])  # raises on a function error (EventBridge would retry)

    outcome = result["outcome"]
    assert outcome.split(":")[0] == case["expect"]["outcome"], result
    assert len(json.dumps(result)) < MAX_ANSWER
    if case["expect"]["outcome"] == "round woken":
        # Well formed, about a node HyperPod does not list: the event only wakes the round, whose listing finds
        # nothing new. No node is written and nothing is acted on.
        world.wait_for_executions()
        assert node_items(table_items()) == node_items(before), "a woken round wrote a node it does not list"
        acted = {op for op, n in world.fake.calls.items() if n != calls_before.get(op, 0)}
        assert acted <= {"DescribeCluster", "ListClusterNodes"}, acted
        assert not world.running()
        return
    check_logged_and_counted(case, caplog, capsys)
    assert table_items() == before, "a rejected event wrote to the table"
    acted = {op for op, n in world.fake.calls.items() if n != calls_before.get(op, 0)} - {"DescribeCluster"}
    if case["expect"]["outcome"] != "ignored":
        assert not acted and world.fake.calls == calls_before, "a malformed or foreign event reached HyperPod"
    assert acted <= {"DescribeClusterNode"}, acted  # an ignored event at most looks, never acts
    assert not world.running()


def api_event(spec: dict) -> dict:
    event = proxy_event(spec["method"], spec["path"], spec.get("body"), spec.get("query"))
    if spec.get("base64"):
        event["isBase64Encoded"] = True
    return event


@pytest.mark.parametrize("case", API_CASES, ids=[c["name"] for c in API_CASES])
def test_api_rejects_bad_requests(world, case, caplog, capsys):
    caplog.set_level(logging.INFO, logger=SERVICE_LOGGER)
    before = table_items()
    capsys.readouterr()

    arn = world.function_arns[world.template.api_logical_id]
    response = world.invoke(arn, api_event(case["input"]))  # raises on a function error (a 502 in API Gateway)

    assert response["statusCode"] == case["expect"]["status"], response["body"][:2000]
    assert len(response["body"]) < MAX_ANSWER
    body = json.loads(response["body"])
    assert body["statusCode"] == case["expect"]["status"]
    assert body.get("message") or body.get("detail"), body
    check_logged_and_counted(case, caplog, capsys)
    assert table_items() == before, "a rejected request wrote to the table"
    assert not world.running(), "a rejected request started a round"


def test_the_corpus_covers_every_entry_point_and_outcome():
    assert {c["expect"]["outcome"] for c in EVENT_CASES} == {"malformed", "foreign", "ignored", "round woken"}
    assert {c["expect"]["status"] for c in API_CASES} == {404, 422}
    assert {c["input"]["method"] for c in API_CASES} >= {"GET", "POST", "PUT", "DELETE", "PATCH"}
