"""The Slurm bridge against a real Slurm 22.05 (tests/bridge/slurm_cluster.py): the agent's own `sync_once` and
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

from hyperpod_dhc.hpdhc import bridge, cli, gate
from hyperpod_dhc.hpdhc.client import OperatorClient
from hyperpod_dhc.hpdhc.document import FEATURES, Memory
from hyperpod_dhc.hpdhc.lock import AWAITING
from hyperpod_dhc.hpdhc.outcome import SyncResult
from hyperpod_dhc.hpdhc.scontrol import Scontrol, SlurmNode, lock_name
from hyperpod_dhc.hpdhc.sync import ApiController, Controller, sync_once
from tests.bridge.slurm_cluster import PROVISIONING_PARAMETERS, SlurmCluster, wait_for

A, B, C = "ip-10-0-0-1", "ip-10-0-0-2", "ip-10-0-0-3"
CLUSTER = "ml-cluster"
PARTITIONS = {g["partition_name"]: g["instance_group_name"] for g in PROVISIONING_PARAMETERS["worker_groups"]}
WAITING = "hpdhc:wait deep health check not passed yet, i-0123456789abcdef0; hpdhc history ml-cluster lid"
RUNNING = "hpdhc:check deep health check running, i-0123456789abcdef0; hpdhc history ml-cluster lid"
FAILED = "hpdhc:FAIL dcgm failed, i-0123456789abcdef0; hpdhc history ml-cluster lid"
ALL = ",".join(FEATURES)


def entry(node: str, reason: str | None, feature: str = "HealthCheck:InProgress") -> dict:
    return {"node": node, "key": f"lid-{node}", "logical_id": f"lid-{node}", "instance_id": "i-0123456789abcdef0",
            "group": "p5-workers", "state": "pending", "reason": reason, "feature": feature}  # fmt: skip


def document(*entries: dict, isolating: tuple[str, ...] = ("p5-workers",), complete: bool = True,
             generation: float = 1.0) -> dict:  # fmt: skip
    return {"cluster": CLUSTER, "sync_interval_s": 60, "isolating_groups": list(isolating), "nodes": list(entries),
            "complete": complete, "generation": generation, "next_token": None}  # fmt: skip


class FakeController(Controller):
    """The controller's side of the contract, in process: the document it serves, the occupancy it heard."""

    def __init__(self, *entries: dict, isolating: tuple[str, ...] = ("p5-workers",), complete: bool = True) -> None:
        self.document: dict = document(*entries, isolating=isolating, complete=complete)
        self.reports: list[list[dict]] = []

    def desired(self, cluster: str, since=None, status=None) -> dict:
        return self.document

    def report(self, cluster: str, nodes: list[dict]) -> dict:
        self.reports.append(nodes)
        return {"updated": len(nodes), "unknown": []}


