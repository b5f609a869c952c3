"""Authority per cluster, end to end: the twin answers as API Gateway does from the synthesized resource policy
(tests/harness/api_gateway.py), and only then runs the real Api function.

`hyperpod-dhc:slurm-bridges` here: cluster "demo" by its own execution role, "dev" by its own;
`hyperpod-dhc:check-requesters`: "demo" by the on-call role. Replayed: the red team's denial of service (turn 3,
finding 2), in which cluster dev's bridge role reported every node of demo busy every 4 minutes for 12 hours
and no node of demo was ever checked.
"""

from __future__ import annotations

import json

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeState, short_hostname
from hyperpod_dhc.infra.controller_config import CHECK_REQUESTERS_KEY, SLURM_BRIDGES_KEY
from hyperpod_dhc.infra.operations_dashboard import BRIDGE_REPORTS_METRIC
from tests.fakes.hyperpod import GroupSpec
from tests.harness import api_gateway as gw
from tests.harness.engine import Harness
from tests.harness.synth import TWIN_OPERATOR, synthesized_template
from tests.harness.template import ControllerTemplate

ACCOUNT = gw.ACCOUNT
DEMO_BRIDGE = f"arn:aws:sts::{ACCOUNT}:assumed-role/demo-cluster-execution-role/i-0123456789abcdef0"
DEV_BRIDGE = f"arn:aws:sts::{ACCOUNT}:assumed-role/dev-cluster-execution-role/i-0feedfacecafe0000"  # the red team's
ON_CALL = f"arn:aws:sts::{ACCOUNT}:assumed-role/HyperPodOnCallEU/alice"
CONTEXT = {
    SLURM_BRIDGES_KEY: {
        "demo": [f"arn:aws:iam::{ACCOUNT}:role/demo-cluster-execution-role"],
        "dev": [f"arn:aws:iam::{ACCOUNT}:role/dev-cluster-execution-role"],
    },
    CHECK_REQUESTERS_KEY: {"demo": [f"arn:aws:iam::{ACCOUNT}:role/HyperPodOnCallEU"]},
}
CONFIG = {"clusters": ["demo", "dev"]}
OCCUPANCY = "/clusters/demo/slurm/occupancy"


@pytest.fixture(scope="module")
def template() -> ControllerTemplate:
    return ControllerTemplate(synthesized_template(CONTEXT))


@pytest.fixture
def gated(template, fake):
    fake.create_cluster("demo", [GroupSpec("gpu", count=3)])
    fake.create_cluster("dev", [GroupSpec("gpu", count=1)])
    with Harness(template, fake, config=CONFIG) as h:
        yield h


def _denied(caller: str, method: str, path: str) -> tuple[int, dict]:
    arn = f"arn:aws:execute-api:us-east-1:{ACCOUNT}:{gw.API_ID}/v1/{method}{path}"
    message = (
        f"User: {caller} is not authorized to perform: execute-api:Invoke on resource: {arn} with an explicit deny"
    )
    return 403, {"Message": message}


def _names(h: Harness, cluster: str) -> list[str]:
    """The Slurm names of the cluster's recorded nodes, once they are seen with a hostname."""
    h.run_until(lambda: any(r.hostname for r in h.records(cluster).values()), horizon_s=600)
    return [short_hostname(r.hostname) for r in h.records(cluster).values() if r.hostname]


def _busy(names: list[str]) -> dict:
    return {"nodes": [{"node": n, "busy": True} for n in names]}


def _bridge_reports(stdout: str) -> dict[str, float]:
    """Cluster -> the metric the stack's bridge-silence alarms watch, summed over the EMF documents printed."""
    out: dict[str, float] = {}
    for line in stdout.splitlines():
        if line.startswith("{") and f'"{BRIDGE_REPORTS_METRIC}"' in line:
            doc = json.loads(line)
            (directive,) = doc["_aws"]["CloudWatchMetrics"]
            assert directive["Dimensions"] == [["service", "cluster"]] and directive["Namespace"] == "HyperPodDHC"
            out[doc["cluster"]] = out.get(doc["cluster"], 0) + sum(doc[BRIDGE_REPORTS_METRIC])
    return out


