"""The Slurm bridge's routes through the real Api handler, and what its occupancy reports do to the rounds.

`Bridge` plays the agent on the Slurm controller node as far as the controller can see it: every sync it pulls
the nodes' state (their Slurm names) and reports which of them run a job (the fake's `busy_until`), as the
cluster's instance role would (the API's resource policy lets that principal through).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState, Outcome, Verdict
from hyperpod_dhc.deephealth.domain.slurm import BUSY_FRESH_S, JOB_WAIT_S, OWNED_PREFIX, SYNC_INTERVAL_S, reason
from tests.fakes.hyperpod import GroupSpec
from tests.fakes.slurm_lock import FakeLock
from tests.harness.engine import TABLE_NAME

# A session of the twin's bridge role, every cluster's in its template (tests/harness/synth.py TWIN_SLURM_BRIDGES).
INSTANCE_ROLE = "arn:aws:sts::123456789012:assumed-role/hyperpod-cluster-execution-role/i-0123456789abcdef0"
STATE = "/clusters/demo/slurm"
OCCUPANCY = "/clusters/demo/slurm/occupancy"
RECONCILE_S = 300  # cdk.json reconcile_every_minutes
CONFIG = {
    "clusters": ["demo"],
    "defaults": {"gather_window_s": 300},
    "groups": {
        "opt": {"isolate_until_checked": False},
        "dry": {"dry_run": True},
        "watch": {"mode": "observe-on-start"},
    },
}


class Bridge:
    """Every sync: GET the state (all pages), POST each listed node's occupancy; `busy` overrides the fake's jobs
    (what a bridge that then died last said)."""

    def __init__(self, harness, fake, alive_until: float = float("inf"), busy: set[str] | None = None) -> None:
        self.harness, self.fake, self.alive_until, self.busy = harness, fake, alive_until, busy
        self.next_sync = 0.0
        self.reports: list[tuple[float, dict]] = []
        harness.on_step.append(self.step)

    def step(self, now: float) -> None:
        if now < self.next_sync or now >= self.alive_until:
            return
        self.next_sync = now + SYNC_INTERVAL_S
        nodes = pull(self.harness)
        if not nodes:
            return
        report = [
            {"node": n["node"], "key": n["key"], "busy": self.fake.node("demo", n["logical_id"]).busy_until > now}
            if self.busy is None
            else {"node": n["node"], "key": n["key"], "busy": n["logical_id"] in self.busy}
            for n in nodes
        ]
        status, body = self.harness.api("POST", OCCUPANCY, {"nodes": report}, principal=INSTANCE_ROLE)
        assert status == 200 and body["unknown"] == [], body
        self.reports.append((now, body))


def pull(harness, limit: int | None = None) -> list[dict]:
    nodes, token = [], None
    while True:
        query = {k: str(v) for k, v in (("limit", limit), ("next_token", token)) if v is not None}
        status, page = harness.api("GET", STATE, query=query, principal=INSTANCE_ROLE)
        assert status == 200, page
        nodes += page["nodes"]
        token = page["next_token"]
        if token is None:
            return nodes


def claimed_at(record: NodeRecord) -> float:
    return next(h.at for h in record.history if h.reason == "claimed for a check round")


# ---------------------------------------------------------------- the state


def seed(harness, fake) -> dict[str, NodeRecord]:
    """Records as rounds leave them, one per case, on the fake's nodes (no time passes: no round runs)."""
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    cluster = fake.create_cluster(
        "demo",
        [GroupSpec(g, count=n) for g, n in (("gpu", 6), ("opt", 1), ("dry", 2), ("watch", 1))]
        + [GroupSpec("ctl", "ml.m5.xlarge", count=1, node_type="Controller")],
    )
    members: dict[str, list] = {}
    for n in sorted(cluster.nodes.values(), key=lambda n: n.seq):
        members.setdefault(n.group, []).append(n)
    plan = {  # (state, seen with a hostname) per node of each group
        "gpu": [
            (NodeState.PENDING, True),
            (NodeState.CHECKING, True),
            (NodeState.PASSED, True),
            (NodeState.QUARANTINED, True),
            (NodeState.PENDING, False),  # not yet seen with a hostname: the bridge could not name it
            (NodeState.GONE, True),
        ],
        "opt": [(NodeState.PENDING, True)],
        "dry": [(NodeState.SHADOWED, True), (NodeState.PENDING, True)],
        "watch": [(NodeState.CHECKING, True)],  # HyperPod's on-start check, watched
    }
    table = NodeTable(TABLE_NAME)
    records = {}
    for group, cases in plan.items():
        for n, (state, named) in zip(members[group], cases, strict=True):
            passed = [Outcome(at=0.0, verdict=Verdict.PASSED, instance_id=n.instance_id)]
            record = NodeRecord(
                cluster="demo",
                cluster_id=cluster.cluster_id,
                key=n.logical_id,
                group=group,
                logical_id=n.logical_id,
                instance_id=n.instance_id,
                hostname=f"ip-{n.private_ip.replace('.', '-')}.ec2.internal" if named else None,
                state=state,
                outcomes=passed if state == NodeState.PASSED else [],
                observe_only=group == "watch",
            )
            records[n.logical_id] = table.save(record)
    table.register_cluster("demo")
    return records


