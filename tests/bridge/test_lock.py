"""The controller's lock without a Slurm: which nodes it holds after a pass (hyperpod_dhc.hpdhc.lock.plan_lock), who may
be locked (SlurmNode.claim / not_up / lockable), the reservation's node list (hostlist) and its writes
(Scontrol.set_lock through a fake `scontrol`), the fence a document carries and what the bridge keeps of it (Memory),
and how one pass writes the lock before the labels (sync_once). Imports hpdhc only: this file runs under the oldest
Python the bridge supports."""

import json
import random
import re
import stat
import time
from dataclasses import replace
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperpod_dhc.hpdhc import document as document_module
from hyperpod_dhc.hpdhc.document import (
    Desired,
    Document,
    Malformed,
    Memory,
    isolating,
    new_identity,
    read_document,
    still_holds,
)
from hyperpod_dhc.hpdhc.lock import AWAITING, plan_lock, wanted
from hyperpod_dhc.hpdhc.outcome import EXIT_SLURM
from hyperpod_dhc.hpdhc.scontrol import (
    LOCK_RENEW_S,
    LOCK_YEAR_S,
    Lock,
    Scontrol,
    SlurmError,
    SlurmUnreachable,
    hostlist,
    parse_reservations,
)
from hyperpod_dhc.hpdhc.sync import sync_once
from tests.bridge.test_bridge import (
    CHECK,
    IN_PROGRESS,
    PARTITIONS,
    PASSED,
    WAIT,
    FakeController,
    FakeSlurm,
    document,
    entry,
    node,
)

FAIL_REASON = "hpdhc:FAIL dcgm failed, i-0; hpdhc history c n"
LOCK = "hpdhc-c"
MAINT1 = "reservation maint1 (MAINT)"


def want(reason):
    return Desired(reason, IN_PROGRESS if reason else PASSED)


def doc(wanted_nodes=None, complete=True, isolating_groups=("p5-workers",), fence=0, holder=True):
    """A Document: name -> reason (None: passed), or OFF for an entry off the contract."""
    wanted_nodes = wanted_nodes or {}
    return Document({n: None if r is OFF else want(r) for n, r in wanted_nodes.items()},
                    frozenset(isolating_groups), complete, 1.0, fence=fence, holder=holder)  # fmt: skip


OFF = object()  # an entry off the contract: the document does not say


def locked(n):
    return replace(n, locked=True)


def plan(document_, *nodes, written=None, released=None, may_release=True, marked=()):
    return plan_lock(document_, {n.name: n for n in nodes}, PARTITIONS, written, released or {}, may_release,
                     frozenset(marked))  # fmt: skip


# ---------------------------------------------------------------------- plan_lock: adding


NOT_UP = [
    node("a", states=("DOWN",)),
    node("a", reason="Not responding", states=("DOWN", "NOT_RESPONDING")),
    node("a", states=("UNKNOWN", "NOT_RESPONDING")),
    node("a", states=("FUTURE",)),
    node("a", states=("CLOUD",)),
    node("a", states=("IDLE", "CLOUD")),
    node("a", states=("IDLE", "POWERED_DOWN")),
]
CLAIMED = [
    node("a", drained=True, reason="admin: rack 7"),  # an admin's drain
    node("a", reason="bad dimm, do not use", states=("DOWN",)),  # an admin's DOWN
    node("a", drained=True, reason="admin", states=("DOWN", "DRAIN")),
    node("a", reason="Action:Reboot", states=("IDLE", "FAIL")),  # HyperPod's reboot trigger
    node("a", reason="Action:Reboot", states=("IDLE", "FAIL", "NOT_RESPONDING")),
    replace(node("a"), reservation=MAINT1),  # someone else's reservation
    replace(node("a", states=("FUTURE",)), reservation="reservation team"),
    node("a", reason="not responding", states=("DOWN",)),  # not Slurm's own wording: someone's
]


@pytest.mark.parametrize("free", [node("a"), node("a", drained=True, reason=WAIT), node("a", busy=True), *NOT_UP])
@pytest.mark.parametrize("reason", [WAIT, CHECK, FAIL_REASON])
def test_a_wanted_node_no_one_else_claims_is_locked(free, reason):
    for may_release in (True, False):
        out = plan(doc({"a": reason}), free, may_release=may_release)
        assert out.added == {"a"} and out.nodes == {"a"} and out.removed == set() and out.changed


@pytest.mark.parametrize("claimed", CLAIMED)
def test_a_wanted_node_someone_else_claims_is_not_locked(claimed):
    assert not claimed.lockable
    out = plan(doc({"a": WAIT}), claimed)
    assert out.nodes == out.added == out.removed == set() and not out.changed


def test_a_node_the_document_passes_or_does_not_say_is_never_added():
    for reason in (None, OFF):
        assert plan(doc({"a": reason}), node("a")).nodes == set()
    assert plan(doc(complete=False), node("a")).nodes == set(), "a partial document proves nothing"
    assert plan(doc(), node("a", partition="nowhere")).nodes == set(), "a partition of no known group"


# ---------------------------------------------------------------------- plan_lock: keeping and releasing


