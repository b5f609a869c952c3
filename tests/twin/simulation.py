"""The simulated HyperPod cluster of a scenario, and a run of the real controller against it.

`SimulatedHyperPod` extends the test fake with what a scenario draws from its seed (per-node ground truth,
check durations from ranges, jobs on nodes) and with what the report needs to judge the controller (check
outcomes, the ground truth of every instance over time, and actions that conflict or repeat without new
evidence). It plays the scenario's `fidelity` readings (`tests/fakes/readings.py`). It also keeps, per node, when
it was schedulable (`Running` and not drained: `drain` / `resume` are the twin's Slurm drain, nothing in the
controller sets them) and the jobs the `workload` ran on it, for the report's `exposure`. `Twin` extends the
harness with the scenario's arrivals, its faults (duplicate, dropped and late events; throttling and 5xx on
every AWS call a Lambda makes) and its incidents (`tests/twin/incidents.py`).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Literal
from unittest import mock

from tests.fakes.checks import IN_CHECK
from tests.fakes.hyperpod import ApiError, Clock, Cluster, FakeHyperPod, GroupSpec, HealthCheck, Node
from tests.harness import moto_patches
from tests.harness.engine import Harness
from tests.harness.template import ControllerTemplate
from tests.twin.faults import ApiFaults, CrashPlan
from tests.twin.scenario import CONTROLLER_GROUP, LambdaCrash, Scenario
from tests.twin.workload import Workload

if TYPE_CHECKING:
    from tests.twin.incidents import Armed
    from tests.twin.slurm import Bridge

Truth = Literal["healthy", "transient", "persistent"]
EVIDENCE = frozenset({"pass", "fail", "skip"})  # check outcomes that say something about the node's hardware


class SimulatedHyperPod(Workload, FakeHyperPod):
    def __init__(self, scenario: Scenario, clock: Clock) -> None:
        super().__init__(clock, seed=scenario.seed)
        self.scenario = scenario
        # Independent streams, so that (say) an extra API call never changes which node is faulty.
        self._truth = random.Random(scenario.seed + 1)
        self._durations = random.Random(scenario.seed + 4)
        self._workload = random.Random(scenario.seed + 7)
        self._jobs = random.Random(scenario.seed + 9)  # workload.utilisation: job lengths and idle gaps
        self.readings = scenario.fidelity
        self.bridge: Bridge | None = None  # the twin's Slurm bridge (Twin sets it): its gate drains new nodes
        faulty = scenario.hardware.faulty_nodes
        self._exact: list[Truth] = []  # faulty_nodes: the truth of each arrival in order (popped)
        if faulty is not None:
            healthy = scenario.nodes - faulty.transient - faulty.persistent
            counts: list[tuple[Truth, int]] = [
                ("transient", faulty.transient),
                ("persistent", faulty.persistent),
                ("healthy", healthy),
            ]
            self._exact = [truth for truth, k in counts for _ in range(k)]
            random.Random(scenario.seed + 8).shuffle(self._exact)
            self._exact.reverse()
        self.truth: dict[str, Truth] = {}
        self.ready_at: dict[str, float] = {}  # first time each logical node finished its lifecycle script
        self.check_durations: list[float] = []
        self.check_runs: dict[str, list[tuple[float, float]]] = {}  # logical id -> (began, duration) of its checks
        self.conflicting: list[tuple[float, str, str]] = []  # (time, action, logical id)
        self.check_outcomes: list[tuple[float, str, str]] = []  # (time, logical id, pass|fail|skip|replaced)
        # Controller requests on a node it already acted on, with no check outcome for the node since.
        self.duplicate: list[tuple[float, str, str]] = []  # (time, action, logical id)
        # Logical ids acted on (by the controller or by HyperPod) since their last check outcome: (when, actor).
        self._acted_on: dict[str, tuple[float, str]] = {}
        self._held_outcomes: set[tuple[int, str]] = set()  # (check seq, logical id): outcome counted at its end
        # Ground truth per instance id over time: (time, "pass" | "fail"), appended when it changes.
        self.truth_history: dict[str, list[tuple[float, str]]] = {}
        # Check outcomes (pass or fail: the hardware was tested) per instance id: their times.
        self.tested: dict[str, list[float]] = {}
        # Every reboot/replace with the instance it was asked for: (time, kind, logical id, actor, instance id).
        self.action_instances: list[tuple[float, str, str, str, str]] = []
        # (time, instance id) of those asked for an instance HyperPod showed in Failure (a launch that failed): not a
        # false fail, whatever its hardware's truth (it was not in service, and nobody else would act).
        self.in_failure_actions: set[tuple[float, str]] = set()
        self._init_workload()  # jobs, drains and schedulable spans (tests/twin/workload.py)
        self.first_check_at: dict[str, float] = {}  # logical id -> when its first check (on-demand or on-start) began
        self.passed_at: dict[str, float] = {}  # instance id -> its first "pass" check outcome
        self.skipped_by_job = 0  # check outcomes "skip" because a job outlasted HyperPod's 10 min wait
        self.foreign_checks: list[HealthCheck] = []  # started by someone else (the console), not the controller
        self.started_while_foreign_active = 0  # controller requests that met a foreign check

    # -- what the scenario draws -----------------------------------------------------------------
    def arrive(self, group: str) -> str | None:
        hw = self.scenario.hardware
        c = self._clusters.get(self.scenario.cluster.name)
        if c is None or c.status != "InService":
            return None  # a deleted cluster gets no more capacity
        lid = self.add_node(self.scenario.cluster.name, group, ready_after_s=self._group(group).lifecycle_s)
        u = self._truth.random()
        if self._exact:
            exact = self._exact.pop()
            u = {"transient": 0.25, "persistent": 0.75, "healthy": 2.0}[exact]
            hw = hw.model_copy(update={"transient_fault_rate": 0.5, "persistent_fault_rate": 0.5})
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

    # -- ground truth ------------------------------------------------------------------------------
    def _truth_changed(self, n: Node) -> None:
        """The fake's hook: `n.truth` or `n.instance_id` just changed."""
        super()._truth_changed(n)
        if not n.instance_id:
            return  # no instance yet: recorded when EC2 hands one out
        value = "fail" if n.truth == "fail" else "pass"
        history = self.truth_history.setdefault(n.instance_id, [])
        if not history or history[-1][1] != value:
            history.append((self._t, value))

    def truth_at(self, instance_id: str, t: float) -> str | None:
        """The ground truth of the instance at time t ("pass" | "fail"), None for an instance never seen."""
        history = self.truth_history.get(instance_id)
        if not history:
            return None
        value = history[0][1]
        for at, v in history:
            if at > t:
                break
            value = v
        return value

    def tested_by(self, instance_id: str, t: float) -> bool:
        """Whether the instance had a check outcome (pass or fail) at or before t."""
        return any(at <= t for at in self.tested.get(instance_id, ()))

    def _group(self, name: str):
        return next(g for g in self.scenario.groups if g.name == name)

    def _duration(self, checks: Any) -> float:
        ranges = self.scenario.check_duration_s
        # Sorted: a set of names iterates in hash order, which changes with each process (PYTHONHASHSEED).
        draw = self._durations.uniform
        total = sum(draw(*ranges.get(c, (self.check_duration_s[c],) * 2)) for c in sorted(set(checks)))
        self.check_durations.append(total)
        return total

    # -- observations at the boundary ------------------------------------------------------------
    def _lcs_done(self, c: Cluster, n: Node) -> None:
        super()._lcs_done(c, n)
        self.ready_at.setdefault(n.logical_id, self._t)
        if n.status == IN_CHECK:  # on-start checks began
            self.first_check_at.setdefault(n.logical_id, self._t)
        bridge = self.bridge
        if bridge is not None and c.name == self.scenario.cluster.name and n.status in ("Running", IN_CHECK):
            bridge.slurm.boot(n)  # the lifecycle script's `hpdhc gate node-boot`, before slurmd registers
        self._maybe_busy(c, n)
        self._observe(n)

    def _launched(self, c: Cluster, n: Node, lcs_s: float, retry: bool = False) -> None:
        super()._launched(c, n, lcs_s, retry)
        self._observe(n)

    def _rebooted(self, n: Node) -> None:
        super()._rebooted(n)
        self._observe(n)

    def _fail_then_retry(self, c: Cluster, n: Node, retry: Any) -> None:
        super()._fail_then_retry(c, n, retry)
        self._observe(n)

    def _detach(self, c: Cluster, n: Node, to_group: str, attach_s: float) -> None:
        super()._detach(c, n, to_group, attach_s)
        self._observe(n)

    def _attach(self, c: Cluster, n: Node, to_group: str, attach_s: float) -> None:
        super()._attach(c, n, to_group, attach_s)
        self._observe(n)

    def _delete(self, c: Cluster) -> None:
        super()._delete(c)
        for n in c.nodes.values():
            self._observe(n)

    def _queue(self, c: Cluster, check: HealthCheck, n: Node, checks: set[str], start: float, job_end: float) -> None:
        super()._queue(c, check, n, checks, start, job_end)
        self._observe(n)

    def _skip_queued(self, c: Cluster, check: HealthCheck, n: Node) -> None:
        if n.logical_id in check.queued and n.truth != "skip":  # still waiting: its job outlasted the wait
            self.skipped_by_job += 1
        super()._skip_queued(c, check, n)

    def _try_action(self, c: Cluster, n: Node | None, action: str, ref: str) -> dict[str, str] | None:
        if n is not None and n.in_flight:
            self.conflicting.append((self._t, action, n.logical_id))
        if n is not None and n.logical_id in self._acted_on:
            self.duplicate.append((self._t, action, n.logical_id))
        return super()._try_action(c, n, action, ref)

    def _reboot(self, c: Cluster, n: Node, actor: str, duration: float | None = None) -> None:
        self._acted(n, "reboot", actor)
        super()._reboot(c, n, actor, duration)
        self._observe(n)

    def _replace(self, c: Cluster, n: Node, actor: str) -> None:
        self._acted(n, "replace", actor)
        super()._replace(c, n, actor)
        self._observe(n)

    def _acted(self, n: Node, kind: str, actor: str) -> None:
        """A reboot or replacement begins (ours or HyperPod's own): later ones need a check outcome first."""
        self._acted_on[n.logical_id] = (self._t, actor)
        self.action_instances.append((self._t, kind, n.logical_id, actor, n.instance_id))
        if n.status == "Failure":
            self.in_failure_actions.add((self._t, n.instance_id))

    def _check_begins(self, c: Cluster, check: HealthCheck, n: Node, checks: set[str]) -> None:
        drawn = len(self.check_durations)
        super()._check_begins(c, check, n, checks)
        if len(self.check_durations) > drawn:  # it began: `n` is in the check for the duration just drawn
            self.check_runs.setdefault(n.logical_id, []).append((self._t, self.check_durations[-1]))
            self.first_check_at.setdefault(n.logical_id, self._t)
        self._observe(n)

    def _check_ends(self, c: Cluster, check: HealthCheck, n: Node, checks: Collection[str] | None = None) -> None:
        super()._check_ends(c, check, n, checks)
        if n.logical_id in check.holding:
            # isolated_holds_operation: its check is over (it failed) though the operation waits for a reboot or
            # replacement: the outcome is now, not when someone releases it.
            self._outcome(n, "fail")
            self._held_outcomes.add((check.seq, n.logical_id))

    def _check_finished(self, c: Cluster, check: HealthCheck, n: Node, outcome: str) -> None:
        if (check.seq, n.logical_id) in self._held_outcomes:
            self._held_outcomes.discard((check.seq, n.logical_id))
        else:
            self._outcome(n, outcome)
        super()._check_finished(c, check, n, outcome)
        self._observe(n)

    def _on_start_check_done(self, c: Cluster, n: Node) -> None:
        self._outcome(n, "fail" if n.truth == "fail" else "pass")
        super()._on_start_check_done(c, n)
        self._maybe_busy(c, n)
        self._observe(n)

    def _outcome(self, n: Node, outcome: str) -> None:
        self.check_outcomes.append((self._t, n.logical_id, outcome))
        if outcome in ("pass", "fail") and n.instance_id:
            self.tested.setdefault(n.instance_id, []).append(self._t)
        if outcome == "pass" and n.instance_id:
            self.passed_at.setdefault(n.instance_id, self._t)
        acted = self._acted_on.get(n.logical_id)
        # "replaced" mid-check says nothing about the hardware that comes next. HyperPod's own recovery in the
        # same instant as the outcome (Automatic) acts on that outcome: it stays, so that ours after it repeats it.
        if outcome in EVIDENCE and acted is not None and not (acted[1] != "controller" and acted[0] >= self._t):
            del self._acted_on[n.logical_id]

    # -- someone else's check --------------------------------------------------------------------
    def start_foreign_check(self, cluster: str, group: str, logical_ids: list[str]) -> str:
        """An operator's StartClusterHealthCheck from the console (not counted as a controller call): "started",
        "merged" (into the active check), or the error code it got."""
        self._catch_up()
        c = self._clusters[cluster]
        ids = [c.nodes[lid].instance_id for lid in logical_ids]
        config = {"InstanceGroupName": group, "InstanceIds": ids, "DeepHealthChecks": ["InstanceStress"]}
        before, counted, rejected = c.check, self.started_while_active, len(self.rejected_while_active)
        held = len(self.asked_past_held)
        try:
            self._op_start_cluster_health_check(
                {"ClusterName": cluster, "DeepHealthCheckConfigurations": [config]}, True
            )
        except ApiError as err:
            return err.code
        finally:  # the operator's request meeting ours is not the controller's doing
            self.started_while_active = counted
            del self.rejected_while_active[rejected:]
            del self.asked_past_held[held:]
        if c.check is None:
            return "ended"
        if c.check is before:
            return "merged"
        self.foreign_checks.append(c.check)
        return "started"

    def _op_start_cluster_health_check(self, p: dict[str, Any], visible: bool) -> dict:
        c = self._clusters.get(p.get("ClusterName", ""))
        if c is not None and c.check is not None and any(c.check is f for f in self.foreign_checks):
            self.started_while_foreign_active += 1
        return super()._op_start_cluster_health_check(p, visible)


