"""The Slurm bridge's routes through the real Api handler, and what its occupancy reports do to the rounds.

`Bridge` plays the agent on the Slurm controller node as far as the controller can see it: every sync it pulls
the nodes' state (their Slurm names) and reports which of them run a job (the fake's `busy_until`), as the
cluster's instance role would (the API's resource policy lets that principal through).
"""

from __future__ import annotations

import pytest

from deephealth.domain.nodes import NodeRecord, NodeState, Outcome, Verdict
from deephealth.domain.slurm import AWAITING, BUSY_FRESH_S, JOB_WAIT_S, OWNED_PREFIX, RUNNING_CHECK, SYNC_INTERVAL_S
from tests.fakes.hyperpod import GroupSpec
from tests.harness.engine import TABLE_NAME

INSTANCE_ROLE = "arn:aws:sts::123456789012:assumed-role/SlurmControllerRole/i-0123456789abcdef0"
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
            {"node": n["node"], "busy": self.fake.node("demo", n["logical_id"]).busy_until > now}
            if self.busy is None
            else {"node": n["node"], "busy": n["logical_id"] in self.busy}
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
    from deephealth.adapters.node_table import NodeTable

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
    assert by_state[("gpu", "pending")] == (AWAITING, "HealthCheck:InProgress")
    assert by_state[("gpu", "checking")] == (RUNNING_CHECK, "HealthCheck:InProgress")
    assert by_state[("gpu", "passed")] == (None, "HealthCheck:Passed")
    assert by_state[("gpu", "quarantined")][1] == "HealthCheck:Failed"
    for group in ("opt", "dry"):  # pending, in a group that does not isolate: keeps taking jobs
        assert by_state[(group, "pending")] == (None, "HealthCheck:InProgress")
    assert by_state[("watch", "checking")] == (None, "HealthCheck:InProgress")
    assert all(reason is None or reason.startswith(OWNED_PREFIX) for reason, _ in by_state.values())
    for n in page["nodes"]:
        record = records[n["logical_id"]]
        assert n["node"] == record.hostname.split(".")[0] and n["instance_id"] == record.instance_id

    paged = pull(harness, limit=2)
    assert [n["logical_id"] for n in paged] == sorted(got) == [n["logical_id"] for n in page["nodes"]]


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
    # No round runs for a node that only waits for a job (safety.progress_possible): Reconcile's next pass after
    # the report went stale starts the one that claims it.
    assert last_report + BUSY_FRESH_S < claimed_at(record) <= last_report + BUSY_FRESH_S + RECONCILE_S + SYNC_INTERVAL_S


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_a_report_only_writes_waiting_nodes_and_names_the_unknown(harness, fake):
    records = seed(harness, fake)
    names = {r.key: r.hostname.split(".")[0] for r in records.values() if r.hostname}
    pending = [k for k, r in records.items() if r.state == NodeState.PENDING and r.hostname]
    report = [{"node": name, "busy": True} for name in names.values()] + [{"node": "ip-10-9-9-9", "busy": False}]
    status, body = harness.api("POST", OCCUPANCY, {"nodes": report}, principal=INSTANCE_ROLE)
    assert status == 200 and body == {"updated": len(pending), "unknown": ["ip-10-9-9-9"]}
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
        ("GET", STATE, None, {"limit": "1001"}, 422, "limit"),
        ("GET", STATE, None, {"next_token": "x;drop"}, 422, "next_token"),
        ("GET", "/clusters/other/slurm", None, None, 404, "other"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-10-1-2-3", "busy": True, "jobs": 2}]}, None, 422, "jobs"),
        ("POST", OCCUPANCY, {"nodes": [], "extra": 1}, None, 422, "extra"),
        ("POST", OCCUPANCY, {"nodes": MANY}, None, 422, "nodes"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-10-1-2-3 ; rm -rf /", "busy": True}]}, None, 422, "node"),
        ("POST", OCCUPANCY, {"nodes": [{"node": "ip-10-1-2-3", "busy": "true"}]}, None, 422, "busy"),
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