LOCKED_VARIANTS = [
    node("a", drained=True, reason=WAIT),  # our own label
    node("a"),  # an admin's RESUME lifted the label
    node("a", drained=True, reason="admin: rack 7"),
    node("a", reason="Action:Reboot", states=("IDLE", "FAIL")),
    node("a", reason="bad dimm", states=("DOWN",)),
    replace(node("a"), reservation=MAINT1),
    node("a", states=("IDLE", "MAINTENANCE", "RESERVED")),  # how Slurm shows our own MAINT reservation
]


@pytest.mark.parametrize("held", [locked(n) for n in LOCKED_VARIANTS])
def test_a_locked_node_stays_locked_whatever_its_label_until_a_holder_passes_it(held):
    for reason in (WAIT, CHECK, FAIL_REASON, OFF):
        for may_release in (True, False):
            out = plan(doc({"a": reason}), held, may_release=may_release)
            assert out.nodes == {"a"} and not out.changed, (reason, may_release)
    assert plan(doc({"a": None}), held, may_release=False).nodes == {"a"}, "no release without the fence"
    passed = plan(doc({"a": None}), held, may_release=True)
    assert passed.nodes == set() and passed.removed == {"a"} and passed.added == set()


def test_without_may_release_nothing_is_removed_but_new_nodes_are_added():
    nodes = (locked(node("a", drained=True, reason=WAIT)), locked(node("c", partition="cpu")), node("b"))
    out = plan(doc({"a": None, "b": WAIT}), *nodes, may_release=False)
    assert out.nodes == {"a", "b", "c"} and out.added == {"b"} and out.removed == set()
    out = plan(doc({"a": None, "b": WAIT}), *nodes, may_release=True)
    assert out.nodes == {"b"} and out.added == {"b"} and out.removed == {"a", "c"}


def test_an_entry_off_the_contract_or_a_partial_document_leaves_a_node_as_it_is():
    for document_ in (doc({"a": OFF}), doc(complete=False), doc({"other": WAIT}, complete=False)):
        assert plan(document_, node("a")).nodes == set()
        out = plan(document_, locked(node("a")))
        assert out.nodes == {"a"} and not out.changed
    unknown = node("a", partition="nowhere")  # a complete document, a partition of no known group
    assert plan(doc(), unknown).nodes == set() and plan(doc(), locked(unknown)).nodes == {"a"}


def test_an_unlisted_node_of_a_complete_document_is_locked_only_in_an_isolating_partition():
    new, opted_out = node("a", partition="dev"), node("b", partition="cpu")
    assert wanted("a", new, doc(), PARTITIONS) == AWAITING
    assert wanted("b", opted_out, doc(), PARTITIONS) == ""
    out = plan(doc(), new, opted_out)
    assert out.nodes == out.added == {"a"}
    out = plan(doc(), locked(new), locked(opted_out))
    assert out.nodes == {"a"} and out.removed == {"b"}
    assert plan(doc(), locked(new), locked(opted_out), may_release=False).nodes == {"a", "b"}
    assert plan(doc(isolating_groups=()), new).nodes == set(), "no group isolates: no new node is locked"


def test_a_node_the_boot_gate_marked_is_locked_unless_its_group_does_not_isolate():
    marked = ("a", "b", "c", "d")
    nodes = (node("a", states=("UNKNOWN",)), node("b", partition="cpu"), node("c", partition="nowhere"), node("d"))
    for document_ in (doc(), doc(complete=False), doc({"other": WAIT}, complete=False)):
        assert plan(document_, *nodes, marked=marked).added == {"a", "c", "d"}, "a partial document too"
        assert wanted("a", nodes[0], document_, PARTITIONS, marked=True) == AWAITING
    assert plan(doc(complete=False), *nodes, marked=()).added == set(), "unmarked: a partial document says nothing"
    listed = doc({"d": None, "a": OFF})
    assert plan(listed, *nodes, marked=marked).added == {"c"}, "the document's own word wins for a listed node"


def test_a_node_released_by_hand_is_left_alone_until_its_desired_state_changes():
    a = node("a", drained=True, reason=WAIT)
    # The bridge left {a, b} locked; an admin took a out of the reservation.
    first = plan(doc({"a": WAIT, "b": WAIT}), a, locked(node("b")), written=frozenset({"a", "b"}))
    assert first.newly_released == {"a"} and first.released == {"a": WAIT}
    assert first.nodes == {"b"} and first.added == set() and not first.changed, "never fought over"
    # Next passes: still released while the controller wants the same for it.
    for reason in (WAIT, OFF):
        again = plan(doc({"a": reason, "b": WAIT}), a, locked(node("b")), written=first.nodes, released=first.released)
        assert again.released == {"a": WAIT} and again.newly_released == set() and again.nodes == {"b"}
    # A new desired state (its check starts): locked again, no longer released.
    moved = plan(doc({"a": CHECK, "b": WAIT}), a, locked(node("b")), written=first.nodes, released=first.released)
    assert moved.added == {"a"} and moved.released == {} and moved.newly_released == set()
    # The controller passes it: dropped from released, nothing to lock.
    passed = plan(doc({"a": None, "b": WAIT}), a, locked(node("b")), written=first.nodes, released=first.released)
    assert passed.released == {} and passed.nodes == {"b"} and not passed.changed
    # Someone locks it again by hand: no longer released.
    relocked = plan(doc({"a": WAIT}), locked(a), written=frozenset(), released={"a": WAIT})
    assert relocked.released == {} and relocked.nodes == {"a"}