class RecordingScontrol(Scontrol):
    """The real thing, remembering every `scontrol update` it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[tuple[str, list[str]]] = []  # one per node named

    def update(self, nodes, args: list[str]) -> None:
        self.updates += [(node, args) for node in nodes]
        super().update(nodes, args)


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
        entry(A, WAITING), entry(B, RUNNING), entry(C, None, "HealthCheck:Passed"), isolating=()
    )
    scontrol = RecordingScontrol()
    result = sync(controller, scontrol)
    assert result.errors == []
    assert result.applied == {
        A: ["State=DRAIN", f"Reason={WAITING}", f"AvailableFeatures=gpu,efa,{ALL}",
            "ActiveFeatures=gpu,efa,HealthCheck:InProgress"],
        B: ["State=DRAIN", f"Reason={RUNNING}", f"AvailableFeatures=gpu,efa,{ALL}",
            "ActiveFeatures=gpu,efa,HealthCheck:InProgress"],
        C: [f"AvailableFeatures={ALL}", "ActiveFeatures=HealthCheck:Passed"],
    }  # fmt: skip
    a = slurm.line(A)
    assert field(a, "State") == "IDLE+DRAIN"
    assert field(a, "Reason").startswith(WAITING + " [root@")  # Slurm stamps who drained it and when
    assert (field(a, "AvailableFeatures"), field(a, "ActiveFeatures")) == (f"gpu,efa,{ALL}", "gpu,efa," + FEATURES[0])
    assert field(slurm.line(B), "Reason").startswith(RUNNING + " [")
    c = slurm.line(C)
    assert field(c, "State") == "IDLE" and " Reason=" not in c and field(c, "ActiveFeatures") == "HealthCheck:Passed"
    # A drained node takes no new job: one submitted to it waits.
    job = slurm.run("sbatch", "--parsable", "-w", A, "-p", "dev", "-o", "/dev/null", "--wrap", "true").strip()
    time.sleep(1)
    assert slurm.job_state(job) == "PENDING"


def test_a_rerun_with_nothing_changed_runs_no_update(slurm: SlurmCluster):
    controller = FakeController(entry(A, WAITING), entry(B, None, "HealthCheck:Passed"), entry(C, FAILED))
    assert sync(controller).applied.keys() == {A, B, C}
    scontrol = RecordingScontrol()
    again = sync(controller, scontrol)
    assert (again.applied, again.errors, scontrol.updates) == ({}, [], [])
    assert again.reported == [{"node": n, "busy": False, "key": f"lid-{n}"} for n in (A, B, C)]


def test_our_reason_is_reworded_as_the_check_moves_on_and_a_passed_node_takes_jobs_again(slurm: SlurmCluster):
    controller = FakeController(entry(A, WAITING))
    sync(controller)
    drained_at = field(slurm.line(A), "Reason")

    controller.document = document(entry(A, RUNNING))
    assert sync(controller).applied == {A: ["State=DRAIN", f"Reason={RUNNING}"]}
    line = slurm.line(A)
    assert field(line, "State") == "IDLE+DRAIN" and field(line, "Reason").startswith(RUNNING + " [root@")
    assert field(line, "Reason") != drained_at

    controller.document = document(entry(A, None, "HealthCheck:Passed"))
    assert sync(controller).applied == {A: [
        "State=RESUME", f"AvailableFeatures=gpu,efa,{ALL}", "ActiveFeatures=gpu,efa,HealthCheck:Passed"]}  # fmt: skip
    line = slurm.line(A)
    assert "DRAIN" not in field(line, "State") and " Reason=" not in line
    assert field(line, "ActiveFeatures") == "gpu,efa,HealthCheck:Passed"
    slurm.sbatch(A, seconds=1)  # runs: the node takes jobs again
    assert sync(controller).applied == {}


class DrainedAfterTheRead(Scontrol):
    """The read/write race, widened: right after the pass reads Slurm, an admin drains `node` (between the pass's
    `show node` and its `update`)."""

    def __init__(self, slurm: SlurmCluster, node: str) -> None:
        super().__init__()
        self.slurm, self.node, self.done = slurm, node, False

    def nodes(self, names=(), lock=None):
        seen = super().nodes(names, lock)
        if not names and not self.done:
            self.slurm.run("scontrol", "update", f"NodeName={self.node}", "State=DRAIN", "Reason=admin: dimm suspect")
            self.done = True
        return seen


def test_an_admins_drain_placed_between_the_passs_read_and_its_resume_survives_the_pass(slurm: SlurmCluster):
    controller = FakeController(entry(A, WAITING), entry(B, WAITING))
    sync(controller)
    controller.document = document(entry(A, None, "HealthCheck:Passed"), entry(B, None, "HealthCheck:Passed"))
    result = sync(controller, DrainedAfterTheRead(slurm, A))
    line = slurm.line(A)
    assert field(line, "Reason").startswith("admin: dimm suspect") and "DRAIN" in field(line, "State"), line
    assert A not in result.applied and result.held[A] == "admin: dimm suspect"
    assert B in result.applied and "DRAIN" not in field(slurm.line(B), "State"), "the other node is resumed"


def _hold(slurm: SlurmCluster, node: str, how: str) -> None:
    if how == "admin DOWN":
        slurm.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=bad dimm, do not use")
    elif how == "FAIL Action:Reboot":  # how the awsome-distributed-training health_check asks HyperPod to reboot
        slurm.run("scontrol", "update", f"NodeName={node}", "State=FAIL", "Reason=Action:Reboot")
    elif how == "admin DRAIN":
        slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=admin maintenance")
    else:  # Slurm's own: slurmd gone, marked DOWN "Not responding" (what SlurmdTimeout does, without the wait)
        slurm.stop_slurmd(node)
        slurm.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=Not responding")


@pytest.mark.parametrize("how", ["admin DOWN", "FAIL Action:Reboot", "admin DRAIN", "Not responding"])
def test_a_node_someone_else_holds_survives_a_whole_controller_cycle_untouched_and_unresumed(slurm, how):
    _hold(slurm, A, how)
    before = slurm.line(A)
    theirs, state = field(before, "Reason"), field(before, "State")
    scontrol = RecordingScontrol()
    controller = FakeController(entry(A, WAITING), entry(B, WAITING))
    for reason, feature in ((WAITING, FEATURES[0]), (RUNNING, FEATURES[0]), (None, "HealthCheck:Passed")):
        controller.document = document(entry(A, reason, feature), entry(B, reason, feature))
        result = sync(controller, scontrol)
        line = slurm.line(A)
        assert field(line, "Reason") == theirs, f"{how}: reason kept ({line})"
        assert A in result.held and controller.reports[-1][0]["held"] == result.held[A]
    assert [node for node, _ in scontrol.updates if node == A] == [], "not one update on it"
    assert {node for node, _ in scontrol.updates} == {B}
    after = field(slurm.line(A), "State")
    assert after.split("+")[0] != "IDLE" or "+" in after, f"not back in service: {after} (was {state})"
    assert field(slurm.line(A), "ActiveFeatures") == "gpu,efa", "not even relabelled"


def test_a_node_in_someone_elses_reservation_maint_or_not_is_held_and_reported_never_drained(slurm: SlurmCluster):
    """Slurm 22.05 shows no reservation in a node's State: the bridge reads the reservations themselves."""
    slurm.run("scontrol", "create", "reservation", "ReservationName=maint1", "StartTime=now", "Duration=60",
              "Users=root", "Flags=MAINT", f"Nodes={A}")  # fmt: skip
    slurm.run("scontrol", "create", "reservation", "ReservationName=team", "StartTime=now", "Duration=60",
              "Users=root", f"Nodes={B}")  # fmt: skip
    scontrol = RecordingScontrol()
    controller = FakeController(entry(A, WAITING), entry(B, WAITING), entry(C, WAITING))
    result = sync(controller, scontrol)
    assert result.held == {A: "reservation maint1 (MAINT)", B: "reservation team"}
    assert {node for node, _ in scontrol.updates} == {C}, "only the node no one holds is drained"
    for node in (A, B):
        assert "DRAIN" not in field(slurm.line(node), "State")
    assert {r["node"]: r.get("held") for r in controller.reports[-1]} == {
        A: "reservation maint1 (MAINT)", B: "reservation team", C: None}  # fmt: skip


