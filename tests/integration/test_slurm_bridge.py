"""The Slurm bridge against a real Slurm 22.05 (tests/integration/slurm_cluster.py): the agent's own `sync_once` and
`Scontrol`, with a controller serving documents as the API contract says (in process, or over HTTP through
`OperatorClient`). Every test starts from an idle cluster: ip-10-0-0-1 and -2 in partition `dev` (instance group
`p5-workers`, features gpu,efa), ip-10-0-0-3 in `cpu` (`cpu-workers`, no features)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hpdhc import cli
from hpdhc.bridge import AWAITING, ApiController, Controller, SyncResult, sync_once
from hpdhc.client import OperatorClient
from hpdhc.scontrol import Scontrol, SlurmNode
from tests.integration.slurm_cluster import PROVISIONING_PARAMETERS, SlurmCluster

A, B, C = "ip-10-0-0-1", "ip-10-0-0-2", "ip-10-0-0-3"
CLUSTER = "ml-cluster"
PARTITIONS = {g["partition_name"]: g["instance_group_name"] for g in PROVISIONING_PARAMETERS["worker_groups"]}
RUNNING = "hpdhc: deep health check running"
FAILED = "hpdhc: failed after a failed deep health check"


def entry(node: str, reason: str | None, feature: str = "HealthCheck:InProgress") -> dict:
    return {"node": node, "logical_id": f"lid-{node}", "instance_id": "i-0123456789abcdef0", "group": "p5-workers",
            "state": "pending", "reason": reason, "feature": feature}  # fmt: skip


def document(*entries: dict, isolating: tuple[str, ...] = ("p5-workers",)) -> dict:
    return {"cluster": CLUSTER, "sync_interval_s": 60, "isolating_groups": list(isolating), "nodes": list(entries),
            "next_token": None}  # fmt: skip


class FakeController(Controller):
    """The controller's side of the contract, in process: the document it serves, the occupancy it heard."""

    def __init__(self, *entries: dict, isolating: tuple[str, ...] = ("p5-workers",)) -> None:
        self.document: dict = document(*entries, isolating=isolating)
        self.reports: list[list[dict]] = []

    def desired(self, cluster: str) -> dict:
        return self.document

    def report(self, cluster: str, nodes: list[dict]) -> dict:
        self.reports.append(nodes)
        return {"updated": len(nodes), "unknown": []}


class RecordingScontrol(Scontrol):
    """The real thing, remembering every `scontrol update` it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[tuple[str, list[str]]] = []

    def update(self, node: str, args: list[str]) -> None:
        self.updates.append((node, args))
        super().update(node, args)


def sync(controller: Controller, scontrol: Scontrol | None = None) -> SyncResult:
    return sync_once(CLUSTER, controller, scontrol or Scontrol(), PARTITIONS)


def field(line: str, key: str) -> str:
    """One field of a `scontrol -o show node` line (the reason runs to the end of the line)."""
    if key == "Reason":
        return line.partition(" Reason=")[2]
    return next(f.split("=", 1)[1] for f in line.split() if f.startswith(key + "="))


def comparable(nodes: dict[str, SlurmNode]) -> dict[str, tuple]:
    return {n: (s.drained, s.reason, s.features, s.available, s.busy) for n, s in nodes.items()}


# ---------------------------------------------------------------------- the API, over HTTP on 127.0.0.1


class Api:
    """The controller's API routes of the contract: pages of two nodes, occupancy recorded, any status on demand."""

    page = 2

    def __init__(self, endpoint: str, closed_port: int) -> None:
        self.endpoint, self.closed_port = endpoint, closed_port
        self.document: dict = document()
        self.status: int | str = 200  # or "garbage": a 200 that is no JSON
        self.requests: list[tuple[str, str, dict, str]] = []
        self.occupancy: list[dict] = []

    def answer(self, method: str, url: str, body: bytes, authorization: str) -> tuple[int, bytes]:
        parsed = urllib.parse.urlparse(url)
        query = urllib.parse.parse_qs(parsed.query)
        self.requests.append((method, parsed.path, query, authorization))
        if self.status == "garbage":
            return 200, b"<html>captive portal</html>"
        if self.status != 200:
            return int(self.status), json.dumps({"message": "no"}).encode()
        if method == "GET" and parsed.path == f"/clusters/{CLUSTER}/slurm":
            start = int(query.get("next_token", ["0"])[0])
            nodes = self.document["nodes"]
            more = start + self.page < len(nodes)
            page = {
                **self.document,
                "nodes": nodes[start : start + self.page],
                "next_token": str(start + self.page) if more else None,
            }
            return 200, json.dumps(page).encode()
        if method == "POST" and parsed.path == f"/clusters/{CLUSTER}/slurm/occupancy":
            self.occupancy.append(json.loads(body))
            return 200, json.dumps({"updated": len(self.occupancy[-1]["nodes"]), "unknown": []}).encode()
        return 404, b'{"message": "Not Found"}'