def test_a_node_taken_out_of_the_lock_that_would_not_be_locked_is_no_release():
    out = plan(doc({"a": None, "b": OFF}), node("a"), node("b"), written=frozenset({"a", "b", "gone"}))
    assert out.newly_released == set() and out.released == {} and out.nodes == set()


def test_a_bridge_that_never_wrote_the_lock_infers_no_release_by_hand():
    out = plan(doc({"a": WAIT}), node("a", drained=True, reason=WAIT), written=None)
    assert out.newly_released == set() and out.released == {} and out.added == {"a"}
    out = plan(doc({"a": WAIT}), node("a", drained=True, reason=WAIT), written=frozenset())
    assert out.added == {"a"}, "written but never holding it: no release either"


STATES = st.sampled_from([node("x"), node("x", drained=True, reason=WAIT), *NOT_UP, *CLAIMED])
REASONS = st.sampled_from([None, WAIT, CHECK, OFF, "unlisted"])


@settings(max_examples=300, deadline=None)
@given(
    cluster=st.dictionaries(
        st.sampled_from("abcdef"),
        st.tuples(STATES, st.booleans(), REASONS, st.sampled_from(["dev", "cpu", "nowhere"])),
        max_size=6,
    ),
    complete=st.booleans(),
    may_release=st.booleans(),
    written=st.none() | st.frozensets(st.sampled_from("abcdefg")),
    released=st.dictionaries(st.sampled_from("abcdefg"), st.sampled_from([WAIT, CHECK, AWAITING])),
    marked=st.frozensets(st.sampled_from("abcdefg")),
)
def test_the_lock_plan_never_takes_a_claim_nor_releases_without_leave(cluster, complete, may_release, written,
                                                                       released, marked):  # fmt: skip
    actual = {n: replace(s, name=n, locked=lk, partitions=(p,)) for n, (s, lk, _, p) in cluster.items()}
    document_ = doc({n: r for n, (_, _, r, _) in cluster.items() if r != "unlisted"}, complete=complete)
    out = plan_lock(document_, actual, PARTITIONS, written, released, may_release, marked)
    current = {n for n, s in actual.items() if s.locked}
    assert out.nodes == (current | out.added) - out.removed
    assert not out.added & current and out.removed <= current
    assert all(actual[n].lockable and n not in out.released for n in out.added)
    assert may_release or not out.removed
    for name in out.removed:
        assert wanted(name, actual[name], document_, PARTITIONS, name in marked) == ""
    assert set(out.released) <= set(actual) - current and out.newly_released <= set(out.released)
    if written is None:
        assert out.newly_released == set()


# ---------------------------------------------------------------------- who may be locked


@pytest.mark.parametrize(
    ("n", "claim", "not_up", "lockable"),
    [
        (node(), None, False, True),
        (node(drained=True, reason=WAIT), None, False, True),
        (node(states=("IDLE", "RESERVED")), None, False, True),  # RESERVED is use: another reservation is read apart
        (node(states=("IDLE", "MAINTENANCE")), "MAINTENANCE", False, False),
        (locked(node(states=("IDLE", "MAINTENANCE", "RESERVED"))), None, False, True),  # ours, when we hold it
        (locked(node(states=("IDLE", "MAINT"))), "MAINT", False, False),
        (replace(node(), reservation=MAINT1), MAINT1, False, False),
        (replace(locked(node()), reservation=MAINT1), MAINT1, False, False),
        (node(states=("DOWN",)), "DOWN", True, True),
        (node(reason="Not responding", states=("DOWN", "NOT_RESPONDING")), "DOWN+NOT_RESPONDING: Not responding",
         True, True),
        (node(states=("UNKNOWN", "NOT_RESPONDING")), "UNKNOWN+NOT_RESPONDING", True, True),
        (node(states=("FUTURE",)), "FUTURE", True, True),
        (node(states=("IDLE", "CLOUD")), "CLOUD", True, True),
        (node(states=("IDLE", "POWERED_DOWN")), "POWERED_DOWN", True, True),
        (locked(node(states=("DOWN", "MAINTENANCE", "RESERVED"))), "DOWN", True, True),
        (node(states=("DOWN", "MAINTENANCE")), "DOWN+MAINTENANCE", False, False),
        (node(reason=WAIT, states=("DOWN",)), f"DOWN: {WAIT}", True, True),  # an owned reason on a DOWN node
        (node(drained=True, reason=CHECK, states=("DOWN", "DRAIN", "NOT_RESPONDING")),
         f"DOWN+NOT_RESPONDING: {CHECK}", True, True),
        (node(reason="bad dimm", states=("DOWN",)), "DOWN: bad dimm", False, False),
        (node(reason="not responding", states=("DOWN",)), "DOWN: not responding", False, False),
        (node(drained=True, states=("DOWN", "DRAIN")), "DOWN", False, False),  # a drain with no reason: not ours
        (node(drained=True, reason="admin", states=("DOWN", "DRAIN")), "DOWN: admin", False, False),
        (node(reason="Action:Reboot", states=("IDLE", "FAIL")), "FAIL: Action:Reboot", False, False),
        (node(states=("DOWN", "FAIL")), "DOWN+FAIL", False, False),
        (node(states=("IDLE", "POWERING_UP")), "POWERING_UP", False, False),
        (node(states=("DOWN", "REBOOT_REQUESTED")), "DOWN+REBOOT_REQUESTED", False, False),
        (replace(node(states=("FUTURE",)), reservation="reservation team"), "reservation team", False, False),
        (node(drained=True, reason="admin: rack 7"), "admin: rack 7", False, False),
        (node(reason="maintenance window"), "maintenance window", False, False),
    ],
)  # fmt: skip
def test_claim_not_up_and_lockable(n, claim, not_up, lockable):
    assert (n.claim, n.not_up, n.lockable) == (claim, not_up, lockable)


