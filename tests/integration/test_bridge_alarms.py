"""The Slurm bridges' alarms, as synthesized, evaluated over what the real handlers print (tests/harness/alarms.py).

A bridge pulls the state every sync and says how its last pass went (`slurmctld`, `synced_at`); the Api counts the
fence holder's as metrics per cluster and stack-wide, Reconcile how long each holder has been silent. Here
`hyperpod-dhc:slurm-bridges` names cluster demo and has a `"*"` entry, so demo has its own alarms and every
cluster (other, named nowhere) is covered by the stack-wide ones. Time is the harness's virtual clock, EMF
timestamps included. The alarms' shape: tests/infra/test_operations.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hyperpod_dhc.deephealth.domain.bridge_fence import SILENT_S
from hyperpod_dhc.deephealth.domain.slurm import SYNC_INTERVAL_S
from hyperpod_dhc.infra.controller_config import SLURM_BRIDGES_KEY
from tests.fakes.hyperpod import GroupSpec
from tests.harness.alarms import ALARM, OK, alarm_state, emf_records, find_alarm, virtual_emf_timestamps
from tests.harness.engine import Harness
from tests.harness.synth import TWIN_BRIDGE_ROLE, synthesized_template
from tests.harness.template import ControllerTemplate
from tests.integration.test_slurm_routes import INSTANCE_ROLE

CONFIG = {"clusters": ["demo", "other"]}
PERIOD_S = 300  # the alarms' period
HOLDER, OTHER_BRIDGE = "ip-10-1-0-5:6f1c0a9e", "ip-10-1-0-9:a2d4b7c1"
STATUS = ("slurm-bridge-behind", "slurmctld-unreachable", "slurm-bridge-refused")


@pytest.fixture(scope="module")
def template() -> ControllerTemplate:
    return ControllerTemplate(
        synthesized_template({SLURM_BRIDGES_KEY: {"demo": [TWIN_BRIDGE_ROLE], "*": [TWIN_BRIDGE_ROLE]}})
    )


@pytest.fixture
def world(template, fake) -> Iterator[Harness]:
    for cluster in CONFIG["clusters"]:
        fake.create_cluster(cluster, [GroupSpec("gpu", count=0)])
    with Harness(template, fake, config=CONFIG) as h, virtual_emf_timestamps(fake.clock.now):
        yield h


class Alarms:
    """The states of the template's alarms over everything the functions printed so far."""

    def __init__(self, harness: Harness, capsys) -> None:
        self.harness, self.capsys = harness, capsys
        self.records: list[dict] = []

    def __call__(self, *names: str) -> dict[str, str]:
        self.records += emf_records(self.capsys.readouterr().out)
        now = self.harness.clock.now()
        return {n: alarm_state(find_alarm(self.harness.template.template, n), self.records, now) for n in names}


@pytest.fixture
def alarms(world, capsys) -> Alarms:
    return Alarms(world, capsys)


def sync(h: Harness, cluster: str, periods: float, bridge: str = HOLDER, **status: object) -> None:
    """The bridge's passes, one a sync, for `periods` alarm periods: each pulls the state saying how it went
    (`synced_at`: None, now; a number, that time; a callable, of now)."""
    for _ in range(round(periods * PERIOD_S / SYNC_INTERVAL_S)):
        h.advance(SYNC_INTERVAL_S)
        now = h.clock.now()
        query = {"bridge": bridge, "synced_at": now, **status}
        if callable(query["synced_at"]):
            query["synced_at"] = query["synced_at"](now)
        code, answer = h.api(
            "GET", f"/clusters/{cluster}/slurm", query={k: str(v) for k, v in query.items()}, principal=INSTANCE_ROLE
        )
        assert code == 200, answer


def every(cluster: str | None) -> tuple[str, ...]:
    return tuple(s if cluster is None else f"{s}-{cluster}" for s in STATUS)


# ---------------------------------------------------------------- the evaluator itself


def emf(at: float, name: str, value: float, **dimensions: str) -> dict:
    directive = {"Namespace": "HyperPodDHC", "Dimensions": [list(dimensions)], "Metrics": [{"Name": name}]}
    return {"_aws": {"Timestamp": int(at * 1000), "CloudWatchMetrics": [directive]}, name: [value], **dimensions}


