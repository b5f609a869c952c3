"""The Slurm bridge agent without a Slurm: reading `scontrol -o show node` (lines captured from a running 22.05),
the scontrol changes, the unknown-node rule, what a failing controller or Slurm leaves alone, the API client's
pages and chunks, the lifecycle snippet. Against a real Slurm: tests/integration/test_slurm_bridge.py."""

import json
import os
import socket
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deephealth.domain import slurm as domain
from deephealth.domain.nodes import NodeRecord, NodeState, Outcome, Verdict
from deephealth.domain.slurm import AWAITING, OWNED_PREFIX, RUNNING_CHECK, Feature, desired_state
from hpdhc import bridge, cli
from hpdhc.bridge import Desired, SyncResult, changes, load_partitions, sync_once, unknown_node_drain
from hpdhc.client import ApiError, OperatorClient
from hpdhc.scontrol import Actual, Scontrol, SlurmError, SlurmNode, parse_node, parse_nodes

SNIPPET = Path(bridge.__file__).parent / "lifecycle" / "install_slurm_bridge.sh"

# `scontrol -o show node` lines as Slurm 22.05.8 printed them (tests/integration/slurm_cluster.py's cluster).
IDLE = (
    "NodeName=ip-10-0-0-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.09 "
    "AvailableFeatures=gpu,efa ActiveFeatures=gpu,efa Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost "
    "Port=33055 Version=22.05.8 OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 "
    "FreeMem=23348 Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=dev  BootTime=2026-12-03T09:37:53 SlurmdStartTime=2026-12-03T18:07:25 "
    "LastBusyTime=2026-12-03T18:07:25 CfgTRES=cpu=1,mem=100M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 "
    "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
)
OURS_DRAINED = (
    "NodeName=ip-10-0-0-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.36 "
    "AvailableFeatures=gpu,efa,HealthCheck:InProgress ActiveFeatures=gpu,efa,HealthCheck:InProgress Gres=(null) "
    "NodeAddr=127.0.0.1 NodeHostName=localhost Port=16821 Version=22.05.8 OS=Linux 6.18.44-fc-v1147 #1 SMP "
    "PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 FreeMem=23079 Sockets=1 Boards=1 State=IDLE+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=dev  BootTime=2026-12-03T09:37:53 "
    "SlurmdStartTime=2026-12-03T18:03:19 LastBusyTime=2026-12-03T18:03:19 CfgTRES=cpu=1,mem=100M,billing=1 "
    "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "Reason=hpdhc: awaiting deep health check [root@2026-12-03T18:03:26]"
)
DRAINING_WITH_JOB = (
    "NodeName=ip-10-0-0-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=1 CPUTot=1 CPULoad=1.09 "
    "AvailableFeatures=gpu,efa ActiveFeatures=gpu,efa Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost "
    "Port=33055 Version=22.05.8 OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 "
    "FreeMem=23348 Sockets=1 Boards=1 State=ALLOCATED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=dev  BootTime=2026-12-03T09:37:53 SlurmdStartTime=2026-12-03T18:07:25 "
    "LastBusyTime=2026-12-03T18:07:25 CfgTRES=cpu=1,mem=100M,billing=1 AllocTRES=cpu=1 CapWatts=n/a CurrentWatts=0 "
    "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=hpdhc: x [root@2026-12-03T18:07:28]"
)
HYPERPOD_REBOOT = (
    "NodeName=ip-10-0-0-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=1.08 "
    "AvailableFeatures=gpu,efa ActiveFeatures=gpu,efa Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost "
    "Port=16821 Version=22.05.8 OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 "
    "FreeMem=23485 Sockets=1 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=dev  BootTime=2026-12-03T09:37:53 SlurmdStartTime=2026-12-03T18:07:38 "
    "LastBusyTime=2026-12-03T18:07:38 CfgTRES=cpu=1,mem=100M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 "
    "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s "
    "Reason=Action:Reboot [root@2026-12-03T18:07:42]"
)
# A reason with `=`, brackets and `@` of its own, on a node just resumed and drained again before slurmctld's ping.
ODD_REASON = (
    "NodeName=ip-10-0-0-3 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.08 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost Port=16823 "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 FreeMem=23485 "
    "Sockets=2 Boards=1 State=IDLE+DRAIN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
    "Partitions=cpu  BootTime=None SlurmdStartTime=2026-12-03T18:07:38 LastBusyTime=2026-12-03T18:07:46 "
    "CfgTRES=cpu=2,mem=100M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=ticket=4711 [disk] see foo@bar [root@2026-12-03T18:07:49]"
)
NEVER_REGISTERED = (  # no slurmd yet: no Arch, Version or OS
    "NodeName=ip-10-0-0-2 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=N/A AvailableFeatures=gpu,efa "
    "ActiveFeatures=gpu,efa Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost Port=16822  RealMemory=100 "
    "AllocMem=0 FreeMem=N/A Sockets=1 Boards=1 State=UNKNOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 "
    "Owner=N/A MCS_label=N/A Partitions=dev  BootTime=None SlurmdStartTime=None LastBusyTime=Unknown "
    "CfgTRES=cpu=1,mem=100M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s"
)