# ---------------------------------------------------------------------- hostlist


def expand(expression):
    """Slurm's reading of a hostlist of `name` and `prefix[a-b,c]` parts (no padding: none is written)."""
    names = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", expression):
        bracket = re.fullmatch(r"(.*)\[(.*)\]", part)
        if not bracket:
            names.append(part)
            continue
        for run in bracket[2].split(","):
            first, _, last = run.partition("-")
            assert str(int(first)) == first and (not last or str(int(last)) == last), "no leading zero in a range"
            names += [f"{bracket[1]}{i}" for i in range(int(first), int(last or first) + 1)]
    return names


def test_expand_reads_what_slurm_reads():
    assert expand("a,ip-10-0-0-[1-3,7],n0[1-2],b") == [
        "a", "ip-10-0-0-1", "ip-10-0-0-2", "ip-10-0-0-3", "ip-10-0-0-7", "n01", "n02", "b"]  # fmt: skip


def test_hostlist_compresses_runs_of_numbered_names():
    assert hostlist(["ip-10-0-0-3", "ip-10-0-0-1", "ip-10-0-0-7", "ip-10-0-0-2"]) == "ip-10-0-0-[1-3,7]"
    assert hostlist(["ip-10-0-0-1", "ip-10-0-0-1"]) == "ip-10-0-0-1"
    assert hostlist(["ip-10-0-0-9", "ip-10-0-0-10", "ip-10-0-0-11"]) == "ip-10-0-0-[9-11]"
    assert hostlist([]) == ""


@pytest.mark.parametrize(
    "names",
    [
        ["node", "gpu-a", "gpu-b"],  # no trailing number
        ["n01", "n02", "n03", "n1"],  # a leading zero: n01 is not n1
        ["n0", "n00", "n000", "n10", "n010", "n100"],
        ["ip-10-0-0-0", "ip-10-0-0-1", "ip-10-0-0-2"],  # a trailing 0 is no number without a leading zero
        ["a1b2", "a1b3", "a2b2"],
        ["x.1", "x.2", "x-1", "x_1"],
    ],
)
def test_hostlist_keeps_odd_names_exact(names):
    assert sorted(expand(hostlist(names))) == sorted(set(names))


HYPERPOD_NAME = st.builds(lambda a, b, c: f"ip-10-{a}-{b}-{c}", *(st.integers(0, 255) for _ in range(3)))
ODD_NAME = st.sampled_from(["node", "n01", "n1", "n001", "n10", "gpu-a", "gpu-a1", "gpu-a01", "x0", "a-0", "n"])


@given(st.lists(HYPERPOD_NAME | ODD_NAME, max_size=60))
def test_hostlist_expands_back_to_exactly_its_names(names):
    out = expand(hostlist(names))
    assert sorted(out) == sorted(set(names)) and len(out) == len(set(out))


@given(st.lists(st.builds(lambda b, c: f"ip-10-3-{b}-{c}", st.integers(0, 3), st.integers(0, 255)), max_size=300))
def test_hostlist_of_one_subnet_expands_back(names):
    assert sorted(expand(hostlist(names))) == sorted(set(names))


def test_ten_thousand_hyperpod_names_fit_one_argument():
    limit = 128 * 1024 - len("Nodes=") - 1  # Linux's MAX_ARG_STRLEN counts the NUL
    every_other = [f"ip-10-7-{i // 128}-{2 * (i % 128) + 1}" for i in range(10_000)]  # no two in a run
    scattered = [f"ip-10-7-{i // 256}-{i % 256}" for i in random.Random(7).sample(range(65_536), 10_000)]
    contiguous = [f"ip-10-7-{i // 250}-{i % 250 + 1}" for i in range(10_000)]
    for names in (every_other, scattered, contiguous):
        assert len(set(names)) == 10_000
        assert len(hostlist(names)) < limit
    assert sorted(expand(hostlist(scattered))) == sorted(scattered)


# ---------------------------------------------------------------------- Scontrol.set_lock and the reservation


RESERVATION = (
    "ReservationName=hpdhc-c StartTime=2026-12-05T01:31:26 EndTime=2027-12-05T01:31:26 Duration=365-00:00:00 "
    "Nodes=ip-10-0-0-[1-2] NodeCnt=2 CoreCnt=2 Features=(null) PartitionName=(null) "
    "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=2 Users=root Groups=(null) Accounts=(null) Licenses=(null) "
    "State=ACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
)