def test_a_running_job_is_not_killed_when_its_node_is_drained_and_is_reported_busy(slurm: SlurmCluster):
    job = slurm.sbatch(A)
    controller = FakeController(entry(A, WAITING), entry(B, WAITING))
    scontrol = RecordingScontrol()
    result = sync(controller, scontrol)
    assert [node for node, _ in scontrol.updates] == [A, B] and result.errors == []
    assert field(slurm.line(A), "State") == "ALLOCATED+DRAIN"  # sinfo: drng, the job goes on
    reported = [{"node": A, "busy": True, "key": f"lid-{A}"}, {"node": B, "busy": False, "key": f"lid-{B}"}]
    assert controller.reports == [reported]
    time.sleep(1)
    assert slurm.job_state(job) == "RUNNING"

    controller.document = document(entry(A, RUNNING), entry(B, RUNNING))
    sync(controller)
    controller.document = document(entry(A, FAILED, "HealthCheck:Failed"), entry(B, FAILED, "HealthCheck:Failed"))
    sync(controller)
    # Drained and running its job; once slurmctld applies the lock's reservation, also MAINTENANCE+RESERVED.
    assert slurm.job_state(job) == "RUNNING" and {"ALLOCATED", "DRAIN"} <= set(field(slurm.line(A), "State").split("+"))
    assert controller.reports[-1] == reported
    states = {a for _, args in scontrol.updates for a in args if a.startswith("State=")}
    assert states == {"State=DRAIN"}, "nothing but drains: no DOWN, no FAIL"


