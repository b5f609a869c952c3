"""The Slurm bridge agent without a Slurm: reading `scontrol -o show node` (lines captured from a running 22.05),
who owns a node (the allow-list), the scontrol changes and their batches, the unlisted-node rule, the document's
generation and coverage, what a failing controller or Slurm leaves alone, exit codes, the lock, the gate at boot,
the API client's pages and chunks. Against a real Slurm: test_real_slurm.py. Imports hpdhc only: this file runs
under the oldest Python the bridge supports."""

import json
import socket
import stat
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperpod_dhc.hpdhc import bridge, cli, gate
from hyperpod_dhc.hpdhc.apply import changes, unlisted_node_changes
from hyperpod_dhc.hpdhc.bridge import load_partitions
from hyperpod_dhc.hpdhc.client import ApiError, OperatorClient
from hyperpod_dhc.hpdhc.document import FEATURES, Desired, Document, Memory
from hyperpod_dhc.hpdhc.lock import AWAITING
from hyperpod_dhc.hpdhc.outcome import EXIT_API
from hyperpod_dhc.hpdhc.scontrol import (
    OWNED_PREFIX,
    Scontrol,
    SlurmError,
    SlurmNode,
    SlurmUnreachable,
    parse_node,
    parse_nodes,
    parse_reservations,
)
from hyperpod_dhc.hpdhc.sync import sync_once
from tests.fakes.slurm_lock import FakeLock