@pytest.mark.controller_config(CONFIG)
def test_the_state_names_each_node_and_drains_only_with_reasons_we_own(harness, fake):
    records = seed(harness, fake)
    status, page = harness.api("GET", STATE, principal=INSTANCE_ROLE)
    assert status == 200 and page["next_token"] is None
    assert page["sync_interval_s"] == SYNC_INTERVAL_S
    # on-demand isolates by default; opted out, dry-run, observe-on-start and the controller group do not
    assert page["isolating_groups"] == ["gpu"]

    got = {n["logical_id"]: (n["group"], n["state"], n["reason"], n["feature"]) for n in page["nodes"]}
    want = {}
    for r in records.values():
        if r.hostname and r.state not in (NodeState.GONE, NodeState.SHADOWED):
            want[r.key] = (r.group, r.state.value)
    assert {k: v[:2] for k, v in got.items()} == want  # no unnamed, gone or dry-run-recorded node
    by_state = {(g, s): (reason, feature) for g, s, reason, feature in got.values()}
    by_key = {r.key: r for r in records.values()}
    wait, check = (
        next(reason(word, r, what) for r in by_key.values() if r.group == "gpu" and r.state == state and r.hostname)
        for word, what, state in (("wait", "deep health check not passed yet", NodeState.PENDING),
                                  ("check", "deep health check running", NodeState.CHECKING))
    )  # fmt: skip
    assert by_state[("gpu", "pending")] == (wait, "HealthCheck:InProgress")
    assert by_state[("gpu", "checking")] == (check, "HealthCheck:InProgress")
    assert by_state[("gpu", "passed")] == (None, "HealthCheck:Passed")
    assert by_state[("gpu", "quarantined")][1] == "HealthCheck:Failed"
    for group in ("opt", "dry"):  # pending, in a group that does not isolate: keeps taking jobs
        assert by_state[(group, "pending")] == (None, "HealthCheck:InProgress")
    assert by_state[("watch", "checking")] == (None, "HealthCheck:InProgress")
    assert all(reason is None or reason.startswith(OWNED_PREFIX) for reason, _ in by_state.values())
    for n in page["nodes"]:
        record = records[n["logical_id"]]
        assert n["node"] == record.hostname.split(".")[0] and n["instance_id"] == record.instance_id

    assert [n["node"] for n in page["nodes"]] == sorted(n["node"] for n in page["nodes"])  # by name
    assert all(n["key"] == n["logical_id"] for n in page["nodes"])  # what an occupancy report names
    assert page["complete"] is False, "no whole listing recorded yet: an unlisted Slurm node is not known new"
    assert page["generation"] == max(r.updated_at for r in records.values())
    paged = pull(harness, limit=2)
    assert [n["node"] for n in paged] == [n["node"] for n in page["nodes"]]


