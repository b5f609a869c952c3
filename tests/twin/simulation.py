"""The simulated HyperPod cluster of a scenario, and a run of the real controller against it.

`SimulatedHyperPod` extends the test fake with what a scenario draws from its seed: per-node ground truth,
check durations from ranges, and throttling / 5xx on any API call. `Twin` extends the harness with the
scenario's arrivals and its event faults (duplicates, drops).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from tests.fakes.hyperpod import Clock, Cluster, FakeHyperPod, GroupSpec, Node
from tests.twin.engine import Harness
from tests.twin.scenario import Scenario
from tests.twin.template import ControllerTemplate

Truth = Literal["healthy", "transient", "persistent"]
CONTROLLER_GROUP = "controller"


class SimulatedHyperPod(FakeHyperPod):
    def __init__(self, scenario: Scenario, clock: Clock) -> None:
        super().__init__(clock, seed=scenario.seed)
        self.scenario = scenario
        # Independent streams, so that (say) an extra API call never changes which node is faulty.
        self._truth = random.Random(scenario.seed + 1)
        self._durations = random.Random(scenario.seed + 4)
        self._api_faults = random.Random(scenario.seed + 5)
        self.second_check_request = scenario.faults.second_check_request
        self.truth: dict[str, Truth] = {}
        self.ready_at: dict[str, float] = {}  # first time each logical node finished its lifecycle script
        self.check_durations: list[float] = []
        self.conflicting: list[tuple[float, str, str]] = []  # (time, action, logical id)

    # -- what the scenario draws -----------------------------------------------------------------
    def arrive(self, group: str) -> str:
        hw = self.scenario.hardware
        lid = self.add_node(self.scenario.cluster.name, group, ready_after_s=self._group(group).lifecycle_s)
        u = self._truth.random()
        if u < hw.transient_fault_rate:
            self.truth[lid] = "transient"
            self.set_truth(self.scenario.cluster.name, lid, "fail", cured_by="reboot")
        elif u < hw.transient_fault_rate + hw.persistent_fault_rate:
            self.truth[lid] = "persistent"
            self.set_truth(self.scenario.cluster.name, lid, "fail", cured_by="replace")
        else:
            self.truth[lid] = "healthy"
        if self._truth.random() < hw.replacement_fault_rate:
            self.set_truth_replacement(self.scenario.cluster.name, lid, "fail", cured_by="replace")
        return lid

    def _group(self, name: str):
        return next(g for g in self.scenario.groups if g.name == name)

    def _duration(self, checks: Any) -> float:
        ranges = self.scenario.check_duration_s
        total = sum(self._durations.uniform(*ranges.get(c, (self.check_duration_s[c],) * 2)) for c in set(checks))
        self.check_durations.append(total)
        return total

    # -- observations at the boundary ------------------------------------------------------------
    def _lcs_done(self, c: Cluster, n: Node) -> None:
        super()._lcs_done(c, n)
        self.ready_at.setdefault(n.logical_id, self._t)

    def _try_action(self, c: Cluster, n: Node | None, action: str, ref: str) -> dict[str, str] | None:
        if n is not None and n.in_flight:
            self.conflicting.append((self._t, action, n.logical_id))
        return super()._try_action(c, n, action, ref)

    def handle(self, operation: str, params: dict[str, Any], region: str, account: str) -> tuple[int, dict]:
        faults = self.scenario.faults
        u = self._api_faults.random()
        if u < faults.throttle_rate:
            self.inject_error(operation, "ThrottlingException", 400, message="Rate exceeded (simulated)")
        elif u < faults.throttle_rate + faults.server_error_rate:
            self.inject_error(operation, "InternalFailure", 500, message="Internal error (simulated)")
        return super().handle(operation, params, region, account)


class Twin(Harness):
    """The harness with the scenario's arrivals and event faults."""

    def __init__(self, scenario: Scenario, template: ControllerTemplate, config: dict[str, Any]) -> None:
        self.scenario = scenario
        self.sim = SimulatedHyperPod(scenario, Clock())
        super().__init__(template, self.sim, config=config)
        self._faults = random.Random(scenario.seed + 2)
        self.dropped: list[dict] = []
        self.duplicated = 0
        self.started_at = self.clock.now()

    def __enter__(self) -> Twin:
        super().__enter__()
        s = self.scenario
        groups = [GroupSpec(CONTROLLER_GROUP, "ml.m5.xlarge", count=1, node_type="Controller")]
        groups += [GroupSpec(g.name, g.instance_type, on_start_checks=g.on_start_deep_health_checks) for g in s.groups]
        self.sim.create_cluster(s.cluster.name, groups, node_recovery=s.cluster.node_recovery)
        arrivals = random.Random(s.seed + 3)
        for g in s.groups:
            for offset in sorted(g.arrival.start_s + arrivals.uniform(0, g.arrival.spread_s) for _ in range(g.count)):
                self.at(self.started_at + offset, lambda name=g.name: self.sim.arrive(name))
        return self

    def deliver(self, event: dict) -> None:
        faults = self.scenario.faults
        if self._faults.random() < faults.dropped_event_rate:
            self.dropped.append(event)
            return
        super().deliver(event)
        if self._faults.random() < faults.duplicate_event_rate:
            self.duplicated += 1
            super().deliver(event)

    def finished(self) -> bool:
        """Every node has arrived and has a final verdict."""
        from deephealth.domain.nodes import FINAL_STATES

        if self.scheduled:
            return False
        records = [r for r in self.records(self.scenario.cluster.name).values() if r.group != CONTROLLER_GROUP]
        return len(records) >= self.scenario.nodes and all(r.state in FINAL_STATES for r in records)

    def run(self) -> float:
        """Run to the horizon or until every node has its verdict; returns wall seconds."""
        wall = time.monotonic()
        self.run_until(self.finished, horizon_s=self.scenario.horizon_s)
        return time.monotonic() - wall


@dataclass
class GroupProgress:
    """One instance group as the operator sees it: arrivals (simulation truth) and controller states."""

    arrived: int = 0
    states: Counter = field(default_factory=Counter)  # NodeState value -> nodes

    @property
    def verdicted(self) -> int:
        from deephealth.domain.nodes import FINAL_STATES

        return sum(n for state, n in self.states.items() if state in FINAL_STATES)


def progress(twin: Twin) -> dict[str, GroupProgress]:
    """Per instance group: what arrived and where the controller has each node."""
    cluster = twin.sim.cluster(twin.scenario.cluster.name)
    out = {g.name: GroupProgress() for g in twin.scenario.groups}
    for n in cluster.nodes.values():
        if n.group in out and n.logical_id in twin.sim.ready_at:
            out[n.group].arrived += 1
    for r in twin.records(twin.scenario.cluster.name).values():
        if r.group in out:
            out[r.group].states[r.state.value] += 1
    return out