def with_state(line: str, state: str) -> str:
    return line.replace(" State=IDLE ", f" State={state} ")


@pytest.mark.parametrize(
    ("line", "drained", "reason", "features", "partitions", "busy"),
    [
        (IDLE, False, None, ("gpu", "efa"), ("dev",), False),
        (OURS_DRAINED, True, AWAITING, ("gpu", "efa", "HealthCheck:InProgress"), ("dev",), False),
        (DRAINING_WITH_JOB, True, "hpdhc: x", ("gpu", "efa"), ("dev",), True),  # sinfo: drng
        (HYPERPOD_REBOOT, True, "Action:Reboot", ("gpu", "efa"), ("dev",), False),
        (ODD_REASON, True, "ticket=4711 [disk] see foo@bar", (), ("cpu",), False),
        (NEVER_REGISTERED, False, None, ("gpu", "efa"), ("dev",), False),
        (with_state(IDLE, "IDLE+COMPLETING+DRAIN"), True, None, ("gpu", "efa"), ("dev",), True),  # epilog running
        (with_state(IDLE, "MIXED"), False, None, ("gpu", "efa"), ("dev",), True),  # some CPUs allocated
        (with_state(IDLE, "DRAINED"), True, None, ("gpu", "efa"), ("dev",), False),  # sinfo's words, older scontrol
        (with_state(IDLE, "DRAINING"), True, None, ("gpu", "efa"), ("dev",), True),
        (with_state(IDLE, "DOWN+NOT_RESPONDING"), False, None, ("gpu", "efa"), ("dev",), False),
    ],
)  # fmt: skip
def test_scontrol_lines_are_read_field_by_field(line, drained, reason, features, partitions, busy):
    node = parse_node(line)
    assert node == SlurmNode(
        name=node.name,
        drained=drained,
        reason=reason,
        features=features,
        available=features,
        partitions=partitions,
        busy=busy,
    )


def test_a_listing_is_every_node_by_name_and_nothing_else():
    assert list(parse_nodes("\n".join([IDLE.replace("ip-10-0-0-1", "a"), "", NEVER_REGISTERED, ""]))) == [
        "a",
        "ip-10-0-0-2",
    ]
    assert parse_nodes("No nodes in the system\n") == {}


def test_the_agent_speaks_the_controllers_vocabulary():
    assert (bridge.OWNED_PREFIX, bridge.AWAITING, bridge.FEATURE_KEY) == (
        domain.OWNED_PREFIX,
        domain.AWAITING,
        domain.FEATURE_KEY,
    )
    assert all(f.value.startswith(bridge.FEATURE_KEY + ":") for f in Feature)