WAIT = OWNED_PREFIX + "wait deep health check not passed yet, i-0; hpdhc history c n"
CHECK = OWNED_PREFIX + "check deep health check running, i-0; hpdhc history c n"
IN_PROGRESS, PASSED, FAILED, SKIPPED = FEATURES


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
    "Reason=hpdhc:wait not recorded by the controller yet [root@2026-12-03T18:03:26]"
)
DRAINING_WITH_JOB = (
    "NodeName=ip-10-0-0-1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=1 CPUTot=1 CPULoad=1.09 "
    "AvailableFeatures=gpu,efa ActiveFeatures=gpu,efa Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost "
    "Port=33055 Version=22.05.8 OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 "
    "FreeMem=23348 Sockets=1 Boards=1 State=ALLOCATED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=dev  BootTime=2026-12-03T09:37:53 SlurmdStartTime=2026-12-03T18:07:25 "
    "LastBusyTime=2026-12-03T18:07:25 CfgTRES=cpu=1,mem=100M,billing=1 AllocTRES=cpu=1 CapWatts=n/a CurrentWatts=0 "
    "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=hpdhc:x [root@2026-12-03T18:07:28]"
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


ALL = ",".join(FEATURES)


@pytest.mark.parametrize(
    ("line", "drained", "reason", "features", "partitions", "busy", "claim"),
    [
        (IDLE, False, None, ("gpu", "efa"), ("dev",), False, None),
        (OURS_DRAINED, True, AWAITING, ("gpu", "efa", IN_PROGRESS), ("dev",), False, None),
        (DRAINING_WITH_JOB, True, "hpdhc:x", ("gpu", "efa"), ("dev",), True, None),  # sinfo: drng
        (HYPERPOD_REBOOT, True, "Action:Reboot", ("gpu", "efa"), ("dev",), False, "Action:Reboot"),
        (ODD_REASON, True, "ticket=4711 [disk] see foo@bar", (), ("cpu",), False,
         "NOT_RESPONDING: ticket=4711 [disk] see foo@bar"),
        (NEVER_REGISTERED, False, None, ("gpu", "efa"), ("dev",), False, "UNKNOWN+NOT_RESPONDING"),
        (with_state(IDLE, "IDLE+COMPLETING+DRAIN"), True, None, ("gpu", "efa"), ("dev",), True, "DRAIN"),
        (with_state(IDLE, "MIXED"), False, None, ("gpu", "efa"), ("dev",), True, None),  # some CPUs allocated
        (with_state(IDLE, "DRAINED"), True, None, ("gpu", "efa"), ("dev",), False, "DRAIN"),  # no reason: not ours
        (with_state(IDLE, "DOWN+NOT_RESPONDING"), False, None, ("gpu", "efa"), ("dev",), False, "DOWN+NOT_RESPONDING"),
        (with_state(IDLE, "IDLE+MAINT+RESERVED"), False, None, ("gpu", "efa"), ("dev",), False, "MAINT"),
        (with_state(IDLE, "IDLE+REBOOT_REQUESTED"), False, None, ("gpu", "efa"), ("dev",), False, "REBOOT_REQUESTED"),
        (with_state(IDLE, "IDLE+POWERED_DOWN"), False, None, ("gpu", "efa"), ("dev",), False, "POWERED_DOWN"),
        (with_state(IDLE, "IDLE*"), False, None, ("gpu", "efa"), ("dev",), False, "NOT_RESPONDING"),  # sinfo's *
        (with_state(IDLE, "IDLE+SOMETHING_NEW"), False, None, ("gpu", "efa"), ("dev",), False, "SOMETHING_NEW"),
        (with_state(IDLE, "IDLE+RESERVED"), False, None, ("gpu", "efa"), ("dev",), False, None),
    ],
)  # fmt: skip
def test_scontrol_lines_are_read_and_anything_not_ours_is_a_claim(line, drained, reason, features, partitions, busy,
                                                                   claim):  # fmt: skip
    node = parse_node(line)
    assert (node.drained, node.reason, node.features, node.available, node.partitions, node.busy) == (
        drained, reason, features, features, partitions, busy)  # fmt: skip
    assert node.claim == claim


# `scontrol -o show reservation` on Slurm 22.05 (one line each; State=INACTIVE: not started yet)
RESERVATIONS = (
    "ReservationName=maint1 StartTime=2026-12-05T00:27:04 EndTime=2026-12-05T01:27:04 Duration=01:00:00 "
    "Nodes=ip-10-0-0-[1-2] NodeCnt=2 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES TRES=cpu=2 "
    "Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a "
    "MaxStartDelay=(null)\n"
    "ReservationName=later StartTime=2026-12-06T00:00:00 EndTime=2026-12-06T01:00:00 Duration=01:00:00 "
    "Nodes=ip-10-0-0-3 NodeCnt=1 CoreCnt=1 Features=(null) PartitionName=(null) Flags=SPEC_NODES TRES=cpu=1 "
    "Users=root Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a "
    "MaxStartDelay=(null)\n"
)


def test_reservations_are_read_and_an_active_one_is_a_claim_maint_or_not():
    maint, later = parse_reservations(RESERVATIONS)
    assert (maint.name, maint.nodes, maint.active, maint.claim) == (
        "maint1", "ip-10-0-0-[1-2]", True, "reservation maint1 (MAINT)")  # fmt: skip
    assert (later.nodes, later.active, later.claim) == ("ip-10-0-0-3", False, "reservation later")
    assert parse_reservations("No reservations in the system\n") == []
    reserved = SlurmNode("a", reservation=maint.claim)
    assert reserved.claim == "reservation maint1 (MAINT)"
    assert changes(Desired(WAIT, IN_PROGRESS), reserved) == [], "never drained, never relabelled"


def test_a_listing_is_every_node_by_name_and_nothing_else():
    assert list(parse_nodes("\n".join([IDLE.replace("ip-10-0-0-1", "a"), "", NEVER_REGISTERED, ""]))) == [
        "a",
        "ip-10-0-0-2",
    ]
    assert parse_nodes("No nodes in the system\n") == {}


def node(name="n", drained=False, reason=None, features=("gpu",), partition="dev", busy=False, states=None):
    words = states or (("ALLOCATED" if busy else "IDLE"),) + (("DRAIN",) if drained else ())
    return SlurmNode(name=name, drained=drained, reason=reason, features=tuple(features), partitions=(partition,),
                     busy=busy, states=tuple(words))  # fmt: skip


# ---------------------------------------------------------------------- changes


def test_a_new_node_is_drained_and_labelled_as_the_adt_sample_does():
    assert changes(Desired(WAIT, IN_PROGRESS), node()) == [
        "State=DRAIN",
        f"Reason={WAIT}",
        f"AvailableFeatures=gpu,{ALL}",  # every HealthCheck:* value available, as health_check_orchestrator.sh
        f"ActiveFeatures=gpu,{IN_PROGRESS}",
    ]


def test_a_passed_node_is_resumed_only_from_our_own_drain():
    passed = Desired(None, PASSED)
    ours = node(drained=True, reason=CHECK, features=(IN_PROGRESS,))
    assert changes(passed, ours)[0] == "State=RESUME"


@pytest.mark.parametrize(
    "held",
    [
        node(drained=True, reason="bad DIMM, ticket 4711"),  # an admin's drain
        node(reason="bad dimm, do not use", states=("DOWN",)),  # an admin's DOWN
        node(reason="Action:Reboot", states=("IDLE", "FAIL", "NOT_RESPONDING")),  # HyperPod's reboot trigger
        node(reason="Not responding", states=("DOWN", "NOT_RESPONDING")),  # Slurm's own
        node(drained=True, reason=CHECK, states=("DOWN", "DRAIN", "NOT_RESPONDING")),  # ours, but slurmd is gone
        node(states=("IDLE", "MAINT", "RESERVED")),
        node(states=("IDLE", "REBOOT_ISSUED")),
        node(reason="maintenance window"),  # a reason with no flag: still someone's
    ],
)
def test_a_node_someone_else_holds_is_left_exactly_as_it_is(held):
    for desired in (Desired(None, PASSED), Desired(WAIT, IN_PROGRESS), Desired(CHECK, FAILED)):
        assert changes(desired, held) == []
    assert held.claim is not None


def test_our_drain_is_reworded_as_the_check_moves_on():
    assert changes(Desired(CHECK, IN_PROGRESS), node(drained=True, reason=WAIT, features=(IN_PROGRESS,))) == [
        "State=DRAIN",
        f"Reason={CHECK}",
        f"AvailableFeatures={ALL}",
        f"ActiveFeatures={IN_PROGRESS}",
    ]


def test_features_available_but_not_active_stay_available():
    actual = replace(node(), available=("gpu", "a100-mig"))
    assert changes(Desired(None, PASSED), actual) == [
        f"AvailableFeatures=gpu,a100-mig,{ALL}",
        f"ActiveFeatures=gpu,{PASSED}",
    ]


REASONS = st.none() | st.sampled_from([WAIT, CHECK, "admin: maintenance", "Action:Reboot"])
SOME_FEATURES = st.lists(st.sampled_from(["gpu", "efa", *FEATURES]), unique=True, max_size=4)


@given(
    reason=st.none() | st.sampled_from([WAIT, CHECK, OWNED_PREFIX + "FAIL dcgm"]),
    feature=st.sampled_from(FEATURES),
    drained=st.booleans(),
    actual_reason=REASONS,
    features=SOME_FEATURES,
    extra=st.sampled_from([(), ("DOWN",), ("NOT_RESPONDING",), ("FAIL",), ("COMPLETING",)]),
)
def test_changes_never_touch_a_claim_and_are_idempotent(reason, feature, drained, actual_reason, features, extra):
    actual = node(drained=drained, reason=actual_reason if drained else None, features=features,
                  states=("IDLE", *(("DRAIN",) if drained else ()), *extra))  # fmt: skip
    out = changes(Desired(reason, feature), actual)
    if actual.claim is not None:
        assert out == []
        return
    state = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in out}
    resumed, drains = state.get("State") == "RESUME", state.get("State") == "DRAIN"
    after = replace(
        actual,
        drained=(drained and not resumed) or drains,
        reason=None if resumed else state.get("Reason", actual.reason),
        features=tuple(state["ActiveFeatures"].split(",")) if "ActiveFeatures" in state else actual.features,
        available=tuple(state["AvailableFeatures"].split(",")) if "AvailableFeatures" in state else actual.available,
        states=("IDLE", *(("DRAIN",) if (drained and not resumed) or drains else ()), *extra),
    )
    assert changes(Desired(reason, feature), after) == []
    assert [f for f in after.features if f.startswith("HealthCheck:")] == [feature]
    assert [f for f in after.features if not f.startswith("HealthCheck:")] == [
        f for f in features if not f.startswith("HealthCheck:")
    ], "features other than HealthCheck:* are kept"