def simple(missing: str, periods: int = 3, datapoints: int = 2) -> dict:
    return {
        "Metrics": [{"Id": "m1", "MetricStat": {"Metric": {"Namespace": "HyperPodDHC", "MetricName": "X",
                     "Dimensions": [{"Name": "service", "Value": "s"}]}, "Period": 300, "Stat": "Maximum"}}],
        "ComparisonOperator": "GreaterThanOrEqualToThreshold", "Threshold": 1, "EvaluationPeriods": periods,
        "DatapointsToAlarm": datapoints, "TreatMissingData": missing,
    }  # fmt: skip


def test_the_evaluator_buckets_whole_periods_matches_exact_dimensions_and_treats_missing_data():
    now = 3000.0  # periods [2100, 2400), [2400, 2700), [2700, 3000)
    one = [emf(2700, "X", 1, service="s")]
    assert alarm_state(simple("notBreaching"), one, now) == OK  # 1 of 3 breaching, 2 needed
    two = [*one, emf(2399, "X", 0, service="s"), emf(2100, "X", 5, service="s")]
    assert alarm_state(simple("notBreaching"), two, now) == ALARM  # the max of each period, oldest first: 5, none, 1
    assert alarm_state(simple("notBreaching"), [*two, emf(3000, "X", 9, service="s")], now) == ALARM
    assert alarm_state(simple("breaching"), one, now) == ALARM  # the missing ones count as breaching
    assert alarm_state(simple("missing"), [], now) == "INSUFFICIENT_DATA"
    assert alarm_state(simple("notBreaching"), [], now) == OK
    assert alarm_state(simple("ignore"), [], now, previous=ALARM) == ALARM
    others = [emf(2800, "X", 1, service="s", cluster="c"), emf(2800, "Y", 1, service="s"),
              emf(2800, "X", 1, service="t"), emf(1800, "X", 1, service="s")]  # fmt: skip
    assert alarm_state(simple("breaching", datapoints=1), others, now) == ALARM  # none of them counts: all missing
    assert alarm_state(simple("notBreaching", datapoints=1), others, now) == OK


# ---------------------------------------------------------------- the alarms, through the handlers


def test_a_healthy_bridge_leaves_every_bridge_alarm_ok(world, alarms):
    sync(world, "demo", 3, slurmctld="ok", errors=0)
    states = alarms(*every("demo"), *every(None), "slurm-bridge-silent-demo", "slurm-bridge-silent")
    assert set(states.values()) == {OK}, states


def test_slurmctld_unreachable_alarms_for_the_cluster_and_stack_wide(world, alarms):
    sync(world, "demo", 1, slurmctld="ok")
    assert set(alarms("slurmctld-unreachable-demo", "slurmctld-unreachable").values()) == {OK}
    synced = world.clock.now()
    sync(world, "demo", 2, slurmctld="unreachable", synced_at=synced, errors=1)
    states = alarms("slurmctld-unreachable-demo", "slurmctld-unreachable", "slurm-bridge-refused-demo")
    assert states == {"slurmctld-unreachable-demo": ALARM, "slurmctld-unreachable": ALARM,
                      "slurm-bridge-refused-demo": OK}  # fmt: skip
    sync(world, "demo", 2, slurmctld="ok")  # slurmctld is back
    assert set(alarms("slurmctld-unreachable-demo", "slurmctld-unreachable").values()) == {OK}


def test_every_update_refused_alarms(world, alarms):
    sync(world, "demo", 2, slurmctld="refused", synced_at=lambda now: now - 30, errors=4)
    states = alarms("slurm-bridge-refused-demo", "slurm-bridge-refused", "slurmctld-unreachable-demo")
    assert states == {"slurm-bridge-refused-demo": ALARM, "slurm-bridge-refused": ALARM,
                      "slurmctld-unreachable-demo": OK}  # fmt: skip