# ---------------------------------------------------------------- occupancy and the rounds


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 300}})
def test_a_busy_node_waits_for_its_job_and_is_checked_once_idle_instead_of_being_skipped(harness, fake):
    cluster = fake.create_cluster("demo", [GroupSpec("gpu", count=2)])
    idle, busy = sorted(cluster.nodes)
    job_end = fake.clock.now() + 2 * 3600  # longer than HyperPod waits for a job (10 min), and than a check
    fake.set_busy("demo", busy, job_end)
    bridge = Bridge(harness, fake)

    def final():
        records = harness.records("demo")
        return len(records) == 2 and all(r.state == NodeState.PASSED for r in records.values())

    harness.run_until(final, horizon_s=8 * 3600)
    records = harness.records("demo")
    assert final(), {k: r.state for k, r in records.items()}
    waited = records[busy]
    assert [o.verdict for o in waited.outcomes] == [Verdict.PASSED]  # checked once, never skipped behind its job
    assert claimed_at(records[idle]) < job_end
    # Claimed after its job, by the round the bridge's idle report started or one that waited for the job.
    assert job_end <= claimed_at(waited) <= job_end + JOB_WAIT_S + 2 * SYNC_INTERVAL_S
    assert waited.slurm_busy is False and waited.state == NodeState.PASSED
    # Writes only when a waiting node's occupancy changed or is due a refresh: far fewer than reports x nodes.
    assert sum(body["updated"] for _, body in bridge.reports) < len(bridge.reports)


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 300}})
def test_a_busy_report_the_bridge_stopped_refreshing_holds_a_node_back_no_longer_than_busy_fresh_s(harness, fake):
    cluster = fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    (held,) = cluster.nodes
    # The bridge says the node is busy, then dies: its last word is believed for BUSY_FRESH_S, no longer.
    bridge = Bridge(harness, fake, alive_until=fake.clock.now() + 240, busy={held})

    def claimed():
        record = harness.records("demo").get(held)
        return record is not None and record.state == NodeState.CHECKING

    harness.run_until(claimed, horizon_s=3 * 3600)
    record = harness.records("demo")[held]
    last_report = record.slurm_busy_at
    assert record.slurm_busy is True and last_report is not None and bridge.reports
    # No round runs for a node that only waits for a job (round_admission.progress_possible): Reconcile's next pass
    # after the report went stale starts the one that claims it.
    assert last_report + BUSY_FRESH_S < claimed_at(record) <= last_report + BUSY_FRESH_S + RECONCILE_S + SYNC_INTERVAL_S


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_a_report_only_writes_waiting_nodes_and_names_the_unknown(harness, fake):
    records = seed(harness, fake)
    names = {r.key: r.hostname.split(".")[0] for r in records.values() if r.hostname}
    pending = [k for k, r in records.items() if r.state == NodeState.PENDING and r.hostname]
    report = [{"node": name, "busy": True} for name in names.values()] + [{"node": "ip-10-9-9-9", "busy": False}]
    status, body = harness.api("POST", OCCUPANCY, {"nodes": report}, principal=INSTANCE_ROLE)
    # Gone and dry-run records never speak for a name: their names are as unknown as a stranger's.
    silent = sorted(
        names[k] for k, r in records.items() if r.hostname and r.state in (NodeState.GONE, NodeState.SHADOWED)
    )
    unknown = [n for n in [*names.values(), "ip-10-9-9-9"] if n in silent or n == "ip-10-9-9-9"]
    assert status == 200 and body == {"updated": len(pending), "unknown": unknown, "unknown_count": len(unknown)}
    after = harness.records("demo")
    assert {k for k, r in after.items() if r.slurm_busy} == set(pending)
    assert all(after[k].version == records[k].version for k in records if k not in pending)  # nothing else written
    again = harness.api("POST", OCCUPANCY, {"nodes": report}, principal=INSTANCE_ROLE)[1]
    assert again["updated"] == 0  # unchanged and fresh: no write
    assert not harness.running()  # busy everywhere: nothing to start a round for


# ---------------------------------------------------------------- bad input


MANY = [{"node": f"ip-10-0-{i // 250}-{i % 250}", "busy": True} for i in range(1001)]