# ---------------------------------------------------------------------- changes (from deephealth.domain.slurm)


def test_a_new_node_is_drained_and_labelled():
    assert changes(Desired(AWAITING, Feature.IN_PROGRESS), Actual(False, None, ("gpu",))) == [
        "State=DRAIN",
        f"Reason={AWAITING}",
        "AvailableFeatures=gpu,HealthCheck:InProgress",
        "ActiveFeatures=gpu,HealthCheck:InProgress",
    ]


def test_a_passed_node_is_resumed_only_from_our_own_drain():
    passed = Desired(None, Feature.PASSED)
    ours = Actual(True, RUNNING_CHECK, ("HealthCheck:InProgress",))
    assert changes(passed, ours)[0] == "State=RESUME"
    admins = Actual(True, "bad DIMM, ticket 4711", ("HealthCheck:InProgress",))
    assert "State=RESUME" not in changes(passed, admins)  # someone else's drain stays
    assert changes(Desired(AWAITING, Feature.IN_PROGRESS), Actual(True, "Action:Replace", ())) == [
        "AvailableFeatures=HealthCheck:InProgress",
        "ActiveFeatures=HealthCheck:InProgress",
    ]  # HyperPod's drain keeps its reason


def test_our_drain_is_reworded_as_the_check_moves_on():
    assert changes(
        Desired(RUNNING_CHECK, Feature.IN_PROGRESS), Actual(True, AWAITING, ("HealthCheck:InProgress",))
    ) == [
        "State=DRAIN",
        f"Reason={RUNNING_CHECK}",
    ]


def test_features_available_but_not_active_stay_available():
    actual = Actual(False, None, ("gpu",), available=("gpu", "a100-mig"))
    assert changes(Desired(None, Feature.PASSED), actual) == [
        "AvailableFeatures=gpu,a100-mig,HealthCheck:Passed",
        "ActiveFeatures=gpu,HealthCheck:Passed",
    ]


REASONS = st.none() | st.sampled_from([AWAITING, RUNNING_CHECK, "admin: maintenance", "Action:Reboot"])
FEATURES = st.lists(st.sampled_from(["gpu", "efa", *(f.value for f in Feature)]), unique=True, max_size=4)


@given(
    reason=st.none() | st.sampled_from([AWAITING, RUNNING_CHECK, OWNED_PREFIX + "failed"]),
    feature=st.sampled_from(list(Feature)),
    drained=st.booleans(),
    actual_reason=REASONS,
    features=FEATURES,
)
def test_changes_never_touch_a_foreign_drain_and_are_idempotent(reason, feature, drained, actual_reason, features):
    desired, actual = Desired(reason, feature), Actual(drained, actual_reason if drained else None, tuple(features))
    out = changes(desired, actual)
    if drained and not actual.owned:
        assert not any(a.startswith(("State=", "Reason=")) for a in out), "someone else's drain is left alone"
    # Applying the changes reaches a fixed point: a second pass changes nothing.
    state = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in out}
    after = Actual(
        drained=(drained and state.get("State") != "RESUME") or state.get("State") == "DRAIN",
        reason=state.get("Reason", actual.reason) if state.get("State") != "RESUME" else None,
        features=tuple(state["AvailableFeatures"].split(",")) if "AvailableFeatures" in state else actual.features,
    )
    assert changes(desired, after) == []
    assert [f for f in after.features if f.startswith("HealthCheck:")] == [feature.value]
    assert [f for f in after.features if not f.startswith("HealthCheck:")] == [
        f for f in features if not f.startswith("HealthCheck:")
    ], "features other than HealthCheck:* are kept"


# ---------------------------------------------------------------------- one pass against fakes