def test_changes_due_and_not_applied_for_three_syncs_alarms_and_less_does_not(world, alarms):
    sync(world, "demo", 3, slurmctld="ok", synced_at=lambda now: now - 2 * SYNC_INTERVAL_S)  # two syncs behind
    assert set(alarms("slurm-bridge-behind-demo", "slurm-bridge-behind").values()) == {OK}
    stuck = world.clock.now()  # Slurm matched what the bridge had to apply for the last time
    sync(world, "demo", 3, slurmctld="ok", synced_at=stuck, errors=2)
    assert set(alarms("slurm-bridge-behind-demo", "slurm-bridge-behind").values()) == {ALARM}


def test_a_bridge_that_does_not_hold_the_fence_is_not_counted(world, alarms):
    """An old controller node's bridge, still up with slurmctld gone from under it, pulls too: only the holder's
    passes are counted."""
    for _ in range(2 * PERIOD_S // SYNC_INTERVAL_S):
        sync(world, "demo", SYNC_INTERVAL_S / PERIOD_S, slurmctld="ok")
        query = {"bridge": OTHER_BRIDGE, "slurmctld": "unreachable", "synced_at": "0"}
        code, answer = world.api("GET", "/clusters/demo/slurm", query=query, principal=INSTANCE_ROLE)
        assert code == 200 and answer["holder"] is False
    states = alarms(*every("demo"), *every(None))
    assert set(states.values()) == {OK}, states


def test_a_star_bridge_is_covered_by_the_stack_wide_alarms(world, alarms):
    """Cluster other is named nowhere: its bridge runs under "*", and no alarm has its name."""
    with pytest.raises(KeyError):
        find_alarm(world.template.template, "slurmctld-unreachable-other")
    sync(world, "other", 2, slurmctld="unreachable", synced_at=lambda now: now - 600)
    states = alarms("slurmctld-unreachable", "slurm-bridge-behind", "slurmctld-unreachable-demo")
    assert states == {"slurmctld-unreachable": ALARM, "slurm-bridge-behind": ALARM,
                      "slurmctld-unreachable-demo": OK}  # fmt: skip


def test_reconcile_says_a_star_bridge_went_silent(world, alarms):
    sync(world, "other", 1, slurmctld="ok")  # its bridge holds the fence, then stops
    stopped = world.clock.now()
    world.advance(SILENT_S - 3 * SYNC_INTERVAL_S)
    assert alarms("slurm-bridge-silent") == {"slurm-bridge-silent": OK}  # Reconcile says 0 each run
    world.advance(3 * SYNC_INTERVAL_S + 3 * PERIOD_S)
    assert world.clock.now() - stopped > SILENT_S + PERIOD_S
    assert alarms("slurm-bridge-silent") == {"slurm-bridge-silent": ALARM}
    sync(world, "other", 2, slurmctld="ok")  # it is back: the next runs say 0
    assert alarms("slurm-bridge-silent") == {"slurm-bridge-silent": OK}


def test_reconcile_reads_every_bridge_lease_with_its_one_look_at_the_registry(world, alarms, monkeypatch):
    """Reconcile's pass reads the registry once (a Query: every cluster's item, its bridge lease in it) and says
    each holder's silence from that, not from each cluster's item read again."""
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
    from tests.harness import moto_patches

    sync(world, "demo", 1, slurmctld="ok")  # both clusters registered, each with a bridge holding its fence
    sync(world, "other", 1, bridge=OTHER_BRIDGE, slurmctld="ok")
    reads: list[tuple[str | None, str]] = []
    read = NodeTable.registration

    def counted(self, cluster):
        reads.append((moto_patches.current_function(), cluster))
        return read(self, cluster)

    monkeypatch.setattr(NodeTable, "registration", counted)
    stopped = world.clock.now()
    world.advance(SILENT_S + 2 * PERIOD_S)  # Reconcile runs every 5 minutes meanwhile; no bridge pulls
    assert world.clock.now() - stopped > SILENT_S + PERIOD_S
    assert alarms("slurm-bridge-silent", "slurm-bridge-silent-demo") == {
        "slurm-bridge-silent": ALARM,
        "slurm-bridge-silent-demo": ALARM,
    }
    assert not [cluster for function, cluster in reads if function and "Reconcile" in function], reads
