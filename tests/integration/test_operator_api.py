"""The operator API through the real Api handler (REST proxy events), the on-demand path, notifications."""

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeState
from tests.fakes.hyperpod import GroupSpec

CONFIG = {"clusters": ["demo"], "defaults": {"gather_window_s": 0, "recovery": "reboot-then-replace"}}


def _until_final(harness, n):
    from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES

    def done():
        records = harness.records("demo")
        return len(records) == n and all(r.state in FINAL_STATES for r in records.values())

    harness.run_until(done, horizon_s=12 * 3600)


@pytest.mark.controller_config(CONFIG)
def test_read_routes_after_a_round(harness, fake):
    fake.create_cluster(
        "demo", [GroupSpec("gpu", count=3), GroupSpec("ctl", "ml.m5.xlarge", count=1, node_type="Controller")]
    )
    bad = next(iter(fake.cluster("demo").nodes))
    fake.set_truth("demo", bad, "fail", cured_by="reboot")
    _until_final(harness, 3)

    status, body = harness.api("GET", "/clusters")
    assert status == 200 and body["clusters"][0]["cluster"] == "demo"
    assert body["clusters"][0]["states"]["passed"] == 3

    status, body = harness.api("GET", "/clusters/demo/groups")
    (gpu,) = body["groups"]
    assert status == 200 and gpu["group"] == "gpu" and gpu["progress"] == {"checked": 3, "total": 3}
    assert gpu["gpu_hours_in_checks"] > 0 and gpu["last_verdicts"]

    status, body = harness.api("GET", "/clusters/demo/nodes", query={"group": "gpu", "limit": "2"})
    assert status == 200 and len(body["nodes"]) == 2 and body["next_token"]
    status, rest = harness.api("GET", "/clusters/demo/nodes", query={"group": "gpu", "next_token": body["next_token"]})
    assert len(rest["nodes"]) == 1 and rest["next_token"] is None

    status, node = harness.api("GET", f"/clusters/demo/nodes/{bad}")
    assert status == 200 and node["attempts"] == 1 and node["state"] == "passed"
    reasons = [h["reason"] for h in node["history"]]
    assert any("reboot" in r for r in reasons), reasons
    by_instance = harness.api("GET", f"/clusters/demo/nodes/{node['instance_id']}")[1]
    assert by_instance["node"] == bad

    notes = harness.notifications()
    kinds = [n["attributes"]["kind"] for n in notes]
    assert "node-failed" in kinds and "node-recovered" in kinds and "round-finished" in kinds
    assert all(n["attributes"]["cluster"] == "demo" for n in notes)
    # Node notices go to the node's group; what the cluster itself was seen doing (a new line shape) to all.
    assert {n["attributes"]["group"] for n in notes if n["attributes"]["kind"] != "reading-observed"} == {"gpu"}
    shapes = [n["message"]["shape"] for n in notes if n["attributes"]["kind"] == "reading-observed"]
    assert shapes == [], "a record the rules place raises no alert (only one no rule places does, the first time)"

    status, readings = harness.api("GET", "/clusters/demo/readings")
    assert status == 200 and readings["streams"] == {"instance-id": readings["lines"]}
    assert set(readings["shapes"]) == {"error builtin:failure-level", "info builtin:summary"}
    assert readings["lag"]["max_s"] == 0
    assert readings["as_fidelity"] == {}, "the fake's defaults, as the twin plays them"
    failed = next(n["message"] for n in notes if n["attributes"]["kind"] == "node-failed")
    assert failed["node"] == bad and failed["verdict"] == "failed" and failed["evidence"]


@pytest.mark.controller_config(CONFIG)
@pytest.mark.parametrize(
    ("method", "path", "body", "query", "status"),
    [
        ("GET", "/clusters/other/groups", None, None, 404),
        ("GET", "/clusters/demo/nodes/i-0000000000000beef", None, None, 404),
        ("GET", "/clusters/demo/nodes/bad;id", None, None, 422),
        ("GET", "/clusters/demo/nodes", None, {"state": "happy"}, 422),
        ("GET", "/clusters/demo/nodes", None, {"limit": "0"}, 422),
        ("POST", "/clusters/demo/checks", {}, None, 422),
        ("POST", "/clusters/demo/checks", {"groups": ["gpu"], "checks": ["Bogus"]}, None, 422),
        ("POST", "/clusters/demo/checks", "{not json", None, 422),
        ("POST", "/clusters/demo/checks", {"instances": ["' OR 1=1 --"]}, None, 422),
        ("POST", "/clusters/nope/checks", {"groups": ["gpu"]}, None, 404),
        ("DELETE", "/clusters/demo", None, None, 403),  # API Gateway: Missing Authentication Token
    ],
)
def test_bad_requests_get_a_clear_4xx(harness, fake, method, path, body, query, status):
    fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    got, payload = harness.api(method, path, body, query)
    assert got == status, payload
    assert payload and ("message" in payload or "detail" in payload)


@pytest.mark.controller_config({"clusters": "all"})
def test_watching_every_cluster_a_cluster_is_known_once_registered(harness, fake):
    """`clusters: all`: a cluster is known by its registry item (Reconcile writes it when it first looks at the
    cluster), asked of that item alone, not of the whole registry: 404 before, its groups after."""
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
    from tests.harness.engine import TABLE_NAME

    harness._next_reconcile = float("inf")  # no Reconcile: the registry holds only what this test writes
    fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    status, body = harness.api("GET", "/clusters/demo/groups")
    assert status == 404 and "not watched" in body["message"], body
    NodeTable(TABLE_NAME).register_cluster("demo", recorded_at=None)
    status, body = harness.api("GET", "/clusters/demo/groups")
    assert status == 200 and "groups" in body, body
    assert harness.api("GET", "/clusters/other/groups")[0] == 404


@pytest.mark.controller_config(CONFIG)
def test_on_demand_check_from_request_to_verdict(harness, fake):
    fake.create_cluster("demo", [GroupSpec("gpu", count=4)])
    _until_final(harness, 4)
    starts = fake.calls["StartClusterHealthCheck"]
    victim = sorted(harness.records("demo"))[0]
    fake.set_truth("demo", victim, "fail", cured_by="reboot")

    status, body = harness.api(
        "POST", "/clusters/demo/checks", {"groups": ["gpu"], "checks": ["InstanceStress", "InstanceConnectivity"]}
    )
    assert status == 202 and sorted(body["queued"]) == sorted(harness.records("demo")) and not body["not_queued"]
    assert "not pre-empted" in body["note"]
    again = harness.api("POST", "/clusters/demo/checks", {"instances": [victim]})[1]
    assert again["queued"] == [] and again["not_queued"][0]["reason"].startswith("already")

    _until_final(harness, 4)
    request = [p for _, op, p in fake.requests if op == "StartClusterHealthCheck"][starts]
    assert request["DeepHealthCheckConfigurations"][0]["DeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    record = harness.records("demo")[victim]
    assert record.state == NodeState.PASSED and record.attempts == 1
    assert any(h.trigger and h.trigger.startswith("api:") and "operator" in h.trigger for h in record.history)