@pytest.mark.parametrize(
    ("unlisted", "isolating", "complete", "expected"),
    [
        (node(), True, True, ["State=DRAIN", f"Reason={AWAITING}"]),  # not recorded yet: no job before its check
        (node(), True, False, []),  # a partial document proves nothing about an unlisted node
        (node(), None, True, []),  # a partition of no known group
        (node(drained=True, reason=gate.BOOT_REASON), False, True, ["State=RESUME"]),  # an opted-out group
        (node(drained=True, reason=gate.BOOT_REASON), False, False, []),
        (node(drained=True, reason="admin"), False, True, []),
        (node(reason="Not responding", states=("DOWN",)), True, True, []),
    ],
)
def test_an_unlisted_node_is_drained_only_when_the_document_covers_the_cluster(unlisted, isolating, complete,
                                                                                expected):  # fmt: skip
    assert unlisted_node_changes(unlisted, isolating, complete) == expected


# ---------------------------------------------------------------------- one pass against fakes


class FakeSlurm(FakeLock):
    """Slurm's update semantics as 22.05 shows them: a drain sets the reason, a resume clears it and is refused for
    a node not drained, features are replaced as given; one call may name many nodes."""

    def __init__(self, *nodes: SlurmNode, refuse: tuple[str, ...] = (), unreachable_after: int | None = None) -> None:
        self.state = {n.name: n for n in nodes}
        self.refuse = refuse
        self.updates: list[tuple[tuple[str, ...], list[str]]] = []
        self.unreadable = False
        self.unreachable_after = unreachable_after

    def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
        if self.unreadable:
            raise SlurmUnreachable("scontrol -o show node: slurm_load_node error: Unable to contact slurm controller")
        return self.locked_view({k: v for k, v in self.state.items() if not names or k in names}, lock)

    def update(self, nodes, args: list[str]) -> None:
        if self.unreachable_after is not None and len(self.updates) >= self.unreachable_after:
            raise SlurmUnreachable("slurm_update error: Unable to contact slurm controller (connect failure)")
        self.updates.append((tuple(nodes), args))
        if any(n in self.refuse for n in nodes):
            raise SlurmError(f"scontrol update NodeName={nodes}: slurm_update error: Invalid node name specified")
        for name in nodes:
            self._update(name, args)

    def _update(self, name: str, args: list[str]) -> None:
        given = dict(a.split("=", 1) for a in args)
        current = self.state[name]
        if given.get("State") == "RESUME":
            if not current.drained:
                raise SlurmError("slurm_update error: Invalid node state specified")
            current = replace(current, drained=False, reason=None, states=current.states[:1])
        elif given.get("State") == "DRAIN":
            current = replace(current, drained=True, reason=given["Reason"], states=(current.states[0], "DRAIN"))
        if "ActiveFeatures" in given:
            active, available = (
                tuple(filter(None, given[k].split(","))) for k in ("ActiveFeatures", "AvailableFeatures")
            )
            current = replace(current, features=active, available=available)
        self.state[name] = current


class FakeController:
    def __init__(self, document: dict | None = None, failure: Exception | None = None) -> None:
        self.document, self.failure = document, failure
        self.reports: list[list[dict]] = []
        self.report_failure: Exception | None = None

    def desired(self, cluster: str, since=None, status=None) -> dict:
        if self.failure:
            raise self.failure
        return self.document

    def report(self, cluster: str, nodes: list[dict]) -> dict:
        if self.report_failure:
            raise self.report_failure
        self.reports.append(nodes)
        return {"updated": len(nodes), "unknown": []}


PARTITIONS = {"dev": "p5-workers", "cpu": "cpu-workers"}