@pytest.fixture
def scontrol(tmp_path):
    """An `scontrol` that logs its arguments, lists $RESERVED and expands one hostlist."""
    calls = tmp_path / "calls"
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        'case "$1 $2" in\n'
        '  "-o show") printf "%s" "$RESERVED" ;;\n'
        '  "show hostnames") printf "ip-10-0-0-1\\nip-10-0-0-2\\n" ;;\n'
        '  "create reservation"|"update ReservationName=hpdhc-c"|"delete ReservationName=hpdhc-c")'
        ' [ -z "$FAIL" ] || { echo "$FAIL" >&2; exit 1; } ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def ran():
        return calls.read_text().splitlines() if calls.exists() else []

    return Scontrol(str(script)), ran


NODES = ["ip-10-0-0-7", "ip-10-0-0-2", "ip-10-0-0-1", "ip-10-0-0-3"]


def test_the_first_node_creates_the_lock(scontrol):
    slurm, ran = scontrol
    slurm.set_lock(LOCK, NODES, None)
    assert ran() == ["create reservation ReservationName=hpdhc-c Nodes=ip-10-0-0-[1-3,7] StartTime=now "
                     "Duration=infinite Users=root Flags=MAINT,IGNORE_JOBS"]  # fmt: skip


def test_a_lock_is_replaced_whole_and_renewed_only_when_its_end_is_near(scontrol):
    slurm, ran = scontrol
    far = time.time() + LOCK_RENEW_S + 3600
    for ends_at in (None, far):
        slurm.set_lock(LOCK, NODES, Lock(LOCK, frozenset({"ip-10-0-0-1"}), ends_at))
    assert ran() == ["update ReservationName=hpdhc-c Nodes=ip-10-0-0-[1-3,7]"] * 2
    before = time.time()
    slurm.set_lock(LOCK, ["ip-10-0-0-1"], Lock(LOCK, frozenset(NODES), time.time() + LOCK_RENEW_S - 3600))
    *_, renewed = ran()
    command, _, end = renewed.partition(" EndTime=")
    assert command == "update ReservationName=hpdhc-c Nodes=ip-10-0-0-1"
    assert (
        before + LOCK_YEAR_S - 2
        <= datetime.strptime(end, "%Y-%m-%dT%H:%M:%S").timestamp()
        <= time.time() + (LOCK_YEAR_S)
    ), "a year from now, in slurmctld's local time"


def test_the_last_node_out_deletes_the_lock_and_no_lock_no_node_is_no_call(scontrol):
    slurm, ran = scontrol
    slurm.set_lock(LOCK, [], None)
    assert ran() == []
    slurm.set_lock(LOCK, [], Lock(LOCK, frozenset({"a"})))
    assert ran() == ["delete ReservationName=hpdhc-c"]


@pytest.mark.parametrize(
    ("name", "nodes"),
    [(LOCK, ["ip-10-0-0-1", "a b"]), (LOCK, ["-a"]), (LOCK, ["a,b"]), (LOCK, ["a[1-2]"]), ("hpdhc c", ["a"]),
     ("", ["a"]), (LOCK, ["a\nb"])],
)  # fmt: skip
def test_a_bad_name_is_refused_before_any_call(scontrol, name, nodes):
    slurm, ran = scontrol
    for current in (None, Lock(LOCK, frozenset({"a"}))):
        with pytest.raises(SlurmError, match="refused"):
            slurm.set_lock(name, nodes, current)
    assert ran() == []


def test_a_refused_or_unreachable_lock_write_raises_its_kind(scontrol, monkeypatch):
    slurm, _ = scontrol
    monkeypatch.setenv("FAIL", "Error updating the reservation: Requested nodes are busy")
    with pytest.raises(SlurmError) as err:
        slurm.set_lock(LOCK, ["a"], None)
    assert not isinstance(err.value, SlurmUnreachable)
    monkeypatch.setenv("FAIL", "Unable to contact slurm controller (connect failure)")
    with pytest.raises(SlurmUnreachable):
        slurm.set_lock(LOCK, ["a"], Lock(LOCK, frozenset({"b"})))


def test_the_lock_is_read_with_its_end(scontrol, monkeypatch):
    slurm, ran = scontrol
    monkeypatch.setenv("RESERVED", RESERVATION)
    assert slurm.lock(LOCK) == Lock(LOCK, frozenset({"ip-10-0-0-1", "ip-10-0-0-2"}),
                                    datetime(2027, 12, 5, 1, 31, 26).timestamp())  # fmt: skip
    assert slurm.lock("hpdhc-other") is None
    assert ran()[:2] == ["-o show reservation", "show hostnames ip-10-0-0-[1-2]"]


def test_reservations_are_read_with_their_end():
    (lock,) = parse_reservations(RESERVATION)
    assert lock.ends_at == datetime(2027, 12, 5, 1, 31, 26).timestamp()
    assert lock.flags == ("MAINT", "IGNORE_JOBS", "SPEC_NODES") and lock.active
    for end in ("EndTime=(null) ", "EndTime=Unknown ", ""):
        (odd,) = parse_reservations(RESERVATION.replace("EndTime=2027-12-05T01:31:26 ", end))
        assert odd.ends_at is None and odd.name == LOCK
    (empty,) = parse_reservations(RESERVATION.replace("Nodes=ip-10-0-0-[1-2]", "Nodes=(null)"))
    assert empty.nodes == ""