class Twin(Harness):
    """The harness with the scenario's arrivals, faults and incidents."""

    def __init__(self, scenario: Scenario, template: ControllerTemplate, config: dict[str, Any]) -> None:
        self.scenario = scenario
        self.sim = SimulatedHyperPod(scenario, Clock())
        super().__init__(template, self.sim, config=config, asynchronous=True)
        faults = scenario.faults
        self._faults = random.Random(scenario.seed + 2)
        self._delays = random.Random(scenario.seed + 6)
        self.api_faults = ApiFaults(faults.throttle_rate, faults.server_error_rate, random.Random(scenario.seed + 5))
        self.dropped: list[dict] = []
        self.duplicated = 0
        self.delayed = 0
        self.started_at = self.clock.now()
        self.crashes: dict[str, CrashPlan] = {}  # by FunctionName, one per lambda-crash incident
        self.incidents: list[Armed] = []  # in scenario order
        self.cluster_model: Cluster  # the fake's cluster object, kept: it outlives a deletion
        self.bridge: Bridge | None = None  # the Slurm bridge agent, when the scenario's workload runs one

    def __enter__(self) -> Twin:
        from tests.twin import incidents
        from tests.twin.slurm import Bridge

        super().__enter__()
        s = self.scenario
        for cm in self._fault_patches():
            cm.__enter__()
            self._stack.append(cm)  # undone by Harness.__exit__, before moto goes
        groups = [GroupSpec(CONTROLLER_GROUP, "ml.m5.xlarge", count=1, node_type="Controller")]
        groups += [GroupSpec(g.name, g.instance_type, on_start_checks=g.on_start_deep_health_checks) for g in s.groups]
        self.cluster_model = self.sim.create_cluster(s.cluster.name, groups, node_recovery=s.cluster.node_recovery)
        arrivals = random.Random(s.seed + 3)
        for g in s.groups:
            for offset in sorted(g.arrival.start_s + arrivals.uniform(0, g.arrival.spread_s) for _ in range(g.count)):
                self.at(self.started_at + offset, functools.partial(self._arrive, g.name))
        self.incidents = [incidents.arm(self, spec) for spec in s.incidents]
        self.bridge = Bridge(self) if s.workload.slurm_bridge else None
        self.sim.bridge = self.bridge  # its gate drains each new node before its slurmd registers
        if self.bridge is not None and self._revalidates():  # what it costs the jobs (the report's `revalidation`)
            self.sim.revalidating = self._revalidating
        return self

    def _revalidates(self) -> bool:
        """A group's policy re-checks passed nodes within the horizon: only then does the workload ask the table
        (its reads would count in a benchmark's DynamoDB units)."""
        from hyperpod_dhc.deephealth.domain.policy import parse_config

        config, cluster = parse_config(self.config), self.scenario.cluster.name
        days = [config.policy_for(cluster, g.name).revalidate_every_days for g in self.scenario.groups]
        return any(d and d * 86400 < self.scenario.horizon_s for d in days)

    def _revalidating(self, logical_id: str) -> bool:
        """The controller has the node out for a periodic re-check (its record, as stored now)."""
        from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
        from hyperpod_dhc.deephealth.domain.nodes import revalidating
        from tests.harness.engine import TABLE_NAME

        record = NodeTable(TABLE_NAME).load_nodes(self.scenario.cluster.name, {logical_id}).get(logical_id)
        return record is not None and revalidating(record)

    def _arrive(self, group: str) -> None:
        self.sim.arrive(group)

    def drain(self, logical_id: str) -> None:
        """Drain the node in the twin's (simulated) Slurm: it takes no new job (`SimulatedHyperPod.drain`)."""
        self.sim.drain(logical_id)

    def resume(self, logical_id: str) -> None:
        self.sim.resume(logical_id)

    def _fault_patches(self) -> list[Any]:
        """API faults at moto's front door; a crash plan per lambda-crash incident, and node writes counted
        for them."""
        from hyperpod_dhc.deephealth.adapters.node_table import NodeTable

        patches: list[Any] = [moto_patches.faulted_requests(self.api_faults)]
        for spec in self.scenario.incidents:
            if isinstance(spec, LambdaCrash):
                name = self.function_name(spec.function)
                self.crashes.setdefault(name, CrashPlan(name, spec.after_writes, spec.times))
        if self.crashes:
            save = NodeTable.save

            def counted_save(table: NodeTable, record: Any) -> Any:
                plan = self.crashes.get(moto_patches.current_function() or "")
                if plan is not None:
                    plan.before_write(self.clock.now())
                return save(table, record)

            patches.append(mock.patch.object(NodeTable, "save", counted_save))
        return patches

    def function_name(self, construct: str) -> str:
        """The deployed FunctionName of a function given its construct id ("RecoverNodes")."""
        (name,) = [f.construct_id for f in self.template.functions if f.construct_id.endswith(construct)]
        return name

    def _wrap_invocation(self, function_name: str, handler: moto_patches.Handler) -> moto_patches.Handler:
        plan = self.crashes.get(function_name)
        return plan.wrap(handler, self.clock.now) if plan else handler

    def deliver(self, event: dict) -> None:
        faults = self.scenario.faults
        if self._faults.random() < faults.dropped_event_rate:
            self.dropped.append(event)
            return
        self._deliver_maybe_late(event)
        if self._faults.random() < faults.duplicate_event_rate:
            self.duplicated += 1
            self._deliver_maybe_late(event)

    def _deliver_maybe_late(self, event: dict) -> None:
        faults = self.scenario.faults
        if faults.delayed_event_rate and self._delays.random() < faults.delayed_event_rate:
            self.delayed += 1
            delay = self._delays.uniform(0, faults.max_event_delay_s)
            self.at(self.clock.now() + delay, lambda: Harness.deliver(self, event))
        else:
            Harness.deliver(self, event)

    def finished(self) -> bool:
        """Every node has arrived and has a final verdict (or waits for an operator's reset)."""
        from hyperpod_dhc.deephealth.domain.nodes import FINAL_STATES
        from hyperpod_dhc.deephealth.domain.safety import is_held

        if self.scheduled > (self.bridge is not None) or self.scenario.run_to_horizon:  # a bridge sync is pending
            return False
        records = [r for r in self.records(self.scenario.cluster.name).values() if r.group != CONTROLLER_GROUP]
        # Every node that arrived, unless the cluster was deleted: nodes still provisioning then never
        # become ready, so the controller never gets to know them.
        arrived = sum(1 for n in self.cluster_model.nodes.values() if n.group != CONTROLLER_GROUP)
        expected = arrived if self.cluster_model.status == "InService" else 0
        # A node held by the breaker or a capacity hold waits for an operator: settled, as far as the run goes.
        return len(records) >= expected and all(r.state in FINAL_STATES or is_held(r) for r in records)

    def run(self) -> float:
        """Run to the horizon or until every node has its verdict; returns wall seconds."""
        wall = time.monotonic()
        # Held: the report is of the world at the horizon, not of however far the executions got in a minute.
        self.run_until(self.finished, horizon_s=self.scenario.horizon_s, hold=True)
        return time.monotonic() - wall