@pytest.mark.controller_config({"clusters": ["demo"]})
@pytest.mark.parametrize(
    ("method", "path", "body", "query", "status", "named"),
    [
        ("GET", STATE, None, {"limit": "0"}, 422, "limit"),
        ("GET", STATE, None, {"limit": "10001"}, 422, "limit"),
        ("GET", STATE, None, {"next_token": "x;drop"}, 422, "next_token"),
        ("GET", "/clusters/other/slurm", None, None, 404, "other"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-10-1-2-3", "busy": True, "jobs": 2}]}, None, 422, "jobs"),
        ("POST", OCCUPANCY, {"nodes": [], "extra": 1}, None, 422, "extra"),
        ("POST", OCCUPANCY, {"nodes": MANY}, None, 422, "nodes"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-10-1-2-3 ; rm -rf /", "busy": True}]}, None, 422, "node"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-10-1-2-3", "busy": "true"}]}, None, 422, "busy"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-1", "busy": True, "held": "DOWN\u202e: x"}]}, None, 422, "held"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-1", "busy": True, "held": "x" * 201}]}, None, 422, "held"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-1", "busy": True}, {"node": "ip-1", "busy": True}]}, None, 422,
         "nodes"),
        ("POST", OCCUPANCY, "{not json", None, 422, "body"),
        ("POST", "/clusters/other/slurm/occupancy", {"nodes": [{"node": "ip-1", "busy": True}]}, None, 404, "other"),
        ("PUT", OCCUPANCY, {"nodes": []}, None, 403, "Missing Authentication Token"),
    ],
)  # fmt: skip
def test_bad_requests_get_a_clear_4xx(harness, fake, method, path, body, query, status, named):
    fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    got, payload = harness.api(method, path, body, query, principal=INSTANCE_ROLE)
    assert got == status, payload
    assert named in str(payload), payload
    assert not harness.records("demo")


# ---------------------------------------------------------------- one name, one record; what a report carries


def _twins(harness, fake) -> tuple[NodeRecord, NodeRecord]:
    """Two live records with one Slurm name: an old passed one, and a new instance that got its private IP."""
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    cluster = fake.create_cluster("demo", [GroupSpec("gpu", count=2)])
    old_node, new_node = sorted(cluster.nodes.values(), key=lambda n: n.seq)
    host = f"ip-{old_node.private_ip.replace('.', '-')}.ec2.internal"
    table = NodeTable(TABLE_NAME)
    old = table.save(
        NodeRecord(
            cluster="demo",
            cluster_id=cluster.cluster_id,
            key=old_node.logical_id,
            group="gpu",
            logical_id=old_node.logical_id,
            instance_id=old_node.instance_id,
            hostname=host,
            state=NodeState.PASSED,
            updated_at=1.0,
            outcomes=[Outcome(at=0.0, verdict=Verdict.PASSED, instance_id=old_node.instance_id)],
        )
    )
    new = table.save(NodeRecord(cluster="demo", cluster_id=cluster.cluster_id, key=new_node.logical_id, group="gpu",
                                logical_id=new_node.logical_id, instance_id=new_node.instance_id, hostname=host,
                                state=NodeState.PENDING, updated_at=2.0))  # fmt: skip
    return old, new


@pytest.mark.controller_config({"clusters": ["demo"]})
def test_a_name_two_live_records_claim_is_drained_as_ambiguous_and_a_gone_one_never_speaks(harness, fake):
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    old, new = _twins(harness, fake)
    (entry,) = pull(harness)
    name = old.hostname.split(".")[0]
    assert entry["node"] == name and entry["key"] is None and entry["state"] == "ambiguous"
    assert entry["reason"].startswith("hpdhc:ambig " + name) and entry["feature"] == "HealthCheck:InProgress"
    assert old.instance_id in entry["reason"] and new.instance_id in entry["reason"]
    # An occupancy report for the ambiguous name lands on neither record.
    status, body = harness.api("POST", OCCUPANCY, {"nodes": [{"node": name, "busy": True}]}, principal=INSTANCE_ROLE)
    assert status == 200 and body["unknown"] == [name]
    # The old record goes: the name is the new, unchecked node's, drained until it passes.
    NodeTable(TABLE_NAME).save(old.model_copy(update={"state": NodeState.GONE}))
    (entry,) = pull(harness)
    assert entry["key"] == new.key and entry["reason"].startswith("hpdhc:wait ") and new.instance_id in entry["reason"]