@pytest.fixture
def api():
    state: Api

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, payload = state.answer(self.command, self.path, body, self.headers.get("Authorization", ""))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with socket.socket() as closed:  # bound, then closed: a port that refuses connections
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
    state = Api(f"http://127.0.0.1:{server.server_address[1]}", closed_port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


# ---------------------------------------------------------------------- the agent against Slurm


def test_new_nodes_are_drained_with_our_reason_and_labelled_keeping_their_features(slurm: SlurmCluster):
    controller = FakeController(
        entry(A, AWAITING), entry(B, RUNNING), entry(C, None, "HealthCheck:Passed"), isolating=()
    )
    result = sync(controller)
    assert result.errors == []
    assert result.applied == {
        A: ["State=DRAIN", f"Reason={AWAITING}", "AvailableFeatures=gpu,efa,HealthCheck:InProgress",
            "ActiveFeatures=gpu,efa,HealthCheck:InProgress"],
        B: ["State=DRAIN", f"Reason={RUNNING}", "AvailableFeatures=gpu,efa,HealthCheck:InProgress",
            "ActiveFeatures=gpu,efa,HealthCheck:InProgress"],
        C: ["AvailableFeatures=HealthCheck:Passed", "ActiveFeatures=HealthCheck:Passed"],
    }  # fmt: skip
    a = slurm.line(A)
    assert field(a, "State") == "IDLE+DRAIN"
    assert field(a, "Reason").startswith(AWAITING + " [root@")  # Slurm stamps who drained it and when
    assert (field(a, "AvailableFeatures"), field(a, "ActiveFeatures")) == ("gpu,efa,HealthCheck:InProgress",) * 2
    assert field(slurm.line(B), "Reason").startswith(RUNNING + " [")
    c = slurm.line(C)
    assert field(c, "State") == "IDLE" and " Reason=" not in c and field(c, "ActiveFeatures") == "HealthCheck:Passed"
    # A drained node takes no new job: one submitted to it waits.
    job = slurm.run("sbatch", "--parsable", "-w", A, "-p", "dev", "-o", "/dev/null", "--wrap", "true").strip()
    time.sleep(1)
    assert slurm.job_state(job) == "PENDING"


def test_a_rerun_with_nothing_changed_runs_no_update(slurm: SlurmCluster):
    controller = FakeController(entry(A, AWAITING), entry(B, None, "HealthCheck:Passed"), entry(C, FAILED))
    assert sync(controller).applied.keys() == {A, B, C}
    scontrol = RecordingScontrol()
    again = sync(controller, scontrol)
    assert (again.applied, again.errors, scontrol.updates) == ({}, [], [])
    assert again.reported == [{"node": n, "busy": False} for n in (A, B, C)]


def test_our_reason_is_reworded_as_the_check_moves_on_and_a_passed_node_takes_jobs_again(slurm: SlurmCluster):
    controller = FakeController(entry(A, AWAITING))
    sync(controller)
    drained_at = field(slurm.line(A), "Reason")

    controller.document = document(entry(A, RUNNING))
    assert sync(controller).applied == {A: ["State=DRAIN", f"Reason={RUNNING}"]}
    line = slurm.line(A)
    assert field(line, "State") == "IDLE+DRAIN" and field(line, "Reason").startswith(RUNNING + " [root@")
    assert field(line, "Reason") != drained_at

    controller.document = document(entry(A, None, "HealthCheck:Passed"))
    assert sync(controller).applied == {
        A: ["State=RESUME", "AvailableFeatures=gpu,efa,HealthCheck:Passed", "ActiveFeatures=gpu,efa,HealthCheck:Passed"]
    }
    line = slurm.line(A)
    assert "DRAIN" not in field(line, "State") and " Reason=" not in line
    assert field(line, "ActiveFeatures") == "gpu,efa,HealthCheck:Passed"
    slurm.sbatch(A, seconds=1)  # runs: the node takes jobs again
    assert sync(controller).applied == {}


@pytest.mark.parametrize("reason", ["admin maintenance", "Action:Reboot"])
def test_a_drain_someone_else_set_is_left_alone_and_never_resumed(slurm: SlurmCluster, reason: str):
    slurm.run("scontrol", "update", f"NodeName={A}", "State=DRAIN", f"Reason={reason}")
    slurm.run("scontrol", "update", f"NodeName={B}", "State=DRAIN", f"Reason={reason}")
    theirs = {node: field(slurm.line(node), "Reason") for node in (A, B)}  # with Slurm's [user@time] stamp
    controller = FakeController(entry(A, None, "HealthCheck:Passed"), entry(B, AWAITING))
    for _ in range(2):
        result = sync(controller)
        for node in (A, B):
            line = slurm.line(node)
            assert field(line, "State") == "IDLE+DRAIN" and field(line, "Reason") == theirs[node]
    assert result.applied == {}, "the label was set once, the drain never touched"
    assert field(slurm.line(A), "ActiveFeatures") == "gpu,efa,HealthCheck:Passed"
    assert field(slurm.line(B), "ActiveFeatures") == "gpu,efa,HealthCheck:InProgress"


def test_a_running_job_is_not_killed_when_its_node_is_drained_and_is_reported_busy(slurm: SlurmCluster):
    job = slurm.sbatch(A)
    controller = FakeController(entry(A, AWAITING), entry(B, AWAITING))
    scontrol = RecordingScontrol()
    result = sync(controller, scontrol)
    assert [node for node, _ in scontrol.updates] == [A, B] and result.errors == []
    assert field(slurm.line(A), "State") == "ALLOCATED+DRAIN"  # sinfo: drng, the job goes on
    assert controller.reports == [[{"node": A, "busy": True}, {"node": B, "busy": False}]]
    time.sleep(1)
    assert slurm.job_state(job) == "RUNNING"

    controller.document = document(entry(A, RUNNING), entry(B, RUNNING))
    sync(controller)
    controller.document = document(entry(A, FAILED, "HealthCheck:Failed"), entry(B, FAILED, "HealthCheck:Failed"))
    sync(controller)
    assert slurm.job_state(job) == "RUNNING" and field(slurm.line(A), "State") == "ALLOCATED+DRAIN"
    assert controller.reports[-1] == [{"node": A, "busy": True}, {"node": B, "busy": False}]
    states = {a for _, args in scontrol.updates for a in args if a.startswith("State=")}
    assert states == {"State=DRAIN"}, "nothing but drains: no DOWN, no FAIL"


def test_a_node_the_controller_does_not_list_is_drained_when_its_partition_isolates(slurm: SlurmCluster):
    slurm.run("scontrol", "update", f"NodeName={C}", "State=DRAIN", "Reason=admin maintenance")
    controller = FakeController(entry(A, None, "HealthCheck:Passed"), isolating=("p5-workers", "cpu-workers"))
    result = sync(controller)
    # B (partition dev: p5-workers isolates) registered but not recorded: drained, no job before its check.
    assert result.applied[B] == ["State=DRAIN", f"Reason={AWAITING}"]
    assert field(slurm.line(B), "State") == "IDLE+DRAIN" and field(slurm.line(B), "Reason").startswith(AWAITING)
    assert C not in result.applied and field(slurm.line(C), "Reason").startswith("admin maintenance ")
    assert [r["node"] for r in result.reported] == [A], "only listed nodes are reported"

    # The controller records B; its group isolates no more (or it passed): our drain is lifted.
    controller.document = document(entry(A, None, "HealthCheck:Passed"), entry(B, None, "HealthCheck:Passed"))
    assert sync(controller).applied[B][0] == "State=RESUME"
    assert "DRAIN" not in field(slurm.line(B), "State")

    # A group that does not isolate leaves its unknown nodes alone.
    slurm.run("scontrol", "update", f"NodeName={C}", "State=RESUME")
    assert C not in sync(FakeController(entry(A, None, "HealthCheck:Passed"))).applied


def test_an_unreachable_or_failing_controller_changes_nothing(slurm: SlurmCluster, api: Api):
    sync(FakeController(entry(A, AWAITING)))  # something of ours to resume, if anything were read
    before = comparable(slurm.nodes())
    with_everything_to_change = document(
        entry(A, None, "HealthCheck:Passed"), entry(B, FAILED), isolating=("cpu-workers",)
    )
    api.document = with_everything_to_change
    refused = f"http://127.0.0.1:{api.closed_port}"
    for endpoint, status in ((refused, 200), (api.endpoint, 500), (api.endpoint, 403), (api.endpoint, "garbage")):
        api.status = status
        scontrol = RecordingScontrol()
        result = sync(ApiController(OperatorClient(endpoint)), scontrol)
        assert scontrol.updates == [] and result.reported == [] and result.errors[0].startswith("controller: ")
        assert comparable(slurm.nodes()) == before
    assert api.occupancy == []
    api.status = 200  # and once it answers, everything is applied
    assert sync(ApiController(OperatorClient(api.endpoint))).applied.keys() == {A, B, C}


def test_through_the_api_client_pages_and_signed_requests(slurm: SlurmCluster, api: Api):
    job = slurm.sbatch(C)
    api.document = document(entry(A, AWAITING), entry(B, RUNNING), entry(C, FAILED, "HealthCheck:Failed"))
    result = sync(ApiController(OperatorClient(api.endpoint)))
    assert result.errors == [] and result.applied.keys() == {A, B, C}
    assert [(m, p, q) for m, p, q, _ in api.requests] == [
        ("GET", f"/clusters/{CLUSTER}/slurm", {"limit": ["1000"]}),
        ("GET", f"/clusters/{CLUSTER}/slurm", {"limit": ["1000"], "next_token": ["2"]}),
        ("POST", f"/clusters/{CLUSTER}/slurm/occupancy", {}),
    ]
    assert all(auth.startswith("AWS4-HMAC-SHA256 ") for *_, auth in api.requests), "SigV4-signed"
    assert api.occupancy == [
        {"nodes": [{"node": A, "busy": False}, {"node": B, "busy": False}, {"node": C, "busy": True}]}
    ]
    assert field(slurm.line(C), "State") == "ALLOCATED+DRAIN" and slurm.job_state(job) == "RUNNING"


def test_hpdhc_bridge_once(slurm: SlurmCluster, api: Api, tmp_path):
    parameters = tmp_path / "provisioning_parameters.json"
    parameters.write_text(json.dumps(PROVISIONING_PARAMETERS))
    api.document = document(entry(A, None, "HealthCheck:Passed"))
    argv = ["bridge", "--cluster", CLUSTER, "--endpoint", api.endpoint, "--once", "--provisioning-parameters",
            str(parameters)]  # fmt: skip
    assert cli.main(argv) == 0
    assert field(slurm.line(A), "ActiveFeatures") == "gpu,efa,HealthCheck:Passed"
    assert field(slurm.line(B), "Reason").startswith(AWAITING), "unknown in an isolating partition"
    assert field(slurm.line(C), "State") == "IDLE"
    api.status = 503
    assert cli.main(argv) == 1