def test_an_unlisted_node_is_drained_only_when_the_document_covers_the_cluster(slurm: SlurmCluster):
    slurm.run("scontrol", "update", f"NodeName={C}", "State=DRAIN", "Reason=admin maintenance")
    partial = FakeController(entry(A, None, "HealthCheck:Passed"), isolating=("p5-workers",), complete=False)
    assert B not in sync(partial).applied, "a partial document proves nothing about B"
    assert field(slurm.line(B), "State") == "IDLE"
    controller = FakeController(entry(A, None, "HealthCheck:Passed"), isolating=("p5-workers", "cpu-workers"))
    result = sync(controller)
    # B (partition dev: p5-workers isolates) registered but not recorded: drained, no job before its check.
    assert result.applied[B] == ["State=DRAIN", f"Reason={AWAITING}"]
    assert field(slurm.line(B), "State") == "IDLE+DRAIN" and field(slurm.line(B), "Reason").startswith(AWAITING)
    assert C not in result.applied and field(slurm.line(C), "Reason").startswith("admin maintenance ")
    assert [r["node"] for r in result.reported] == [A], "only listed nodes are reported"

    # The controller records B and it passes: our drain is lifted.
    controller.document = document(entry(A, None, "HealthCheck:Passed"), entry(B, None, "HealthCheck:Passed"))
    assert sync(controller).applied[B][0] == "State=RESUME"
    assert "DRAIN" not in field(slurm.line(B), "State")


def test_an_empty_document_drains_nothing(slurm: SlurmCluster):
    before = comparable(slurm.nodes())
    scontrol = RecordingScontrol()
    result = sync(FakeController(isolating=("p5-workers", "cpu-workers"), complete=False), scontrol)
    assert scontrol.updates == [] and result.errors == [] and comparable(slurm.nodes()) == before


def test_a_reused_name_the_controller_calls_ambiguous_is_never_resumed(slurm: SlurmCluster):
    ambiguous = {**entry(A, "hpdhc:ambig ip-10-0-0-1 claimed by i-0aaa i-0bbb; hpdhc nodes"), "key": None,
                 "state": "ambiguous"}  # what GET /slurm lists for a name two live records claim  # fmt: skip
    controller = FakeController(ambiguous)
    for _ in range(2):
        sync(controller)
        assert field(slurm.line(A), "State") == "IDLE+DRAIN"
        assert field(slurm.line(A), "Reason").startswith("hpdhc:ambig ip-10-0-0-1")
    job = slurm.run("sbatch", "--parsable", "-w", A, "-p", "dev", "-o", "/dev/null", "--wrap", "true").strip()
    time.sleep(1)
    assert slurm.job_state(job) == "PENDING"


# ---------------------------------------------------------------------- no job before the check: the gate at boot


def _new_node(slurm: SlurmCluster, node: str) -> str:
    """`node` as a new instance before its slurmd: known to slurmctld, DOWN `Not responding`; a job queued for it."""
    slurm.stop_slurmd(node)
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=Not responding")
    return slurm.run("sbatch", "--parsable", "-w", node, "-p", "dev", "-o", "/dev/null", "--wrap", "sleep 30").strip()


def _registered(slurm: SlurmCluster, node: str) -> bool:
    return "DOWN" not in field(slurm.line(node), "State")


def test_without_the_gate_a_job_queued_before_slurmd_starts_runs_within_seconds(slurm: SlurmCluster):
    job = _new_node(slurm, A)
    slurm.start_slurmd(A)
    wait_for(lambda: slurm.job_state(job) == "RUNNING", "the job to start on the new node", slurm.logs)