# ---------------------------------------------------------------------- the fence a document carries


def test_a_document_without_a_fence_is_held():
    for extra in ({}, {"holder": False}, {"fence": None}):
        read = read_document("c", document(entry("a", WAIT)) | extra, [])
        assert (read.fence, read.holder) == (0, True)


@pytest.mark.parametrize(
    ("holder", "expected"),
    [(True, True), (False, False), ("true", False), (1, False), (None, False), ("missing", False)],
)
def test_with_a_fence_only_holder_true_holds(holder, expected):
    answer = document(entry("a", WAIT)) | {"fence": 3} | ({} if holder == "missing" else {"holder": holder})
    read = read_document("c", answer, [])
    assert (read.fence, read.holder) == (3, expected)


@pytest.mark.parametrize("fence", [-1, "3", True, float("nan"), float("inf"), [3], {}])
def test_a_fence_that_is_no_count_is_malformed(fence):
    with pytest.raises(Malformed, match="fence"):
        read_document("c", document(entry("a", WAIT)) | {"fence": fence, "holder": True}, [])
    kept = replace(doc(), as_of=1.0, digest="0123456789abcdef")
    with pytest.raises(Malformed, match="fence"):
        still_holds("c", {"cluster": "c", "unchanged": True, "digest": kept.digest, "fence": fence}, kept)


def test_an_unchanged_answer_carries_its_own_fence_and_holder():
    kept = replace(doc({"a": WAIT}), as_of=1.0, digest="0123456789abcdef", fence=3, holder=True)
    unchanged = {"cluster": "c", "unchanged": True, "digest": kept.digest}
    held = still_holds("c", unchanged | {"fence": 4, "holder": True}, kept)
    assert (held.fence, held.holder, held.wanted) == (4, True, kept.wanted)
    not_held = still_holds("c", unchanged | {"fence": 5, "holder": "yes"}, kept)
    assert (not_held.fence, not_held.holder) == (5, False)
    older = still_holds("c", unchanged, kept)  # a controller older than fencing
    assert (older.fence, older.holder) == (0, True)
    assert still_holds("c", document(entry("a", WAIT)), kept) is None


# ---------------------------------------------------------------------- Memory


def test_memory_round_trips_through_its_state_file(tmp_path):
    path = tmp_path / "c.json"
    kept = Document({"a": want(WAIT), "b": want(None), "c": None}, frozenset({"p5-workers"}), True, 7.0,
                    keys={"a": "lid-a"}, pending=frozenset({"a"}), as_of=5.0, digest="0123456789abcdef", fence=4,
                    holder=False)  # fmt: skip
    memory = Memory(path=path, locked=frozenset({"a", "z"}), released={"r": CHECK}, fence=2, bridge="host-1:abc")
    memory.keep(kept)
    assert memory.fence == 4 and not list(tmp_path.glob("*.tmp"))
    loaded = Memory.load(path)
    assert (loaded.document, loaded.locked, loaded.released, loaded.fence, loaded.bridge, loaded.path) == (
        kept, frozenset({"a", "z"}), {"r": CHECK}, 4, "host-1:abc", path)  # fmt: skip
    never = Memory(path=tmp_path / "never.json", bridge="host-2:def")
    never.keep()
    again = Memory.load(never.path)
    assert (again.document, again.locked, again.released, again.fence) == (None, None, {}, 0)
    assert again.bridge == "host-2:def"


def test_memory_loads_the_bare_document_an_older_bridge_kept(tmp_path):
    path = tmp_path / "c.json"
    kept = doc({"a": WAIT, "b": None})
    old = kept.to_json()
    for key in ("keys", "pending", "as_of", "digest", "fence", "holder"):
        del old[key]  # a bridge older than these kept none of them
    path.write_text(json.dumps(old))
    loaded = Memory.load(path)
    assert loaded.document == kept and loaded.locked is None and loaded.released == {} and loaded.fence == 0
    assert re.fullmatch(r"[!-~]+:[0-9a-f]{12}", loaded.bridge)


@pytest.mark.parametrize(
    "text",
    ["{not json", "", "null", "5", '"x"', "[]", '{"document": {"wanted": 5}}', '{"fence": "x"}',
     '{"document": {"wanted": {}, "isolating_groups": [], "complete": true}}', '{"released": [1]}'],
)  # fmt: skip
def test_an_unreadable_state_file_starts_empty(tmp_path, text):
    path = tmp_path / "c.json"
    path.write_text(text)
    loaded = Memory.load(path)
    assert (loaded.document, loaded.locked, loaded.released, loaded.fence, loaded.path) == (None, None, {}, 0, path)


def test_a_bridge_identity_that_is_not_one_is_replaced(tmp_path):
    path = tmp_path / "c.json"
    for bridge in ("has space", "", 5, "x" * 201, "é:1"):
        path.write_text(json.dumps({"bridge": bridge, "document": None, "locked": [], "released": {}, "fence": 1}))
        loaded = Memory.load(path)
        assert loaded.bridge != bridge and loaded.locked == frozenset() and loaded.fence == 1