class FakeSlurm:
    """Slurm's update semantics as 22.05 shows them: a drain sets the reason, a resume clears it and is refused for
    a node not drained, features are replaced as given."""

    def __init__(self, *nodes: SlurmNode, refuse: tuple[str, ...] = ()) -> None:
        self.state = {n.name: n for n in nodes}
        self.refuse = refuse
        self.updates: list[tuple[str, list[str]]] = []
        self.unreadable = False

    def nodes(self) -> dict[str, SlurmNode]:
        if self.unreadable:
            raise SlurmError("scontrol -o show node: slurm_load_node error: Unable to contact slurm controller")
        return dict(self.state)

    def update(self, node: str, args: list[str]) -> None:
        self.updates.append((node, args))
        if node in self.refuse:
            raise SlurmError(f"scontrol update NodeName={node}: slurm_update error: Invalid node name specified")
        given = dict(a.split("=", 1) for a in args)
        current = self.state[node]
        if given.get("State") == "RESUME":
            if not current.drained:
                raise SlurmError("slurm_update error: Invalid node state specified")
            current = replace(current, drained=False, reason=None)
        elif given.get("State") == "DRAIN":
            current = replace(current, drained=True, reason=given["Reason"])
        if "ActiveFeatures" in given:
            active, available = (
                tuple(filter(None, given[k].split(","))) for k in ("ActiveFeatures", "AvailableFeatures")
            )
            current = replace(current, features=active, available=available)
        self.state[node] = current


class FakeController:
    def __init__(self, document: dict | None = None, failure: Exception | None = None) -> None:
        self.document, self.failure = document, failure
        self.reports: list[list[dict]] = []
        self.report_failure: Exception | None = None

    def desired(self, cluster: str) -> dict:
        if self.failure:
            raise self.failure
        return self.document

    def report(self, cluster: str, nodes: list[dict]) -> dict:
        if self.report_failure:
            raise self.report_failure
        self.reports.append(nodes)
        return {"updated": len(nodes), "unknown": []}


PARTITIONS = {"dev": "p5-workers", "cpu": "cpu-workers"}


def node(name: str, drained=False, reason=None, features=("gpu",), partition="dev", busy=False) -> SlurmNode:
    return SlurmNode(
        name=name, drained=drained, reason=reason, features=tuple(features), partitions=(partition,), busy=busy
    )


def entry(name: str, reason: str | None, feature: str = Feature.IN_PROGRESS) -> dict:
    return {"node": name, "logical_id": f"lid-{name}", "instance_id": "i-0", "group": "p5-workers", "state": "x",
            "reason": reason, "feature": str(feature)}  # fmt: skip


def document(*entries: dict, isolating=("p5-workers",), cluster="c") -> dict:
    return {"cluster": cluster, "sync_interval_s": 60, "isolating_groups": list(isolating), "nodes": list(entries),
            "next_token": None}  # fmt: skip


def test_what_the_controller_decides_is_applied_once_and_then_left_alone():
    iid = "i-0000000000000000a"
    records = {
        "a": NodeRecord(cluster="c", key="a", group="g", instance_id=iid, state=NodeState.PENDING),
        "b": NodeRecord(cluster="c", key="b", group="g", instance_id=iid, state=NodeState.CHECKING),
        "c": NodeRecord(cluster="c", key="c", group="g", instance_id=iid, state=NodeState.PASSED,
                        outcomes=[Outcome(at=1.0, verdict=Verdict.PASSED, instance_id=iid)]),
        "d": NodeRecord(cluster="c", key="d", group="g", instance_id=iid, state=NodeState.FAILED),
    }  # fmt: skip
    wanted = {name: desired_state(r, isolate_until_checked=True) for name, r in records.items()}
    controller = FakeController(document(*(entry(n, d.reason, d.feature.value) for n, d in wanted.items())))
    slurm = FakeSlurm(node("a"), node("b", busy=True), node("c", drained=True, reason=AWAITING), node("d"))

    first = sync_once("c", controller, slurm, PARTITIONS)
    assert first.errors == []
    for name, desired in wanted.items():
        state = slurm.state[name]
        assert (state.drained, state.reason) == (desired.reason is not None, desired.reason)
        assert state.features == ("gpu", desired.feature.value)
    assert first.reported == [{"node": n, "busy": n == "b"} for n in "abcd"] == controller.reports[0]

    slurm.updates.clear()
    assert sync_once("c", controller, slurm, PARTITIONS).applied == {} and slurm.updates == []