def entry(name: str, reason: str | None, feature: str = IN_PROGRESS) -> dict:
    return {"node": name, "key": f"lid-{name}", "logical_id": f"lid-{name}", "instance_id": "i-0",
            "group": "p5-workers", "state": "x", "reason": reason, "feature": str(feature)}  # fmt: skip


def document(*entries: dict, isolating=("p5-workers",), cluster="c", complete=True, generation=1.0) -> dict:
    return {"cluster": cluster, "sync_interval_s": 60, "isolating_groups": list(isolating), "nodes": list(entries),
            "complete": complete, "generation": generation, "next_token": None}  # fmt: skip


def test_what_the_controller_decides_is_applied_in_one_call_per_change_and_then_left_alone():
    wanted = {"a": Desired(WAIT, IN_PROGRESS), "b": Desired(WAIT, IN_PROGRESS), "c": Desired(None, PASSED),
              "d": Desired(OWNED_PREFIX + "FAIL dcgm failed", FAILED)}  # fmt: skip
    controller = FakeController(document(*(entry(n, d.reason, d.feature) for n, d in wanted.items())))
    slurm = FakeSlurm(node("a"), node("b", busy=True), node("c", drained=True, reason=AWAITING), node("d"))

    first = sync_once("c", controller, slurm, PARTITIONS)
    assert first.errors == []
    for name, desired in wanted.items():
        state = slurm.state[name]
        assert (state.drained, state.reason) == (desired.reason is not None, desired.reason)
        assert state.features == ("gpu", desired.feature)
    assert [u[0] for u in slurm.updates] == [("a", "b"), ("c",), ("d",)], "one scontrol update per distinct change"
    assert first.reported == [{"node": n, "busy": n == "b", "key": f"lid-{n}"} for n in "abcd"] == controller.reports[0]

    slurm.updates.clear()
    assert sync_once("c", controller, slurm, PARTITIONS).applied == {} and slurm.updates == []


def test_a_held_node_is_reported_with_its_claim_and_never_resumed():
    slurm = FakeSlurm(node("a", reason="bad dimm, do not use", states=("DOWN",)),
                      node("b", reason="Action:Reboot", states=("IDLE", "FAIL")))  # fmt: skip
    controller = FakeController(document(entry("a", None, PASSED), entry("b", WAIT)))
    result = sync_once("c", controller, slurm, PARTITIONS)
    assert slurm.updates == [] and result.applied == {}
    assert controller.reports[0] == [
        {"node": "a", "busy": False, "key": "lid-a", "held": "DOWN: bad dimm, do not use"},
        {"node": "b", "busy": False, "key": "lid-b", "held": "FAIL: Action:Reboot"},
    ]


class DrainedBetweenReadAndWrite(FakeSlurm):
    """Someone acts on the cluster after the pass read Slurm and before it writes: `meddle` is applied to the node
    on the first re-read of only some nodes (the read right before a RESUME)."""

    def __init__(self, *nodes: SlurmNode, meddle: dict[str, SlurmNode]) -> None:
        super().__init__(*nodes)
        self.meddle = meddle

    def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
        if names:
            self.state.update(self.meddle)
            self.meddle = {}
        return super().nodes(names, lock)


def test_a_claim_placed_between_the_passs_read_and_its_resume_is_kept():
    ours = {"reason": AWAITING, "drained": True}
    admin = node("a", drained=True, reason="admin: dimm suspect", states=("IDLE", "DRAIN"))
    slurm = DrainedBetweenReadAndWrite(node("a", **ours), node("b", **ours), meddle={"a": admin})
    controller = FakeController(document(entry("a", None, PASSED), entry("b", None, PASSED)))
    result = sync_once("c", controller, slurm, PARTITIONS)
    assert [u[0] for u in slurm.updates] == [("b",)], "only the node still drained by us alone is resumed"
    assert slurm.state["a"] == admin and not slurm.state["b"].drained
    assert result.held == {"a": "admin: dimm suspect"}
    assert {r["node"]: r.get("held") for r in controller.reports[0]} == {"a": "admin: dimm suspect", "b": None}


def test_slurmctld_gone_at_the_read_before_a_resume_stops_the_pass_with_nothing_resumed():
    class GoneAtReRead(FakeSlurm):
        def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
            self.unreadable = bool(names)
            return super().nodes(names, lock)

    slurm = GoneAtReRead(node("a", drained=True, reason=AWAITING))
    result = sync_once("c", FakeController(document(entry("a", None, PASSED))), slurm, PARTITIONS)
    assert slurm.updates == [] and result.failure == bridge.EXIT_SLURM and "the pass stops here" in result.errors[-1]


def test_an_empty_or_partial_document_drains_nothing_it_does_not_list():
    slurm = FakeSlurm(*(node(f"n{i}") for i in range(5)))
    assert sync_once("c", FakeController(document(complete=False)), slurm, PARTITIONS).applied == {}
    assert sync_once("c", FakeController(document(entry("n0", WAIT), complete=False)), slurm, PARTITIONS).applied == {
        "n0": ["State=DRAIN", f"Reason={WAIT}", f"AvailableFeatures=gpu,{ALL}", f"ActiveFeatures=gpu,{IN_PROGRESS}"]
    }
    result = sync_once("c", FakeController(document(entry("n0", WAIT))), slurm, PARTITIONS)  # complete: new nodes
    assert sorted(result.applied) == ["n1", "n2", "n3", "n4"] and len(slurm.updates) == 2