def test_a_new_identity_is_host_and_install(monkeypatch):
    first, second = new_identity(), new_identity()
    assert first != second and all(re.fullmatch(r"[!-~]{1,150}:[0-9a-f]{12}", i) for i in (first, second))
    monkeypatch.setattr(document_module.socket, "gethostname", lambda: "a b\tc\u00e9")
    assert re.fullmatch(r"abc:[0-9a-f]{12}", new_identity())
    monkeypatch.setattr(document_module.socket, "gethostname", lambda: "\u00e9\u00e9")
    assert new_identity().startswith("host:")


def test_status_says_only_what_is_known():
    memory = Memory(bridge="h:1")
    assert memory.status() == {"bridge": "h:1"}
    memory.synced_at, memory.slurmctld, memory.errors = 1700000000.12345, "refused", 0
    assert memory.status() == {"bridge": "h:1", "synced_at": "1700000000.123", "slurmctld": "refused", "errors": "0"}
    memory.errors, memory.take_over = 5_000_000, True
    assert memory.status()["errors"] == "1000000" and memory.status()["take_over"] == "1"


def test_keep_clears_take_over_once_held_and_keeps_the_highest_fence():
    memory = Memory(take_over=True, fence=5)
    memory.keep(doc(fence=7, holder=False))
    assert memory.take_over and memory.fence == 7, "not held yet: still asking"
    memory.keep()
    assert memory.take_over
    memory.keep(doc(fence=3, holder=True))
    assert not memory.take_over and memory.fence == 7, "the fence never goes down"
    assert "take_over" not in memory.status()


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [(("dev",), True), (("cpu", "dev"), True), (("cpu",), False), (("cpu", "nowhere"), None), (("nowhere",), None),
     ((), None)],
)  # fmt: skip
def test_a_node_is_isolated_when_any_of_its_groups_isolates(partitions, expected):
    assert isolating(partitions, PARTITIONS, frozenset({"p5-workers"})) is expected


# ---------------------------------------------------------------------- one pass: the lock before the labels


class LockSlurm(FakeSlurm):
    """A FakeSlurm with a lock to start from, every write in order, and a lock write that can fail."""

    def __init__(self, *nodes, lock=None, lock_fails=None):
        super().__init__(*nodes)
        self.calls = []
        self.lock_fails = lock_fails
        self.lock_writes = []
        if lock is not None:
            self.lock_name, self.lock_nodes = LOCK, frozenset(lock)

    def set_lock(self, name, nodes, current):
        self.calls.append(("lock", tuple(sorted(nodes))))
        if self.lock_fails is not None:
            raise self.lock_fails
        super().set_lock(name, nodes, current)

    def update(self, nodes, args):
        self.calls.append(("update", tuple(nodes), args[0]))
        super().update(nodes, args)

    def resumes(self):
        return [c for c in self.calls if c[0] == "update" and c[2] == "State=RESUME"]


def waiting(name):
    return node(name, drained=True, reason=AWAITING, features=("gpu", IN_PROGRESS))


def passes_a_and_wants_b(**fence):
    return FakeController(document(entry("a", None, PASSED), entry("b", WAIT)) | fence)


def test_a_bridge_not_holding_the_fence_only_adds_to_the_lock():
    slurm = LockSlurm(waiting("a"), node("b"), lock={"a"})
    memory = Memory(locked=frozenset({"a"}))
    result = sync_once("c", passes_a_and_wants_b(fence=3, holder=False), slurm, PARTITIONS, memory)
    assert slurm.lock_writes == [(LOCK, ("a", "b"))] and result.lock.removed == set()
    assert slurm.resumes() == [] and slurm.state["a"].drained, "nothing released, nothing resumed"
    assert slurm.state["b"].reason == WAIT
    assert memory.locked == slurm.lock_nodes == {"a", "b"} and memory.fence == 3


def test_the_holder_releases_and_resumes_only_after_the_lock_write():
    slurm = LockSlurm(waiting("a"), node("b"), lock={"a"})
    memory = Memory(locked=frozenset({"a"}))
    result = sync_once("c", passes_a_and_wants_b(fence=3, holder=True), slurm, PARTITIONS, memory)
    assert result.errors == [] and result.lock.removed == {"a"} and result.lock.added == {"b"}
    assert slurm.lock_writes == [(LOCK, ("b",))]
    assert slurm.calls[0] == ("lock", ("b",)) and slurm.resumes() == [("update", ("a",), "State=RESUME")]
    assert slurm.calls.index(slurm.resumes()[0]) > 0, "unlocked, then resumed"
    assert not slurm.state["a"].drained and slurm.state["b"].drained
    assert memory.locked == slurm.lock_nodes == {"b"} and memory.slurmctld == "ok" and memory.synced_at is not None


def test_a_holder_document_below_the_fence_seen_only_adds():
    slurm = LockSlurm(waiting("a"), node("b"), lock={"a"})
    memory = Memory(locked=frozenset({"a"}), fence=5)
    result = sync_once("c", passes_a_and_wants_b(fence=3, holder=True), slurm, PARTITIONS, memory)
    assert slurm.lock_nodes == {"a", "b"} and slurm.resumes() == [] and memory.fence == 5
    assert any("below" in e for e in result.errors)