@pytest.mark.controller_config({"clusters": ["demo"]})
def test_a_report_by_key_reads_only_those_records_and_records_claims_held_by_others(harness, fake):
    old, new = _twins(harness, fake)
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    NodeTable(TABLE_NAME).save(harness.records("demo")[old.key].model_copy(update={"state": NodeState.GONE}))
    name = new.hostname.split(".")[0]
    report = [{"node": name, "key": new.key, "busy": False, "held": "DOWN: bad dimm, do not use"},
              {"node": name + "0", "key": new.key, "busy": True}]  # a key whose record has another name  # fmt: skip
    status, body = harness.api("POST", OCCUPANCY, {"nodes": report}, principal=INSTANCE_ROLE)
    assert status == 200 and body == {"updated": 1, "unknown": [name + "0"], "unknown_count": 1}
    record = harness.records("demo")[new.key]
    assert record.slurm_held == "DOWN: bad dimm, do not use"
    status, shown = harness.api("GET", f"/clusters/demo/nodes/{new.key}", principal=INSTANCE_ROLE)
    assert status == 200 and shown["slurm"] == "held by Slurm/admin: DOWN: bad dimm, do not use"


@pytest.mark.controller_config({"clusters": ["demo"]})
def test_an_answer_echoes_a_bounded_number_of_unknown_names(harness, fake):
    fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    report = [{"node": f"ip-10-9-{i // 250}-{i % 250}", "busy": False} for i in range(1000)]
    status, body = harness.api("POST", OCCUPANCY, {"nodes": report}, principal=INSTANCE_ROLE)
    assert status == 200 and len(body["unknown"]) == 20 and body["unknown_count"] == 1000


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 300}})
def test_once_a_whole_listing_is_recorded_the_document_says_it_covers_the_cluster(harness, fake):
    fake.create_cluster("demo", [GroupSpec("gpu", count=2)])
    harness.run_until(lambda: len(harness.records("demo")) == 2, horizon_s=900)
    status, page = harness.api("GET", STATE, principal=INSTANCE_ROLE)
    assert status == 200 and page["complete"] is True and len(page["nodes"]) == 2


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 300, "job_defer_max_s": 3600}})
def test_a_bridge_reporting_busy_for_ever_defers_a_check_no_longer_than_the_bound_and_it_is_said(harness, fake):
    cluster = fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    (held,) = cluster.nodes
    Bridge(harness, fake, busy={held})  # busy every sync, for ever (a job that never ends, or a lying reporter)
    started = fake.clock.now()

    def claimed():
        record = harness.records("demo").get(held)
        return record is not None and record.state != NodeState.PENDING

    harness.run_until(claimed, horizon_s=6 * 3600)
    record = harness.records("demo")[held]
    assert record.state != NodeState.PENDING
    assert started + 3600 < claimed_at(record) <= started + 3600 + RECONCILE_S + 2 * SYNC_INTERVAL_S + 300
    sent = [m for m in harness.notifications() if m["attributes"]["kind"] == "job-deferral"]
    assert len(sent) == 1 and held in str(sent[0]["message"])


@pytest.mark.parametrize(("adopt", "drained"), [("check-when-idle", False), ("isolate", True)])
def test_nodes_in_service_before_the_controller_watched_are_adopted_as_the_policy_says(adopt, drained, request):
    """A cluster whose nodes launched hours before the controller's first look: installing onto a running cluster
    does not take it out of service unless the group's policy says so."""
    config = {"clusters": ["demo"], "defaults": {"gather_window_s": 300, "adopt": adopt}}
    request.node.add_marker(pytest.mark.controller_config(config))
    fake, harness = request.getfixturevalue("fake"), None
    fake.create_cluster("demo", [GroupSpec("gpu", count=2)])
    fake.clock.advance(2 * 3600)  # running for two hours before the controller is deployed
    harness = request.getfixturevalue("harness")
    harness.run_until(lambda: len(harness.records("demo")) == 2, horizon_s=900)
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    records = harness.records("demo")
    assert all(r.adopted for r in records.values())
    for r in records.values():  # as they were before their check (the fake's checks are quick)
        NodeTable(TABLE_NAME).save(r.model_copy(update={"state": NodeState.PENDING, "outcomes": []}))
    nodes = pull(harness)
    assert len(nodes) == 2 and all((n["reason"] is not None) == drained for n in nodes), [
        (n["state"], n["reason"]) for n in nodes
    ]