@pytest.mark.parametrize("api_up", [True, False])
def test_with_the_gate_a_job_queued_before_slurmd_starts_waits_for_the_pass(slurm: SlurmCluster, api: Api, api_up,
                                                                            tmp_path):  # fmt: skip
    job = _new_node(slurm, A)
    assert gate.main(["node-boot", "--cluster", CLUSTER, "--node", A, "--wait", "5", "--marker-dir",
                      str(tmp_path / "marks")]) == 0  # fmt: skip  # the lifecycle script, before slurmd
    assert field(slurm.line(A), "Reason").startswith(gate.BOOT_REASON)
    slurm.start_slurmd(A)
    wait_for(lambda: _registered(slurm, A), "the new node to register", slurm.logs)
    parameters = tmp_path / "p.json"
    parameters.write_text(json.dumps(PROVISIONING_PARAMETERS))
    argv = ["bridge", "--cluster", CLUSTER, "--endpoint", api.endpoint, "--once", "--provisioning-parameters",
            str(parameters), "--state-dir", str(tmp_path / "state")]  # fmt: skip
    api.document = document(entry(A, WAITING), entry(B, None, "HealthCheck:Passed"))
    api.status = 200 if api_up else 503
    for _ in range(3):  # passes while the check runs (or the API is down): the node stays out
        assert cli.main(argv) == (0 if api_up else bridge.EXIT_API)
        time.sleep(1)
        assert slurm.job_state(job) == "PENDING" and "DRAIN" in field(slurm.line(A), "State")
    api.status = 200
    api.document = document(entry(A, None, "HealthCheck:Passed"), entry(B, None, "HealthCheck:Passed"))
    assert cli.main(argv) == 0
    slurm.wait_running(job, "the job to start once the node passed")


def test_the_gate_leaves_a_node_an_admin_holds(slurm: SlurmCluster, tmp_path):
    slurm.run("scontrol", "update", f"NodeName={A}", "State=DRAIN", "Reason=admin: rack 7")
    marks = ["--marker-dir", str(tmp_path)]
    assert gate.main(["node-boot", "--cluster", CLUSTER, "--node", A, "--wait", "1", *marks]) == 0
    assert field(slurm.line(A), "Reason").startswith("admin: rack 7") and _lock(slurm) == set()
    assert gate.main(["node-boot", "--cluster", CLUSTER, "--node", "ip-10-0-0-99", "--wait", "0", *marks]) == 0
    assert (tmp_path / "ip-10-0-0-99").exists(), "unknown to slurmctld: marked, and the launch goes on"


# ---------------------------------------------------------------------- through the API, the CLI and its guards


def test_an_unreachable_or_failing_controller_changes_nothing(slurm: SlurmCluster, api: Api):
    sync(FakeController(entry(A, WAITING)))  # something of ours to resume, if anything were read
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
    api.document = document(entry(A, WAITING), entry(B, RUNNING), entry(C, FAILED, "HealthCheck:Failed"))
    result = sync(ApiController(OperatorClient(api.endpoint)))
    assert result.errors == [] and result.applied.keys() == {A, B, C}
    bridge_id = api.requests[0][2]["bridge"]  # who this bridge is, on every page: `<hostname>:<uuid>`
    assert bridge_id[0].startswith(socket.gethostname()[:20])
    assert [(m, p, q) for m, p, q, _ in api.requests] == [
        ("GET", f"/clusters/{CLUSTER}/slurm", {"limit": ["10000"], "bridge": bridge_id}),
        ("GET", f"/clusters/{CLUSTER}/slurm", {"limit": ["10000"], "bridge": bridge_id, "next_token": ["2"]}),
        ("POST", f"/clusters/{CLUSTER}/slurm/occupancy", {}),
    ]
    assert all(auth.startswith("AWS4-HMAC-SHA256 ") for *_, auth in api.requests), "SigV4-signed"
    assert api.occupancy == [{"nodes": [{"node": A, "busy": False, "key": f"lid-{A}"},
                                        {"node": B, "busy": False, "key": f"lid-{B}"},
                                        {"node": C, "busy": True, "key": f"lid-{C}"}]}]  # fmt: skip
    assert field(slurm.line(C), "State") == "ALLOCATED+DRAIN" and slurm.job_state(job) == "RUNNING"