def test_a_refused_lock_write_resumes_nothing_and_still_drains():
    resumed_by_admin = node("p", features=("gpu", IN_PROGRESS))  # still locked: not relabelled Passed either
    slurm = LockSlurm(waiting("a"), node("b"), resumed_by_admin, lock={"a", "p"},
                      lock_fails=SlurmError("scontrol update: refused"))  # fmt: skip
    memory = Memory(locked=frozenset({"a", "p"}))
    controller = FakeController(document(entry("a", None, PASSED), entry("b", WAIT), entry("p", None, PASSED)))
    result = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert slurm.calls == [("lock", ("b",)), ("update", ("b",), "State=DRAIN")], "only the drain"
    assert slurm.state["a"].drained and slurm.state["b"].reason == WAIT and slurm.state["p"] == resumed_by_admin
    assert result.refused == 1 and result.writes == 1 and "nothing is resumed" in result.errors[0]
    assert memory.slurmctld == "ok", "another write went through"
    assert memory.synced_at is None and memory.locked == slurm.lock_nodes == {"a", "p"}


def test_a_refused_lock_write_alone_is_slurmctld_refused():
    slurm = LockSlurm(waiting("a"), lock={"a"}, lock_fails=SlurmError("scontrol update: refused"))
    memory = Memory(locked=frozenset({"a"}))
    result = sync_once("c", FakeController(document(entry("a", None, PASSED))), slurm, PARTITIONS, memory)
    assert slurm.calls == [("lock", ())] and result.writes == 0 and result.refused == 1
    assert memory.slurmctld == "refused" and memory.synced_at is None and memory.locked == {"a"}
    assert memory.status()["slurmctld"] == "refused"


def test_slurmctld_gone_at_the_lock_write_stops_the_pass():
    gone = SlurmUnreachable("scontrol update: Unable to contact slurm controller")
    slurm = LockSlurm(waiting("a"), node("b"), lock={"a"}, lock_fails=gone)
    memory = Memory(locked=frozenset({"a"}))
    result = sync_once("c", passes_a_and_wants_b(), slurm, PARTITIONS, memory)
    assert slurm.calls == [("lock", ("b",))] and slurm.updates == [], "no label either"
    assert result.failure == EXIT_SLURM and "the pass stops here" in result.errors[-1]
    assert memory.slurmctld == "unreachable" and memory.synced_at is None and memory.locked == {"a"}
    assert result.reported == []


def test_memory_holds_the_lock_as_the_pass_left_it():
    slurm = LockSlurm(node("a"), node("b"), node("c", partition="cpu"), node("new"))
    memory = Memory()
    controller = FakeController(document(entry("a", WAIT), entry("b", CHECK)))
    sync_once("c", controller, slurm, PARTITIONS, memory)
    assert memory.locked == slurm.lock_nodes == {"a", "b", "new"} and memory.synced_at is not None
    slurm.calls.clear()
    again = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert slurm.calls == [] and not again.lock.changed and memory.locked == {"a", "b", "new"}


def test_a_reservation_deleted_by_hand_releases_every_node_it_held():
    slurm = LockSlurm(*(node(n, drained=True, reason=WAIT) for n in "ab"), node("c"))  # the lock is gone
    memory = Memory(locked=frozenset({"a", "b"}))
    controller = FakeController(document(entry("a", WAIT), entry("b", WAIT), entry("c", WAIT)))
    result = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert result.lock.newly_released == {"a", "b"} and memory.released == {"a": WAIT, "b": WAIT}
    assert any(f"reservation {LOCK} is gone" in e for e in result.errors)
    assert slurm.lock_writes == [(LOCK, ("c",))], "nothing it held is locked again; a new node is"
    assert result.held == {n: "released from the controller's lock by hand" for n in "ab"}
    assert memory.locked == {"c"}
    second = sync_once("c", controller, slurm, PARTITIONS, memory)
    assert second.lock.newly_released == set() and set(second.lock.released) == {"a", "b"}
    assert slurm.lock_nodes == {"c"} and not any(f"{LOCK} is gone" in e for e in second.errors)
    controller.document = document(entry("a", CHECK), entry("b", WAIT), entry("c", WAIT))  # a's check starts
    sync_once("c", controller, slurm, PARTITIONS, memory)
    assert slurm.lock_nodes == {"a", "c"} and memory.released == {"b": WAIT}


class EndingLock(LockSlurm):
    """The lock as Scontrol reads it: with the end Slurm would give it."""

    ends_at = None

    def lock(self, name):
        found = super().lock(name)
        return None if found is None else replace(found, ends_at=self.ends_at)


def test_a_lock_near_its_end_is_renewed_even_when_its_nodes_stay_the_same():
    """Slurm ends the reservation 365 days after it was created or renewed; a node set that does not change for
    305 days (a failed node waiting for its replacement) is written again anyway, or the reservation would lapse
    and the next pass treat every node it held as released by hand."""
    slurm = EndingLock(waiting("a"), lock={"a"})
    slurm.ends_at = time.time() + 86400  # a day left
    sync_once("c", FakeController(document(entry("a", AWAITING))), slurm, PARTITIONS, Memory(locked=frozenset("a")))
    assert slurm.lock_writes == [(LOCK, ("a",))], "the unchanged node list is written again, renewing its end"