@pytest.mark.parametrize(
    ("unknown", "drained"),
    [
        (node("new"), True),  # slurmd registered, not recorded yet: no job before its check
        (node("new", partition="cpu"), False),  # its group does not isolate
        (node("new", partition="login"), False),  # a partition of no worker group
        (node("new", drained=True, reason="admin maintenance"), False),  # drained by someone: stays theirs
        (node("new", busy=True), True),  # a drain lets the job finish
        (replace(node("new", partition="cpu"), partitions=("cpu", "dev")), True),  # any isolating partition
    ],
)
def test_a_node_the_controller_does_not_list_is_drained_when_its_partition_isolates(unknown, drained):
    slurm = FakeSlurm(unknown, node("known"))
    result = sync_once("c", FakeController(document(entry("known", None, Feature.PASSED))), slurm, PARTITIONS)
    assert ("new" in result.applied) == drained
    if drained:
        assert result.applied["new"] == ["State=DRAIN", f"Reason={AWAITING}"]
    assert [r["node"] for r in result.reported] == ["known"], "only listed nodes are reported"
    assert unknown_node_drain(slurm.state["new"], {"dev"}) == [], "drained once, then left alone"


def test_no_unknown_node_is_drained_without_the_partition_map():
    slurm = FakeSlurm(node("new"))
    assert sync_once("c", FakeController(document()), slurm, {}).applied == {}


@pytest.mark.parametrize(
    "controller",
    [
        FakeController(failure=ApiError(500, "Internal server error")),
        FakeController(failure=ApiError(0, "cannot reach https://api: [Errno 111] Connection refused")),
        FakeController(failure=ApiError(403, "User is not authorized to access this resource")),
        FakeController(failure=ValueError("Expecting value: line 1 column 1 (char 0)")),  # not JSON
        FakeController(document(entry("a", None), cluster="another")),
        FakeController({"cluster": "c", "nodes": None}),
        FakeController(None),
    ],
)
def test_a_controller_that_fails_changes_nothing(controller):
    slurm = FakeSlurm(node("a", drained=True, reason=AWAITING), node("new"))
    result = sync_once("c", controller, slurm, PARTITIONS)
    assert slurm.updates == [] and controller.reports == [] and result.reported == []
    assert len(result.errors) == 1 and result.errors[0].startswith("controller: ")


def test_a_node_entry_off_the_contract_is_skipped_and_the_rest_applied():
    entries = [
        entry("a", "admin: not ours"),  # a drain we could never recognise as ours again
        entry("b", None, "Rack:7"),  # not a HealthCheck:* feature
        {"reason": None, "feature": "HealthCheck:Passed"},
        entry("c", AWAITING),
    ]
    slurm = FakeSlurm(node("a"), node("b"), node("c"))
    result = sync_once("c", FakeController(document(*entries)), slurm, PARTITIONS)
    assert list(result.applied) == ["c"] and len(result.errors) == 3
    assert [r["node"] for r in result.reported] == ["a", "b", "c"], "listed, so not drained as unknown either"


def test_slurm_unreadable_changes_nothing_and_reports_nothing():
    slurm, controller = FakeSlurm(node("a")), FakeController(document(entry("a", AWAITING)))
    slurm.unreadable = True
    result = sync_once("c", controller, slurm, PARTITIONS)
    assert slurm.updates == [] and controller.reports == [] and "Unable to contact" in result.errors[0]