def test_an_older_document_is_not_applied_and_a_name_listed_twice_is_left_alone():
    memory = Memory()
    slurm = FakeSlurm(node("a"), node("b"))
    sync_once("c", FakeController(document(entry("a", WAIT), entry("b", WAIT), generation=5.0)), slurm, PARTITIONS,
              memory)  # fmt: skip
    older = sync_once("c", FakeController(document(entry("a", None, PASSED), generation=4.0)), slurm, PARTITIONS,
                      memory)  # fmt: skip
    assert older.stale and older.applied == {} and slurm.state["a"].drained
    twice = document(entry("a", None, PASSED), entry("a", WAIT), entry("b", WAIT), generation=6.0)
    assert "a" not in sync_once("c", FakeController(twice), slurm, PARTITIONS, memory).applied


def test_with_the_controller_down_the_last_document_still_drains_new_nodes_and_resumes_nothing(tmp_path):
    memory = Memory.load(tmp_path / "c.json")
    slurm = FakeSlurm(node("a", drained=True, reason=WAIT))
    sync_once("c", FakeController(document(entry("a", WAIT))), slurm, PARTITIONS, memory)
    assert (tmp_path / "c.json").exists()
    slurm.state |= {"new": node("new"), "cpu": node("cpu", partition="cpu", drained=True, reason=gate.BOOT_REASON)}
    down = sync_once(
        "c", FakeController(failure=ApiError(500, "x")), slurm, PARTITIONS, Memory.load(tmp_path / "c.json")
    )
    assert down.applied == {"new": ["State=DRAIN", f"Reason={AWAITING}"]}, "no resume without a fresh answer"
    assert down.failure == bridge.EXIT_API and down.reported == []
    fresh = FakeSlurm(node("new"))
    assert sync_once("c", FakeController(failure=ApiError(500, "x")), fresh, PARTITIONS, Memory()).applied == {}


def test_a_refused_batch_is_retried_node_by_node_and_slurmctld_gone_stops_the_pass():
    slurm = FakeSlurm(node("a"), node("b"), node("c"), refuse=("b",))
    result = sync_once("c", FakeController(document(*(entry(n, WAIT) for n in "abc"))), slurm, PARTITIONS)
    assert sorted(result.applied) == ["a", "c"] and len(result.errors) == 1
    assert result.failure == bridge.EXIT_OK and result.reported
    slurm = FakeSlurm(*(node(f"n{i}") for i in range(3)), unreachable_after=0)
    wanted = document(entry("n0", WAIT), entry("n1", None, PASSED), entry("n2", CHECK))
    result = sync_once("c", FakeController(wanted), slurm, PARTITIONS)
    assert result.applied == {} and result.failure == bridge.EXIT_SLURM and len(result.errors) == 1
    assert "the pass stops here" in result.errors[0]


def test_a_large_labelling_pass_is_a_few_calls(monkeypatch):
    nodes = [node(f"ip-10-2-{i // 250}-{i % 250 + 1}") for i in range(10_000)]
    slurm = FakeSlurm(*nodes)
    wanted = document(*(entry(n.name, WAIT) for n in nodes))
    result = sync_once("c", FakeController(wanted), slurm, PARTITIONS)
    assert len(result.applied) == 10_000 and len(slurm.updates) == 10_000 // 500


def test_a_controller_that_fails_or_answers_off_the_contract_changes_nothing():
    slurm = FakeSlurm(node("a"))
    for answer in (document() | {"cluster": "other"}, {"cluster": "c", "nodes": []}, [], None):
        result = sync_once("c", FakeController(answer), slurm, PARTITIONS)
        assert result.applied == {} and result.failure == bridge.EXIT_API
    assert sync_once("c", FakeController(failure=ApiError(403, "no")), slurm, PARTITIONS).failure == bridge.EXIT_AUTH
    assert slurm.updates == []


def test_a_node_entry_off_the_contract_is_skipped_and_the_rest_applied():
    slurm = FakeSlurm(node("a"), node("b"), node("c"))
    bad = [entry("a", "admin reason"), entry("b", WAIT, "HealthCheck:Maybe"), entry("c", WAIT)]
    result = sync_once("c", FakeController(document(*bad)), slurm, PARTITIONS)
    assert list(result.applied) == ["c"] and len(result.errors) == 2


def test_dry_run_prints_what_a_pass_would_do_and_changes_nothing(capsys):
    slurm = FakeSlurm(node("a"), node("b", reason="bad dimm", states=("DOWN",)))
    controller = FakeController(document(entry("a", WAIT), entry("b", WAIT)))
    assert bridge.run("c", controller, slurm, PARTITIONS, dry_run=True) == 0
    out = capsys.readouterr().out
    assert slurm.updates == [] and controller.reports == []
    assert f'scontrol update NodeName=a State=DRAIN Reason="{WAIT}"' in out
    assert "# b: held by someone else (DOWN: bad dimm): left as it is" in out
    assert "scontrol update ReservationName=hpdhc-c Nodes=a\n" in out  # locked, then labelled
    assert "# 1 node(s) would change in 2 scontrol update(s)" in out


# ---------------------------------------------------------------------- the gate at boot