@pytest.mark.controller_config({"clusters": ["demo"]})
def test_a_bridge_pass_reads_each_record_about_twice_whatever_the_cluster_size(harness, fake, monkeypatch):
    """DynamoDB reads per pass are O(nodes): one load of the cluster for the document (one page up to 10,000
    names) and one read by key per reported node, not a whole-cluster load per page or per occupancy chunk."""
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    cluster = fake.create_cluster("demo", [GroupSpec("gpu", count=1)])
    table = NodeTable(TABLE_NAME)
    size = 1500
    for i in range(size):
        table.save(NodeRecord(cluster="demo", cluster_id=cluster.cluster_id, key=f"n{i:05}", group="gpu",
                              logical_id=f"n{i:05}", instance_id=f"i-{i:017x}",
                              hostname=f"ip-10-3-{i // 250}-{i % 250}.ec2.internal"))  # fmt: skip
    read: list[int] = []
    load_cluster, load_nodes = NodeTable.load_cluster, NodeTable.load_nodes

    def counted_cluster(self, name):
        out = load_cluster(self, name)
        read.append(len(out))
        return out

    def counted_nodes(self, name, keys):
        out = load_nodes(self, name, keys)
        read.append(len(out))
        return out

    monkeypatch.setattr(NodeTable, "load_cluster", counted_cluster)
    monkeypatch.setattr(NodeTable, "load_nodes", counted_nodes)
    nodes = pull(harness)
    assert len(nodes) == size and sum(read) == size, read  # one load, one page
    for start in range(0, size, 1000):
        chunk = [{"node": n["node"], "key": n["key"], "busy": False} for n in nodes[start : start + 1000]]
        status, body = harness.api("POST", OCCUPANCY, {"nodes": chunk}, principal=INSTANCE_ROLE)
        assert status == 200 and body["unknown_count"] == 0
    assert sum(read) == 2 * size, read


class _ApiController:
    """The bridge's view of the controller (hyperpod_dhc.hpdhc.sync.Controller) through the real Api handler."""

    def __init__(self, harness) -> None:
        self.harness = harness

    def desired(self, cluster: str, since: tuple[float, str] | None = None, status=None) -> dict:
        query = {**(status or {}), **({} if since is None else {"since": repr(since[0]), "digest": since[1]})}
        status, body = self.harness.api("GET", STATE, query=query, principal=INSTANCE_ROLE)
        assert status == 200 and body["next_token"] is None, body
        return body

    def report(self, cluster: str, nodes: list[dict]) -> dict:
        body: dict = {}
        for start in range(0, len(nodes), 1000):  # the client's page (hyperpod_dhc.hpdhc.client SLURM_PAGE)
            page = {"nodes": nodes[start : start + 1000]}
            status, body = self.harness.api("POST", OCCUPANCY, page, principal=INSTANCE_ROLE)
            assert status == 200, body
        return body


class _IdleSlurm(FakeLock):
    def __init__(self, names: list[str]) -> None:
        from hyperpod_dhc.hpdhc.document import FEATURES
        from hyperpod_dhc.hpdhc.scontrol import SlurmNode

        passed = ("HealthCheck:Passed",)
        self._nodes = {n: SlurmNode(name=n, features=passed, available=FEATURES, partitions=("dev",)) for n in names}
        self.updates: list[tuple[list[str], list[str]]] = []

    def nodes(self, names=(), lock=None):
        return self.locked_view({k: v for k, v in self._nodes.items() if not names or k in names}, lock)

    def update(self, nodes, args) -> None:
        self.updates.append((list(nodes), list(args)))