def test_one_refused_update_does_not_hold_back_the_others():
    slurm = FakeSlurm(node("a"), node("b"), node("c"), refuse=("b",))
    controller = FakeController(document(*(entry(n, AWAITING) for n in "abc")))
    result = sync_once("c", controller, slurm, PARTITIONS)
    assert [n for n, _ in slurm.updates] == ["a", "b", "c"] and list(result.applied) == ["a", "c"]
    assert result.errors == ["scontrol update NodeName=b: slurm_update error: Invalid node name specified"]
    assert [r["node"] for r in result.reported] == ["a", "b", "c"]


def test_a_failed_report_is_an_error_once_slurm_is_right():
    controller = FakeController(document(entry("a", AWAITING)))
    controller.report_failure = ApiError(502, "Bad Gateway")
    result = sync_once("c", controller, FakeSlurm(node("a")), PARTITIONS)
    assert list(result.applied) == ["a"] and result.reported == []
    assert result.errors == ["occupancy report: HTTP 502: Bad Gateway"]


def test_nodes_the_controller_lists_but_slurm_does_not_know_are_neither_updated_nor_reported():
    result = sync_once("c", FakeController(document(entry("ghost", AWAITING))), FakeSlurm(), PARTITIONS)
    assert result == SyncResult(interval_s=60.0)


# ---------------------------------------------------------------------- the real scontrol binary, faked


@pytest.fixture
def fake_scontrol(tmp_path):
    """An `scontrol` that logs its arguments and prints a canned listing; FAIL_UPDATE makes updates fail."""
    calls = tmp_path / "calls"
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        'case "$1" in\n'
        f'  -o) printf "%s\\n%s\\n" "{IDLE}" "{NEVER_REGISTERED}" ;;\n'
        '  update) [ -z "$FAIL_UPDATE" ] || { echo "slurm_update error: Invalid node name specified" >&2; exit 1; };;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, calls


def test_scontrol_is_run_with_exactly_the_changes(fake_scontrol, monkeypatch):
    script, calls = fake_scontrol
    scontrol = Scontrol(str(script))
    assert list(scontrol.nodes()) == ["ip-10-0-0-1", "ip-10-0-0-2"]
    scontrol.update("ip-10-0-0-1", ["State=DRAIN", f"Reason={AWAITING}", "AvailableFeatures=a,b", "ActiveFeatures=a"])
    assert calls.read_text().splitlines() == [
        "-o show node",
        f"update NodeName=ip-10-0-0-1 State=DRAIN Reason={AWAITING} AvailableFeatures=a,b ActiveFeatures=a",
    ]
    monkeypatch.setenv("FAIL_UPDATE", "1")
    with pytest.raises(SlurmError, match="Invalid node name specified"):
        scontrol.update("ip-10-0-0-1", ["State=RESUME"])


@pytest.mark.parametrize("args", [["State=DOWN", "Reason=x"], ["State=FAIL"], ["State=POWER_DOWN"], ["Weight=1"], []])
def test_scontrol_refuses_anything_that_could_stop_a_job(fake_scontrol, args):
    script, calls = fake_scontrol
    with pytest.raises(SlurmError, match="refused"):
        Scontrol(str(script)).update("ip-10-0-0-1", args)
    assert not calls.exists()


def test_a_missing_scontrol_is_a_slurm_error(tmp_path):
    with pytest.raises(SlurmError, match="No such file"):
        Scontrol(str(tmp_path / "nowhere")).nodes()


# ---------------------------------------------------------------------- the API client's pages and chunks


def test_the_desired_state_is_every_page_merged(monkeypatch):
    pages = {None: document(entry("a", None), entry("b", None)) | {"next_token": "t1"},
             "t1": document(entry("c", None)) | {"next_token": "t2"}, "t2": document(entry("d", None))}  # fmt: skip
    calls = []

    def call(self, method, path, body=None, query=None):
        calls.append((method, path, dict(query)))
        return pages[query.get("next_token")]

    monkeypatch.setattr(OperatorClient, "_call", call)
    merged = OperatorClient("http://127.0.0.1:1").slurm_state("c")
    assert [n["node"] for n in merged["nodes"]] == ["a", "b", "c", "d"] and merged["next_token"] is None
    assert merged["isolating_groups"] == ["p5-workers"]
    assert calls == [
        ("GET", "/clusters/c/slurm", {"limit": "1000"}),
        ("GET", "/clusters/c/slurm", {"limit": "1000", "next_token": "t1"}),
        ("GET", "/clusters/c/slurm", {"limit": "1000", "next_token": "t2"}),
    ]