@pytest.mark.parametrize(
    ("at_boot", "expected"),
    [
        (node(states=("UNKNOWN", "NOT_RESPONDING")), ["State=DRAIN", f"Reason={gate.BOOT_REASON}"]),
        (node(reason="Not responding", states=("DOWN", "NOT_RESPONDING")), ["State=DRAIN",
                                                                           f"Reason={gate.BOOT_REASON}"]),
        (node(), ["State=DRAIN", f"Reason={gate.BOOT_REASON}"]),
        (node(drained=True, reason=WAIT), []),
        (node(drained=True, reason="admin: rack 7"), "held by someone else (admin: rack 7)"),
        (node(reason="bad dimm", states=("DOWN",)), "held by someone else (DOWN: bad dimm)"),
        (node(reason="Action:Replace", states=("IDLE", "FAIL")), "held by someone else (FAIL: Action:Replace)"),
    ],
)  # fmt: skip
def test_the_gate_drains_a_booting_node_unless_someone_holds_it(at_boot, expected):
    assert gate.boot_changes(at_boot, None) == expected
    assert gate.boot_changes(at_boot, False) == "its group does not isolate new nodes"


def test_the_gate_never_fails_a_launch_and_marks_a_node_slurmctld_does_not_know(tmp_path):
    slurm = FakeSlurm()
    marks = tmp_path / "marks"
    assert gate.node_boot("new", slurm, lambda n: None, "c", 0, marks, sleep=lambda s: None) == bridge.EXIT_OK
    assert json.loads((marks / "new").read_text())["why"].startswith("slurmctld does not know node new yet")
    slurm.unreadable = True  # slurmctld down: the same
    assert gate.node_boot("down", slurm, lambda n: None, "c", 0, marks, sleep=lambda s: None) == bridge.EXIT_OK
    assert "Unable to contact slurm controller" in json.loads((marks / "down").read_text())["why"]


def test_the_gate_locks_then_labels_its_own_node_only():
    slurm = FakeSlurm(node("new", states=("FUTURE",)), node("other", states=("UNKNOWN",)))
    assert gate.node_boot("new", slurm, lambda n: None, "c", 0) == bridge.EXIT_OK
    assert slurm.lock_writes == [("hpdhc-c", ("new",))] and slurm.state["new"].reason is None, "FUTURE: locked only"
    assert slurm.state["other"].reason is None
    slurm = FakeSlurm(node("down", states=("DOWN",), reason="Not responding"))
    assert gate.node_boot("down", slurm, lambda n: None, "c", 0) == bridge.EXIT_OK
    assert slurm.lock_writes == [("hpdhc-c", ("down",))] and slurm.state["down"].reason == gate.BOOT_REASON
    slurm = FakeSlurm(node("busy", reason="admin: dimm", drained=True, states=("IDLE", "DRAIN")))
    assert gate.node_boot("busy", slurm, lambda n: None, "c", 0) == bridge.EXIT_OK
    assert not getattr(slurm, "lock_writes", []) and slurm.updates == [], "someone else's claim: left alone"
    slurm = FakeSlurm(node("opted-out", states=("UNKNOWN",)))
    assert gate.node_boot("opted-out", slurm, lambda n: False, "c", 0) == bridge.EXIT_OK
    assert not getattr(slurm, "lock_writes", []) and slurm.updates == []


def test_gate_slurm_conf_prints_nothing(capsys):
    assert cli.main(["gate", "slurm-conf"]) == 0 and capsys.readouterr().out == ""


# ---------------------------------------------------------------------- Scontrol


@pytest.fixture
def fake_scontrol(tmp_path):
    """An `scontrol` that logs its arguments and prints a canned listing; FAIL_UPDATE makes updates fail."""
    calls = tmp_path / "calls"
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        'case "$1 $3" in\n'
        '  "-o reservation") [ -n "$RESERVED" ] && printf "%s" "$RESERVED" || echo "No reservations in the system" ;;\n'
        f'  -o*) printf "%s\\n%s\\n" "{IDLE}" "{NEVER_REGISTERED}" ;;\n'
        '  "show ip-10-0-0-[1-2]") printf "ip-10-0-0-1\\nip-10-0-0-2\\n" ;;\n'
        '  update*) [ -z "$FAIL_UPDATE" ] || { echo "$FAIL_UPDATE" >&2; exit 1; };;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, calls