def test_hpdhc_bridge_once_dry_run_and_a_second_bridge(slurm: SlurmCluster, api: Api, tmp_path, capsys):
    parameters = tmp_path / "provisioning_parameters.json"
    parameters.write_text(json.dumps(PROVISIONING_PARAMETERS))
    api.document = document(entry(A, None, "HealthCheck:Passed"))
    argv = ["bridge", "--cluster", CLUSTER, "--endpoint", api.endpoint, "--provisioning-parameters", str(parameters),
            "--state-dir", str(tmp_path / "state")]  # fmt: skip
    before = comparable(slurm.nodes())
    assert cli.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert comparable(slurm.nodes()) == before and api.occupancy == [], "a dry run changes nothing"
    assert f'scontrol update NodeName={B} State=DRAIN Reason="{AWAITING}"' in out
    assert f"scontrol update NodeName={A} AvailableFeatures=gpu,efa,{ALL}" in out

    with bridge.single_instance(tmp_path / "state", CLUSTER):  # another bridge runs: this one changes nothing
        assert cli.main([*argv, "--once"]) == bridge.EXIT_LOCKED
    assert comparable(slurm.nodes()) == before

    assert cli.main([*argv, "--once"]) == 0
    assert field(slurm.line(A), "ActiveFeatures") == "gpu,efa,HealthCheck:Passed"
    assert field(slurm.line(B), "Reason").startswith(AWAITING), "unknown in an isolating partition"
    assert field(slurm.line(C), "State") == "IDLE"
    api.status = 503
    assert cli.main([*argv, "--once"]) == bridge.EXIT_API
    api.status = 403
    assert cli.main([*argv, "--once"]) == bridge.EXIT_AUTH


# ---------------------------------------------------------------------- the lock: no RESUME lifts it

LOCK = lock_name(CLUSTER)
PASSED = "HealthCheck:Passed"
# The longest a pending job took to start on a resumed node before the lock (redteam-4 finding 2: 11.8 s).
SCHEDULER_S = 12.0


def _lock(slurm: SlurmCluster) -> set[str]:
    """The nodes of the controller's reservation, as `scontrol show reservation` has it."""
    lock = Scontrol().lock(LOCK)
    return set(lock.nodes) if lock else set()


def _queued(slurm: SlurmCluster, node: str) -> str:
    """A job pinned to `node` (no --reservation: a user's), queued now: its id."""
    partition = "cpu" if node == C else "dev"
    return slurm.run("sbatch", "--parsable", "-w", node, "-p", partition, "-o", "/dev/null", "--wrap", "sleep 300"
                     ).strip().split(";")[0]  # fmt: skip


def _lift(slurm: SlurmCluster, nodes: list[str], how: str) -> None:
    """What someone else does to lift our drain: an admin, HyperPod's health check sample, a reboot."""
    names = ",".join(nodes)
    if how == "admin RESUME":
        slurm.run("scontrol", "update", f"NodeName={names}", "State=RESUME")
    elif how == "FAIL Action:Reboot then RESUME":
        slurm.run("scontrol", "update", f"NodeName={names}", "State=FAIL", "Reason=Action:Reboot")
        slurm.run("scontrol", "update", f"NodeName={names}", "State=RESUME")
    else:  # scontrol reboot ASAP nextstate=RESUME; the node reboots (slurmd comes back saying so)
        slurm.run("scontrol", "reboot", "ASAP", "nextstate=RESUME", "reason=rebooted by an admin", names)
        for node in nodes:
            wait_for(lambda n=node: "REBOOT_ISSUED" in field(slurm.line(n), "State"), f"{node} reboot issued")
        # slurmctld takes a boot no later than the second it issued the reboot for none (boot_time < boot_req_time,
        # both whole seconds, the boot from slurmd's uptime clock) and waits out ResumeTimeout: boot a second later.
        time.sleep(1.1)
        for node in nodes:
            slurm.stop_slurmd(node)
            slurm.start_slurmd(node, rebooted=True)
        for node in nodes:
            wait_for(lambda n=node: "REBOOT" not in field(slurm.line(n), "State"), f"{node} rebooted", slurm.logs)
    for node in nodes:  # our label is gone: what a user's job would have waited for
        wait_for(lambda n=node: not field(slurm.line(n), "State").count("DRAIN"), f"{node} not drained", slurm.logs)