def test_occupancy_is_posted_a_thousand_nodes_at_a_time(monkeypatch):
    posted = []

    def call(self, method, path, body=None, query=None):
        posted.append((method, path, len(body["nodes"])))
        return {"updated": len(body["nodes"]) - 1, "unknown": [body["nodes"][0]["node"]]}

    monkeypatch.setattr(OperatorClient, "_call", call)
    client = OperatorClient("http://127.0.0.1:1")
    nodes = [{"node": f"n{i}", "busy": False} for i in range(2500)]
    assert client.report_occupancy("c", nodes) == {"updated": 2497, "unknown": ["n0", "n1000", "n2000"]}
    assert posted == [("POST", "/clusters/c/slurm/occupancy", n) for n in (1000, 1000, 500)]
    posted.clear()
    assert client.report_occupancy("c", []) == {"updated": 0, "unknown": []} and posted == []


# ---------------------------------------------------------------------- the agent around sync_once


def test_partitions_come_from_the_provisioning_parameters(tmp_path, caplog):
    path = tmp_path / "provisioning_parameters.json"
    path.write_text(json.dumps({"controller_group": "controller-machine", "worker_groups": [
        {"instance_group_name": "p5-workers", "partition_name": "dev"},
        {"instance_group_name": "cpu-workers", "partition_name": "cpu"}]}))  # fmt: skip
    assert load_partitions(path) == PARTITIONS
    assert load_partitions(tmp_path / "missing.json") == {}
    assert "not found: nodes the controller does not list yet are not drained" in caplog.text
    path.write_text("{not json")
    assert load_partitions(path) == {}


def test_once_exits_1_on_any_error_and_the_loop_keeps_the_controllers_pace():
    slurm = FakeSlurm(node("a"))
    assert bridge.run("c", FakeController(document(entry("a", AWAITING))), slurm, PARTITIONS, once=True) == 0
    assert bridge.run("c", FakeController(failure=ApiError(500, "x")), slurm, PARTITIONS, once=True) == 1

    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            raise KeyboardInterrupt

    controller = FakeController(document(entry("a", AWAITING)) | {"sync_interval_s": 1})
    with pytest.raises(KeyboardInterrupt):
        bridge.run("c", controller, slurm, PARTITIONS, sleep=sleep)
    assert 9 < slept[0] <= 10, "a suggested interval is kept within bounds"
    controller.failure = ApiError(0, "down")
    slept.clear()
    with pytest.raises(KeyboardInterrupt):
        bridge.run("c", controller, slurm, PARTITIONS, interval_s=30, sleep=sleep)
    assert all(29 < s <= 30 for s in slept), "--interval wins, and an unreachable controller is retried"


def test_hpdhc_bridge_against_an_unreachable_controller_runs_no_update(fake_scontrol, tmp_path):
    script, calls = fake_scontrol
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    argv = ["bridge", "--cluster", "c", "--endpoint", endpoint, "--once", "--scontrol", str(script),
            "--provisioning-parameters", str(tmp_path / "none.json")]  # fmt: skip
    assert cli.main(argv) == 1
    assert not calls.exists(), "not even read: the controller answers first"


# ---------------------------------------------------------------------- the lifecycle snippet


def snippet(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SNIPPET), *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False
    )


def test_the_snippet_is_valid_bash():
    subprocess.run(["bash", "-n", str(SNIPPET)], check=True)