def test_another_clusters_bridge_role_is_refused_writes_nothing_and_is_not_counted(gated, capsys):
    names = _names(gated, "demo")
    capsys.readouterr()
    assert gated.api("POST", OCCUPANCY, _busy(names), principal=DEV_BRIDGE) == _denied(DEV_BRIDGE, "POST", OCCUPANCY)
    state = "/clusters/demo/slurm"
    assert gated.api("GET", state, principal=DEV_BRIDGE) == _denied(DEV_BRIDGE, "GET", state)  # nor the inventory
    assert not any(r.slurm_busy for r in gated.records("demo").values())
    assert _bridge_reports(capsys.readouterr().out) == {}


def test_a_clusters_own_bridge_role_reaches_the_handler_and_each_report_is_counted(gated, capsys):
    names = _names(gated, "demo")
    capsys.readouterr()
    status, body = gated.api("POST", OCCUPANCY, _busy(names), principal=DEMO_BRIDGE)
    assert status == 200 and body["unknown"] == [], body
    assert gated.api("GET", "/clusters/demo/slurm", principal=DEMO_BRIDGE)[0] == 200
    status, body = gated.api("POST", "/clusters/dev/slurm/occupancy", _busy(["ip-10-9-9-9"]), principal=DEV_BRIDGE)
    assert status == 200 and body["unknown"] == ["ip-10-9-9-9"], body
    status, _ = gated.api("POST", "/clusters/nowhere/slurm/occupancy", _busy(names), principal=DEMO_BRIDGE)
    assert status == 403  # a cluster nobody's bridge is named for: nobody's
    assert _bridge_reports(capsys.readouterr().out) == {"demo": 2, "dev": 1}  # the accepted pulls and reports


def test_only_the_clusters_check_requesters_may_queue_checks(gated):
    checks = "/clusters/demo/checks"
    for caller in (TWIN_OPERATOR, DEMO_BRIDGE, f"arn:aws:iam::{ACCOUNT}:user/anyone"):
        assert gated.api("POST", checks, {"groups": ["gpu"]}, principal=caller) == _denied(caller, "POST", checks)
    status, body = gated.api("POST", checks, {"groups": ["gpu"]}, principal=ON_CALL)
    assert status == 202, body
    other = "/clusters/dev/checks"  # demo's requester is not dev's, and there is no "*"
    assert gated.api("POST", other, {"groups": ["gpu"]}, principal=ON_CALL) == _denied(ON_CALL, "POST", other)
    assert gated.api("GET", "/clusters/demo/nodes", principal=TWIN_OPERATOR)[0] == 200  # reads stay open


def test_twelve_hours_of_another_clusters_busy_reports_are_all_refused_and_the_nodes_are_checked(gated, fake):
    statuses: list[int] = []

    def report() -> None:
        names = [short_hostname(r.hostname) for r in gated.records("demo").values() if r.hostname]
        if names:
            status, body = gated.api("POST", OCCUPANCY, _busy(names), principal=DEV_BRIDGE)
            assert (status, body) == _denied(DEV_BRIDGE, "POST", OCCUPANCY)
            statuses.append(status)
        gated.at(gated.clock.now() + 240, report)

    gated.at(gated.clock.now() + 60, report)
    gated.run_until(lambda: False, horizon_s=12 * 3600)
    assert len(statuses) >= 170 and set(statuses) == {403}  # the red team sent 179, every one answered 200
    assert not any(r.slurm_busy for r in gated.records("demo").values())
    assert fake.calls.get("StartClusterHealthCheck", 0) >= 1  # the red team saw 0
    assert {r.state for r in gated.records("demo").values()} == {NodeState.PASSED}