@pytest.mark.parametrize(
    "watched",
    [
        pytest.param("named", marks=pytest.mark.controller_config({"clusters": ["demo"]})),
        pytest.param("all", marks=pytest.mark.controller_config({"clusters": "all"})),
    ],
)
def test_an_idle_bridge_pass_reads_no_node_record_however_large_the_cluster(harness, fake, watched):
    """With nothing changed since its last document, a bridge pass reads O(changed) = 0 node records, counted at
    DynamoDB's boundary: the state route answers `unchanged` from the table's index (one key at most) and the
    bridge reports no occupancy (no node waits for a check, no claim changed). Three requests in all, whether the
    controller watches named clusters or all of them: the registry item (is the cluster watched, who holds the
    fence), its `seen_at` refresh, the index; not the whole registry, not what the cluster was seen to do. A change
    is seen on the next pass, which reads that record (the API's warm Lambda holds the others), and then nothing
    again."""
    from hyperpod_dhc.deephealth.adapters.node_table import SAVE_MARGIN_S, NodeTable
    from hyperpod_dhc.hpdhc.document import Memory
    from hyperpod_dhc.hpdhc.sync import sync_once
    from tests.bench.idle import count_dynamodb_units

    cluster = fake.create_cluster("demo", [GroupSpec("gpu", count=0)])
    # The records below stand for a cluster where nothing happens: Reconcile, which would find the fake listing
    # none of them, does not run (this test is about the bridge's reads).
    harness._next_reconcile = float("inf")
    table = NodeTable(TABLE_NAME)
    size = 1500
    for i in range(size):
        table.save(NodeRecord(cluster="demo", cluster_id=cluster.cluster_id, key=f"n{i:05}", group="gpu",
                              logical_id=f"n{i:05}", instance_id=f"i-{i:017x}", state=NodeState.PASSED,
                              hostname=f"ip-10-3-{i // 250}-{i % 250}.ec2.internal"))  # fmt: skip
    table.register_cluster("demo", recorded_at=fake.clock.now())
    names = [f"ip-10-3-{i // 250}-{i % 250}" for i in range(size)]
    controller, slurm, memory = _ApiController(harness), _IdleSlurm(names), Memory()
    harness.advance(3 * SAVE_MARGIN_S)  # the records were saved a while ago
    units = count_dynamodb_units()

    def records_read_by(pass_) -> int:
        before = units.node_records_read
        pass_()
        return units.node_records_read - before

    def sync():
        return sync_once("demo", controller, slurm, {"dev": "gpu"}, memory)

    results = []
    assert records_read_by(lambda: results.append(sync())) == 2 * size  # the document; each node reported by key
    assert results[-1].failure == 0 and len(results[-1].reported) == size  # a run's first pass: every node, once
    for _ in range(10):  # ten idle passes, a sync interval apart
        harness.advance(SYNC_INTERVAL_S)
        before = units.requests.copy()
        assert records_read_by(lambda: results.append(sync())) == 0  # the index said nothing changed
        assert units.requests - before == Counter(GetItem=1, UpdateItem=1, Query=1), units.requests - before
        idle = results[-1]
        assert idle.failure == 0 and idle.reported == [] and not idle.errors and not slurm.updates, idle
    # One node changes (a re-check queued): the next pass gets the whole document and reports that node only.
    changed = table.get("demo", "n00007")
    table.save(changed.model_copy(update={"state": NodeState.PENDING, "ready_at": fake.clock.now()}))
    harness.advance(SYNC_INTERVAL_S)
    assert records_read_by(lambda: results.append(sync())) == 2  # that record, for the document and the report
    assert [n["key"] for n in results[-1].reported] == ["n00007"]
    assert [nodes for nodes, _ in slurm.updates] == [["ip-10-3-0-7"]]  # drained until its check passes
    # Passes within SAVE_MARGIN_S of the save read it again (a save may land late); then only the report's.
    for _ in range(math.ceil(SAVE_MARGIN_S / SYNC_INTERVAL_S) + 2):
        harness.advance(SYNC_INTERVAL_S)
        read = records_read_by(lambda: results.append(sync()))
    assert [n["key"] for n in results[-1].reported] == ["n00007"]  # still waiting: its occupancy matters
    assert read == 1  # that record only