def test_scontrol_is_run_with_exactly_the_changes(fake_scontrol, monkeypatch):
    script, calls = fake_scontrol
    scontrol = Scontrol(str(script))
    assert list(scontrol.nodes()) == ["ip-10-0-0-1", "ip-10-0-0-2"]
    scontrol.update(["ip-10-0-0-1", "ip-10-0-0-2"], ["State=DRAIN", f"Reason={WAIT}", "AvailableFeatures=a,b",
                                                     "ActiveFeatures=a"])  # fmt: skip
    assert calls.read_text().splitlines() == [
        "-o --future show node",
        "-o show reservation",
        f"update NodeName=ip-10-0-0-1,ip-10-0-0-2 State=DRAIN Reason={WAIT} AvailableFeatures=a,b ActiveFeatures=a",
    ]
    monkeypatch.setenv("FAIL_UPDATE", "slurm_update error: Invalid node name specified")
    with pytest.raises(SlurmError, match="Invalid node name specified") as err:
        scontrol.update(["ip-10-0-0-1"], ["State=RESUME"])
    assert not isinstance(err.value, SlurmUnreachable)
    monkeypatch.setenv("FAIL_UPDATE", "slurm_update error: Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmUnreachable):
        scontrol.update(["ip-10-0-0-1"], ["State=RESUME"])


def test_a_node_an_active_reservation_holds_is_read_with_it(fake_scontrol, monkeypatch):
    script, calls = fake_scontrol
    monkeypatch.setenv("RESERVED", RESERVATIONS)
    nodes = Scontrol(str(script)).nodes(["ip-10-0-0-1", "ip-10-0-0-2"])
    assert {n: node.claim for n, node in nodes.items()} == {
        "ip-10-0-0-1": "reservation maint1 (MAINT)",
        "ip-10-0-0-2": "reservation maint1 (MAINT)",  # its own claim (never registered) comes second
    }
    assert calls.read_text().splitlines() == [
        "-o --future show node ip-10-0-0-1,ip-10-0-0-2", "-o show reservation",
        "show hostnames ip-10-0-0-[1-2]"]  # fmt: skip


@pytest.mark.parametrize(
    ("nodes", "args"),
    [
        (["a"], ["State=DOWN", "Reason=x"]), (["a"], ["State=FAIL"]), (["a"], ["State=POWER_DOWN"]),
        (["a"], ["Weight=1"]), (["a"], []), (["a"], ["State=DRAIN", "Reason=two\nlines"]), ([], ["State=RESUME"]),
        (["a b"], ["State=RESUME"]), (["-a"], ["State=RESUME"]),
    ],
)  # fmt: skip
def test_scontrol_refuses_anything_that_could_stop_a_job(fake_scontrol, nodes, args):
    script, calls = fake_scontrol
    with pytest.raises(SlurmError, match="refused"):
        Scontrol(str(script)).update(nodes, args)
    assert not calls.exists()


def test_a_missing_scontrol_is_slurm_unreachable(tmp_path):
    with pytest.raises(SlurmUnreachable, match="No such file"):
        Scontrol(str(tmp_path / "nowhere")).nodes()


# ---------------------------------------------------------------------- the API client's pages and chunks


def test_the_desired_state_is_every_page_merged_in_pages_as_large_as_the_route_gives(monkeypatch):
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
        ("GET", "/clusters/c/slurm", {"limit": "10000"}),
        ("GET", "/clusters/c/slurm", {"limit": "10000", "next_token": "t1"}),
        ("GET", "/clusters/c/slurm", {"limit": "10000", "next_token": "t2"}),
    ]


def test_occupancy_is_posted_a_thousand_nodes_at_a_time_and_the_answer_stays_bounded(monkeypatch):
    posted = []

    def call(self, method, path, body=None, query=None):
        posted.append((method, path, len(body["nodes"])))
        return {"updated": len(body["nodes"]) - 1, "unknown": [body["nodes"][0]["node"]], "unknown_count": 1}

    monkeypatch.setattr(OperatorClient, "_call", call)
    client = OperatorClient("http://127.0.0.1:1")
    nodes = [{"node": f"n{i}", "busy": False} for i in range(2500)]
    assert client.report_occupancy("c", nodes) == {"updated": 2497, "unknown": ["n0", "n1000", "n2000"],
                                                   "unknown_count": 3}  # fmt: skip
    assert posted == [("POST", "/clusters/c/slurm/occupancy", n) for n in (1000, 1000, 500)]


def test_the_region_comes_from_the_endpoint():
    client = OperatorClient("https://abc123defg.execute-api.eu-west-1.amazonaws.com/v1")
    assert client.region == "eu-west-1"


# ---------------------------------------------------------------------- the agent around sync_once


