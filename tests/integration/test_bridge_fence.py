"""One writer per cluster, through the real Api handler: the Slurm bridge's fencing token on the state route.

Every pull says who the bridge is (`bridge`); every answer, whole or `unchanged`, carries the cluster's `fence` and
whether the asking bridge holds it (`holder`). A second bridge is told it does not, until the holder is silent
past the lease or the second one was started with `--take-over`; a take-over is an audit line and, when it took
the fence from a holder, a `bridge-take-over` notification. The write is conditional on the lease read: of two
pulls racing for it, one wins. The decision itself: tests/unit/test_bridge_fence.py.
"""

from __future__ import annotations

import logging

import pytest

from hyperpod_dhc.deephealth.domain.bridge_fence import LEASE_S, BridgeLease
from hyperpod_dhc.deephealth.domain.slurm import SYNC_INTERVAL_S
from tests.fakes.hyperpod import GroupSpec
from tests.harness.engine import TABLE_NAME
from tests.integration.test_slurm_routes import INSTANCE_ROLE, STATE

OLD, NEW = "ip-10-1-0-5:6f1c0a9e", "ip-10-1-0-9:a2d4b7c1"
CONFIG = {"clusters": ["demo"]}
SERVICE_LOGGER = "hyperpod-dhc"


@pytest.fixture
def demo(harness, fake):
    """A cluster with no node, its (empty) listing recorded by Intake on the cluster's creation event; Reconcile
    does not run: these tests are about the registry item and the route."""
    fake.create_cluster("demo", [GroupSpec("gpu", count=0)])
    harness._next_reconcile = float("inf")
    harness.advance(SYNC_INTERVAL_S)  # the creation event is delivered
    assert harness.records("demo") == {}
    return harness


def pull(harness, bridge: str | None = None, **status: object) -> dict:
    query = {k: str(v) for k, v in {"bridge": bridge, **status}.items() if v is not None}
    code, answer = harness.api("GET", STATE, query=query, principal=INSTANCE_ROLE)
    assert code == 200, answer
    return answer


def fencing(answer: dict) -> tuple[int, bool]:
    return answer["fence"], answer["holder"]


def lease() -> BridgeLease:
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    return NodeTable(TABLE_NAME).registration("demo").lease


def take_overs(harness) -> list[dict]:
    return [m for m in harness.notifications() if m["attributes"]["kind"] == "bridge-take-over"]


def audit(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == SERVICE_LOGGER and r.getMessage() == "slurm bridge take-over"]


@pytest.mark.controller_config(CONFIG)
def test_the_first_bridge_holds_the_fence_and_a_second_is_told_it_does_not(demo, fake, caplog):
    caplog.set_level(logging.INFO, logger=SERVICE_LOGGER)
    assert fencing(pull(demo, OLD)) == (1, True)
    assert lease() == BridgeLease(OLD, 1, float(int(fake.clock.now())))
    (first,) = audit(caplog)  # the cluster's first bridge: audited, but nobody lost anything to notify
    assert (first.old_holder, first.new_holder, first.fence) == (None, OLD, 1)
    for _ in range(3):
        demo.advance(SYNC_INTERVAL_S)
        assert fencing(pull(demo, NEW)) == (1, False)  # the same fence, not the holder
        assert fencing(pull(demo, OLD)) == (1, True)
    assert lease().holder == OLD and len(audit(caplog)) == 1
    assert not take_overs(demo)


@pytest.mark.controller_config(CONFIG)
def test_take_over_moves_the_fence_notifies_and_audits(demo, caplog):
    caplog.set_level(logging.INFO, logger=SERVICE_LOGGER)
    assert fencing(pull(demo, OLD)) == (1, True)
    assert fencing(pull(demo, NEW, take_over=1)) == (2, True)
    assert fencing(pull(demo, OLD)) == (2, False)  # the old holder now only adds to the lock
    assert fencing(pull(demo, NEW)) == (2, True)
    assert fencing(pull(demo, NEW, take_over=1)) == (2, True)  # --take-over by the holder: nothing to take
    assert lease().holder == NEW and lease().fence == 2

    (note,) = take_overs(demo)
    assert note["attributes"]["cluster"] == "demo"
    assert OLD in str(note["message"]) and NEW in str(note["message"]) and "--take-over" in str(note["message"])
    line = audit(caplog)[-1]
    assert (line.cluster, line.old_holder, line.new_holder, line.fence) == ("demo", OLD, NEW, 2)
    assert line.why == "started with --take-over"


@pytest.mark.controller_config(CONFIG)
def test_a_holder_silent_past_the_lease_loses_the_fence_to_the_next_bridge(demo):
    assert fencing(pull(demo, OLD)) == (1, True)
    demo.advance(LEASE_S - 2 * SYNC_INTERVAL_S)
    assert fencing(pull(demo, NEW)) == (1, False)  # silent, but within its lease
    demo.advance(2 * SYNC_INTERVAL_S + 2)
    assert fencing(pull(demo, NEW)) == (2, True)
    assert fencing(pull(demo, OLD)) == (2, False)  # back from a pause: it does not take it back
    (note,) = take_overs(demo)
    assert "silent" in str(note["message"])