@pytest.mark.parametrize("how", ["admin RESUME", "FAIL Action:Reboot then RESUME", "scontrol reboot nextstate=RESUME"])
def test_a_node_not_passed_takes_no_job_whoever_resumes_it_until_the_controller_passes_it(slurm: SlurmCluster, how):
    """A waiting, an in-check and a failed node: locked in the controller's reservation and drained. Whoever lifts
    the drain, a job pinned to each stays PENDING; the controller's pass releases them and the jobs run."""
    controller = FakeController(entry(A, WAITING), entry(B, FAILED), entry(C, RUNNING))
    memory = Memory()
    sync_once(CLUSTER, controller, Scontrol(), PARTITIONS, memory)
    assert _lock(slurm) == {A, B, C}
    assert all("DRAIN" in field(slurm.line(n), "State") for n in (A, B, C)), "the label an admin sees"
    jobs = {node: _queued(slurm, node) for node in (A, B, C)}
    _lift(slurm, [A, B, C], how)
    time.sleep(SCHEDULER_S)
    assert {n: slurm.job_state(j) for n, j in jobs.items()} == dict.fromkeys(jobs, "PENDING")
    result = sync_once(CLUSTER, controller, Scontrol(), PARTITIONS, memory)  # the label back; the lock never left
    assert _lock(slurm) == {A, B, C} and all("DRAIN" in field(slurm.line(n), "State") for n in (A, B, C))
    assert result.held == {}
    controller.document = document(*(entry(n, None, PASSED) for n in (A, B, C)))
    sync_once(CLUSTER, controller, Scontrol(), PARTITIONS, memory)
    assert _lock(slurm) == set(), "the reservation is deleted with its last node"
    for node, job in jobs.items():
        slurm.wait_running(job, f"the job on {node} to run once passed")


def test_a_running_job_keeps_running_when_its_node_is_locked(slurm: SlurmCluster):
    job = slurm.sbatch(A)
    sync_once(CLUSTER, FakeController(entry(A, WAITING), entry(B, None, PASSED)), Scontrol(), PARTITIONS, Memory())
    assert _lock(slurm) == {A} and slurm.job_state(job) == "RUNNING"


def test_a_bridge_that_does_not_hold_the_fence_only_adds_to_the_lock(slurm: SlurmCluster):
    """Two bridges of one cluster (an HA pair, a re-install with its own state dir): the one the controller says
    does not hold the fence, or that is told an older fence than it saw, releases nothing, even on a document that
    says the node passed."""
    holder = FakeController(entry(A, FAILED))
    holder.document |= {"fence": 2, "holder": True}
    sync_once(CLUSTER, holder, Scontrol(), PARTITIONS, Memory())
    job = _queued(slurm, A)
    second = FakeController(entry(A, None, PASSED), entry(B, WAITING))
    second.document |= {"fence": 2, "holder": False}
    sync_once(CLUSTER, second, Scontrol(), PARTITIONS, Memory())
    assert _lock(slurm) == {A, B}, "it adds (B), it never releases (A)"
    assert "DRAIN" in field(slurm.line(A), "State")
    older = FakeController(entry(A, None, PASSED), entry(B, None, PASSED))
    older.document |= {"fence": 1, "holder": True}  # a fence below the one this bridge saw: not the holder's
    sync_once(CLUSTER, older, Scontrol(), PARTITIONS, Memory(fence=2))
    assert _lock(slurm) == {A, B} and "DRAIN" in field(slurm.line(A), "State")
    time.sleep(2)
    assert slurm.job_state(job) == "PENDING"