def test_partitions_come_from_the_provisioning_parameters_and_a_missing_file_is_a_config_error(tmp_path):
    path = tmp_path / "provisioning_parameters.json"
    path.write_text(json.dumps({"controller_group": "controller-machine", "worker_groups": [
        {"instance_group_name": "p5-workers", "partition_name": "dev"},
        {"instance_group_name": "cpu-workers", "partition_name": "cpu"}]}))  # fmt: skip
    assert load_partitions(path) == PARTITIONS
    with pytest.raises(bridge.ConfigError, match="not found"):
        load_partitions(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(bridge.ConfigError, match="unreadable"):
        load_partitions(path)


def test_exit_codes_tell_auth_api_slurm_and_partial_failures_apart_and_the_loop_keeps_the_pace():
    slurm = FakeSlurm(node("a"))
    assert bridge.run("c", FakeController(document(entry("a", WAIT))), slurm, PARTITIONS, once=True) == 0
    assert bridge.run("c", FakeController(failure=ApiError(500, "x")), slurm, PARTITIONS, once=True) == 4
    assert bridge.run("c", FakeController(failure=ApiError(403, "x")), slurm, PARTITIONS, once=True) == 3
    no_credentials = ApiError(0, "no AWS credentials found (use --profile or the standard credential chain)")
    assert bridge.run("c", FakeController(failure=no_credentials), slurm, PARTITIONS, once=True) == 3
    slurm.unreadable = True
    assert bridge.run("c", FakeController(document(entry("a", WAIT))), slurm, PARTITIONS, once=True) == 5
    slurm = FakeSlurm(node("a"), node("b"), refuse=("b",))
    assert bridge.run("c", FakeController(document(entry("a", WAIT), entry("b", WAIT))), slurm, PARTITIONS,
                      once=True) == 1  # fmt: skip

    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            raise KeyboardInterrupt

    slurm = FakeSlurm(node("a"))
    controller = FakeController(document(entry("a", WAIT)) | {"sync_interval_s": 1})
    with pytest.raises(KeyboardInterrupt):
        bridge.run("c", controller, slurm, PARTITIONS, sleep=sleep)
    assert 9 < slept[0] <= 10, "a suggested interval is kept within bounds"
    controller.failure = ApiError(0, "down")
    slept.clear()
    with pytest.raises(KeyboardInterrupt):
        bridge.run("c", controller, slurm, PARTITIONS, interval_s=30, sleep=sleep)
    assert all(29 < s <= 30 for s in slept), "--interval wins, and an unreachable controller is retried"
    controller.failure = ApiError(403, "no")
    assert bridge.run("c", controller, slurm, PARTITIONS, sleep=lambda s: None) == 3, "refused for good: exits"


def test_hpdhc_bridge_fails_loudly_on_config_and_runs_no_update_against_an_unreachable_controller(
    fake_scontrol, tmp_path
):
    script, calls = fake_scontrol
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    base = ["bridge", "--cluster", "c", "--endpoint", endpoint, "--once", "--scontrol", str(script),
            "--state-dir", str(tmp_path / "state")]  # fmt: skip
    assert cli.main([*base, "--provisioning-parameters", str(tmp_path / "none.json")]) == 6
    parameters = tmp_path / "p.json"
    parameters.write_text(json.dumps({"worker_groups": [{"instance_group_name": "g", "partition_name": "dev"}]}))
    assert cli.main([*base, "--provisioning-parameters", str(parameters)]) == 4
    assert calls.read_text().splitlines() == ["-o --future show node", "-o show reservation", "-o show reservation"], (
        "read, never updated"
    )


def test_a_second_bridge_for_the_cluster_exits_instead_of_double_applying(tmp_path):
    with bridge.single_instance(tmp_path, "c"):
        with (
            pytest.raises(bridge._Locked, match="another bridge for c runs here"),
            bridge.single_instance(tmp_path, "c"),
        ):
            pass
        with bridge.single_instance(tmp_path, "other"):
            pass
    with bridge.single_instance(tmp_path, "c"):  # released on exit
        pass


def test_logs_carry_syslog_priorities_under_journald(monkeypatch, capsys):
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    bridge.configure_logging("INFO")
    bridge.log.error("x")
    bridge.log.info("y")
    err = capsys.readouterr().err
    assert "<3>ERROR x" in err and "<6>INFO y" in err


class CursorController(FakeController):
    """A controller that answers `unchanged` when asked with the cursor of its current document."""

    def __init__(self, document: dict) -> None:
        super().__init__(document)
        self.asked: list[tuple[float, str] | None] = []

    def desired(self, cluster: str, since: tuple[float, str] | None = None, status=None) -> dict:
        self.asked.append(since)
        if since is not None and since == (self.document["as_of"], self.document["digest"]):
            return {"cluster": cluster, "sync_interval_s": 60, "isolating_groups": self.document["isolating_groups"],
                    "complete": True, "unchanged": True, "as_of": since[0], "digest": since[1], "nodes": [],
                    "next_token": None}  # fmt: skip
        return self.document


def pending_entry(name: str, reason: str | None, feature: str = IN_PROGRESS) -> dict:
    return {**entry(name, reason, feature), "state": "pending"}


def test_an_unchanged_answer_keeps_the_last_document_and_an_idle_pass_reports_nothing():
    doc = {**document(entry("a", None, PASSED), entry("b", None, PASSED), pending_entry("c", WAIT)),
           "as_of": 100.0, "digest": "0123456789abcdef"}  # fmt: skip
    controller = CursorController(doc)
    slurm = FakeSlurm(node("a", features=("gpu", PASSED)), node("b", features=("gpu", PASSED)), node("c"))
    memory = Memory()
    first = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert [n["node"] for n in first.reported] == ["a", "b", "c"]  # a run's first pass reports every node once
    slurm.updates.clear()
    second = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert controller.asked[-1] == (100.0, "0123456789abcdef")
    assert second.errors == [] and second.applied == {} and slurm.updates == []
    assert second.reported == [{"node": "c", "busy": False, "key": "lid-c"}]  # only the node waiting for its check
    # A claim appears on a passed node: reported once, with the claim; then nothing again for it.
    slurm.state["a"] = node("a", reason="bad dimm", states=("DOWN",), features=("gpu", PASSED))
    third = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert [(n["node"], n.get("held")) for n in third.reported] == [("a", "DOWN: bad dimm"), ("c", None)]
    fourth = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert [n["node"] for n in fourth.reported] == ["c"]


def test_an_unchanged_answer_for_a_document_the_bridge_does_not_hold_changes_nothing():
    slurm = FakeSlurm(node("a"))
    controller = FakeController({"cluster": "c", "unchanged": True, "digest": "0123456789abcdef", "nodes": [],
                                 "generation": None, "isolating_groups": ["p5-workers"]})  # fmt: skip
    memory = Memory(Document({"a": Desired(None, PASSED)}, frozenset({"p5-workers"}), True, 1.0))  # no cursor
    result = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert result.failure == EXIT_API and slurm.updates == [] and result.reported == []