@pytest.mark.controller_config(CONFIG)
def test_a_live_holder_keeps_the_fence_however_long_it_runs(demo):
    """Its `bridge_seen_at` is refreshed about once a sync interval, so a second bridge never finds it expired."""
    assert fencing(pull(demo, OLD)) == (1, True)
    for _ in range(12):
        demo.advance(SYNC_INTERVAL_S)
        assert fencing(pull(demo, OLD)) == (1, True)
        assert fencing(pull(demo, NEW)) == (1, False)
    assert lease().holder == OLD


@pytest.mark.controller_config(CONFIG)
def test_of_two_pulls_racing_for_the_fence_one_wins(demo, fake, monkeypatch):
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    table = NodeTable(TABLE_NAME)
    assert fencing(pull(demo, OLD)) == (1, True)
    # Two pulls read the same lease; the first write wins, the second was decided on a stale read.
    read = table.registration("demo").lease
    now = fake.clock.now()
    assert table.write_bridge_lease("demo", read, BridgeLease(NEW, 2, now)) is True
    assert table.write_bridge_lease("demo", read, BridgeLease("third:0001", 2, now)) is False
    assert table.write_bridge_lease("demo", read, BridgeLease(OLD, 1, now)) is False  # a stale refresh, too
    assert lease() == BridgeLease(NEW, 2, float(int(now)))

    # Through the route: another pull takes the fence between this pull's read and its write.
    real = NodeTable.write_bridge_lease
    raced: list[bool] = []

    def beaten(self, cluster, read, new):
        if not raced:
            raced.append(real(self, cluster, read, BridgeLease("fast:0002", read.fence + 1, new.seen_at)))
        return real(self, cluster, read, new)

    monkeypatch.setattr(NodeTable, "write_bridge_lease", beaten)
    answer = pull(demo, OLD, take_over=1)
    assert raced == [True]
    assert fencing(answer) == (3, False)  # not the holder, and the fence as the winner left it
    assert lease().holder == "fast:0002"
    assert not take_overs(demo)  # the pull that lost took nothing over: nothing to say


@pytest.mark.controller_config(CONFIG)
def test_unchanged_answers_carry_the_fence_too(demo):
    whole = pull(demo, OLD)
    assert "unchanged" not in whole and fencing(whole) == (1, True)
    since = {"since": repr(whole["as_of"]), "digest": whole["digest"]}
    demo.advance(SYNC_INTERVAL_S)
    again = pull(demo, OLD, **since)
    assert again["unchanged"] is True and fencing(again) == (1, True)
    other = pull(demo, NEW, **since)
    assert other["unchanged"] is True and fencing(other) == (1, False)
    taken = pull(demo, NEW, take_over=1, **since)
    assert taken["unchanged"] is True and fencing(taken) == (2, True)


@pytest.mark.controller_config(CONFIG)
def test_a_bridge_that_does_not_say_who_it_is_never_holds_the_fence_and_writes_nothing(demo):
    assert fencing(pull(demo)) == (0, False)  # an older bridge
    assert fencing(pull(demo, take_over=1)) == (0, False)
    assert lease() == BridgeLease()
    assert fencing(pull(demo, OLD)) == (1, True)
    assert fencing(pull(demo, slurmctld="ok", errors=0)) == (1, False)
    assert lease().holder == OLD


@pytest.mark.controller_config(CONFIG)
@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"slurmctld": "down"}, "slurmctld"),
        ({"slurmctld": ""}, "slurmctld"),
        ({"bridge": "host name:1"}, "bridge"),
        ({"bridge": "x" * 201}, "bridge"),
        ({"errors": "-1"}, "errors"),
        ({"errors": "1000001"}, "errors"),
        ({"synced_at": "-5"}, "synced_at"),
        ({"synced_at": "soon"}, "synced_at"),
        ({"take_over": "2"}, "take_over"),
        ({"take_over": "yes"}, "take_over"),
    ],
)
def test_a_bad_status_parameter_gets_a_clear_4xx_and_changes_nothing(demo, query, named):
    code, answer = demo.api("GET", STATE, query={"bridge": OLD, **query}, principal=INSTANCE_ROLE)
    assert code == 422, answer
    assert [d["loc"] for d in answer["detail"]] == [["query", named]], answer
    assert lease() == BridgeLease()


@pytest.mark.controller_config(CONFIG)
def test_registering_the_cluster_keeps_the_bridges_fence(demo, fake):
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

    table = NodeTable(TABLE_NAME)
    assert fencing(pull(demo, OLD)) == (1, True)
    held = lease()
    table.register_cluster("demo", recorded_at=fake.clock.now())  # Reconcile recorded a whole listing
    registration = table.registration("demo")
    assert registration.lease == held and registration.recorded_at == float(int(fake.clock.now()))
    table.register_cluster("demo")  # and one without (the listing was not whole)
    assert table.registration("demo").lease == held and table.recorded_at("demo") is None
    assert fencing(pull(demo, NEW)) == (1, False)