def test_a_future_nodes_gate_exits_0_and_the_node_registers_locked(slurm: SlurmCluster, tmp_path):
    """A node Slurm holds as FUTURE is hidden from `scontrol show node`; the gate reads it with --future, locks it
    before its slurmd starts, and a job queued for it waits for the controller's pass."""
    slurm.stop_slurmd(B)
    slurm.run("scontrol", "update", f"NodeName={B}", "State=FUTURE")
    argv = ["node-boot", "--cluster", CLUSTER, "--node", B, "--wait", "5", "--marker-dir", str(tmp_path)]
    assert gate.main(argv) == 0
    assert _lock(slurm) == {B} and not (tmp_path / B).exists()
    future = slurm.run("scontrol", "-o", "--future", "show", "node", B)
    assert "DRAIN" not in field(future, "State"), "a FUTURE node registers with no reason: not labelled"
    slurm.start_slurmd(B)
    wait_for(lambda: _registered(slurm, B), "the FUTURE node to register", slurm.logs)
    job = _queued(slurm, B)
    time.sleep(3)
    assert slurm.job_state(job) == "PENDING" and _lock(slurm) == {B}
    result = sync_once(CLUSTER, FakeController(entry(A, None, PASSED), entry(B, None, PASSED)), Scontrol(), PARTITIONS,
                       Memory())  # fmt: skip
    assert result.held == {} and result.lock is not None and result.lock.removed == {B}
    slurm.wait_running(job, "the job to run once the node passed")


def test_slurmctld_down_during_the_gate_the_launch_goes_on_and_the_node_takes_no_job_before_its_pass(
    slurm: SlurmCluster, tmp_path
):
    """The bridge locks a node Slurm knows but whose slurmd is not up yet (a new node of an isolating group, not
    recorded by the controller yet); the gate, with slurmctld unreachable, exits 0 and leaves a marker."""
    job = _new_node(slurm, A)
    memory = Memory()
    sync_once(CLUSTER, FakeController(entry(B, None, PASSED)), Scontrol(), PARTITIONS, memory)
    assert _lock(slurm) == {A}, "not up yet, in an isolating partition of a complete document: locked"
    unreachable = tmp_path / "scontrol"
    down_conf = tmp_path / "slurm.conf"
    down_conf.write_text(slurm.conf.read_text().replace(f"SlurmctldPort={_port(slurm)}", "SlurmctldPort=9"))
    unreachable.write_text(f'#!/bin/sh\nSLURM_CONF={down_conf} exec scontrol "$@"\n')
    unreachable.chmod(0o755)
    started = time.monotonic()
    argv = ["node-boot", "--cluster", CLUSTER, "--node", A, "--wait", "2", "--marker-dir", str(tmp_path / "marks"),
            "--scontrol", str(unreachable)]  # fmt: skip
    assert gate.main(argv) == 0
    assert time.monotonic() - started < 60 and "Unable to contact" in (tmp_path / "marks" / A).read_text()
    slurm.start_slurmd(A)
    wait_for(lambda: _registered(slurm, A), "the new node to register", slurm.logs)
    time.sleep(3)
    assert slurm.job_state(job) == "PENDING"
    sync_once(CLUSTER, FakeController(entry(A, None, PASSED), entry(B, None, PASSED)), Scontrol(), PARTITIONS, memory)
    slurm.wait_running(job, "the job to run once the node passed")


def _port(slurm: SlurmCluster) -> str:
    return next(line.split("=", 1)[1] for line in slurm.conf.read_text().splitlines()
                if line.startswith("SlurmctldPort="))  # fmt: skip


def test_a_node_released_from_the_lock_by_hand_is_left_alone_until_its_desired_state_changes(slurm: SlurmCluster):
    controller = FakeController(entry(A, WAITING), entry(B, WAITING))
    memory = Memory()
    sync_once(CLUSTER, controller, Scontrol(), PARTITIONS, memory)
    assert _lock(slurm) == {A, B}
    # An admin, on purpose: out of the reservation, then RESUME.
    slurm.run("scontrol", "update", f"ReservationName={LOCK}", f"Nodes={B}")
    slurm.run("scontrol", "update", f"NodeName={A}", "State=RESUME")
    job = _queued(slurm, A)
    slurm.wait_running(job, "the admin's job to run")
    result = sync_once(CLUSTER, controller, Scontrol(), PARTITIONS, memory)
    assert _lock(slurm) == {B} and "DRAIN" not in field(slurm.line(A), "State")
    assert result.held[A] == "released from the controller's lock by hand"
    controller.document = document(entry(A, RUNNING), entry(B, WAITING))  # a new check: the controller's again
    sync_once(CLUSTER, controller, Scontrol(), PARTITIONS, memory)
    assert _lock(slurm) == {A, B} and "DRAIN" in field(slurm.line(A), "State")