def test_the_snippet_installs_the_wheel_and_a_restarting_unit_on_the_controller(tmp_path):
    args = ["--node-type", "controller", "--cluster", "ml-cluster-1", "--wheel", "s3://bucket/hyperpod_dhc-0.1.0-py3-none-any.whl",
            "--endpoint", "https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod/", "--scontrol",
            "/opt/slurm/bin/scontrol", "--destdir", str(tmp_path), "--dry-run"]  # fmt: skip
    done = snippet(*args)
    assert done.returncode == 0, done.stderr
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert commands[0].startswith("aws s3 cp --region eu-west-1 s3://bucket/hyperpod_dhc-0.1.0-py3-none-any.whl ")
    assert commands[1:] == [
        "python3 -m venv /opt/hpdhc/venv",
        "/opt/hpdhc/venv/bin/pip install --quiet --disable-pip-version-check --upgrade " + commands[0].split()[-1],
    ]  # with --destdir nothing is enabled: the unit is for a package or an image
    unit = (tmp_path / "etc/systemd/system/hpdhc-slurm-bridge.service").read_text()
    service = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line)
    assert service["ExecStart"] == (
        "/opt/hpdhc/venv/bin/hpdhc bridge --cluster ml-cluster-1 "
        "--endpoint https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod/ --region eu-west-1 "
        "--scontrol /opt/slurm/bin/scontrol --provisioning-parameters /opt/ml/config/provisioning_parameters.json"
    )
    assert (service["Restart"], service["WantedBy"]) == ("always", "multi-user.target")
    assert "slurmctld.service" in service["After"]
    # What the unit runs parses as `hpdhc bridge` arguments.
    parsed = bridge.parser().parse_args(service["ExecStart"].split()[2:])
    assert (parsed.cluster, parsed.region, parsed.interval, parsed.once) == ("ml-cluster-1", "eu-west-1", None, False)


def test_the_snippet_finds_the_controller_node_as_the_base_config_does(tmp_path):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.254.254.254", 1))
        address = probe.getsockname()[0]
    except OSError:
        address = "127.0.0.1"
    finally:
        probe.close()
    resources = tmp_path / "resource_config.json"
    parameters = tmp_path / "provisioning_parameters.json"
    parameters.write_text(json.dumps({"controller_group": "controller-machine", "login_group": "login"}))
    common = ["--cluster", "c", "--endpoint", "https://x.execute-api.us-east-2.amazonaws.com/prod",
              "--wheel", "/tmp/w.whl", "--provisioning-parameters", str(parameters), "--destdir", str(tmp_path),
              "--dry-run"]  # fmt: skip
    for group, installs in (("controller-machine", True), ("login", False), ("p5-workers", False)):
        instances = [{"InstanceName": "n1", "CustomerIpAddress": address}]
        resources.write_text(json.dumps({"InstanceGroups": [{"Name": group, "Instances": instances}]}))
        done = snippet(*common, env={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(resources)})
        assert done.returncode == 0, done.stderr
        assert ("venv" in done.stdout) == installs, done.stdout
    resources.write_text(json.dumps({"InstanceGroups": []}))
    done = snippet(*common, env={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(resources)})
    assert done.returncode == 1 and "pass --node-type" in done.stderr


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--cluster", "bad name", "--endpoint", "https://x", "--wheel", "w"], "--cluster"),
        (["--cluster", "c", "--endpoint", "ftp://x", "--wheel", "w"], "--endpoint"),
        (["--cluster", "c", "--endpoint", "https://x", "--wheel", "w"], "--region needed"),
        (["--cluster", "c", "--endpoint", "https://x", "--region", "us-east-1"], "--wheel"),
        (["--cluster"], "--cluster needs a value"),
        (["--bogus", "x"], "unknown argument: --bogus"),
    ],
)
def test_the_snippet_refuses_what_would_make_a_broken_unit(args, error):
    done = snippet("--node-type", "controller", "--dry-run", *args)
    assert done.returncode == 1 and error in done.stderr
