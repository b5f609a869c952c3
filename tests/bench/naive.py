"""The naive baseline of the benchmark: one workflow per node, driven on the twin's simulated HyperPod.

What a straightforward per-node design would do, and what `make bench` compares our controller with:

- a node's workflow starts on the lifecycle-script `Succeeded` Cluster Event of the node (an EventBridge rule
  targeting the state machine directly: no Lambda, no reconciler) and is named after its NodeLogicalId, so a
  node has one workflow for life (replacements included);
- **Start check**: `StartClusterHealthCheck` for this node only (its group's single-node check types); while
  another check is active the call is refused (one active on-demand check per cluster) and retried with
  back-off: 30 s, doubling, at most 5 min between attempts, for as long as it takes;
- **Poll check** every 30 s: `DescribeClusterNode` until the node left `DeepHealthCheckInProgress`; then one
  `FilterLogEvents` query on the node's `DeepHealthCheckResults/<instance id>` stream decides: an error line or
  `Failure` is a failure, `Running` without one a pass; never seen in the check 15 min after the request: skipped,
  start again;
- on failure, at once: reboot (`BatchRebootClusterNodes`), wait for `Running` (a `DescribeClusterNode` every
  30 s), re-check; a second failure: replace (`BatchReplaceClusterNodes`), wait for the new instance to be
  `Running`, re-check; a third failure: `failed`, left for an operator.

Only HyperPod is simulated (`SimulatedHyperPod`, reached through real botocore clients inside moto's
`mock_aws`, so every SageMaker call is counted at the fake's boundary, in `sim.calls`, exactly as our
controller's). Step Functions and Lambda are **modelled**, not run: the costs below are what this design
would cost written as one Standard state machine per node, counted per state entered (a Task retry is a new
attempt: one more transition and one more invocation, as Step Functions bills retries):

    Start check (Task)                  1 transition + 1 invocation per attempt (refusals included)
    per poll: Wait 30 s + Poll check (Task) + Check finished? (Choice)      3 transitions + 1 invocation
    Recover node (Task: reboot | replace)  1 transition + 1 invocation per attempt
    per wait for the node: Wait 30 s + Poll node (Task) + Node back? (Choice)   3 transitions + 1 invocation
    the end: Passed / Gone (Succeed) or Failed (Fail)   1 transition

The result-log read happens inside the Poll check invocation that sees the node leave the check (as our
PollCheck does), so it costs no extra state.

The run is an event loop over a heap of per-node wake times, advancing the shared virtual clock straight to
the next thing that happens (a wake, an arrival or one of the fake's own transitions), and stops at the
scenario's horizon: nodes still queued then are reported without a verdict.

**Coalesced refusals** (default, `coalesce=True`): with one active check per cluster the per-node design
serializes checks, and the nodes that wait retry every 5 min, for hours: millions of refused calls at 10,000
nodes, a few ms each through botocore and moto. While a check is active the fake refuses every request, and
when the check can end is known: a node that began it ends it after the duration the fake drew for it, one not
begun yet cannot end it before it begins. Every attempt a node would make before that time is refused for
certain; those attempts are counted in one step at the same counters the fake's boundary keeps (`sim.calls`,
`sim.started_while_active`) and in the model (one transition and one invocation each), and the node wakes at
its first attempt at or after that time. Every other call is made for real. `tests/simulation/test_bench.py`
runs a scenario both ways and asserts the same calls, verdicts and times. Coalescing is off when the scenario
has incidents or `second_check_request: merge`, where that certainty does not hold.

**No controller, HyperPod's own on-start checks** (`OnStartOnly`, the benchmark's `on-start` row): the same
scenario with every worker group's `OnStartDeepHealthChecks` set to its policy's checks (`on_start_scenario`),
and nothing else: the same loop advances the fake through its own transitions (arrivals, lifecycle scripts,
on-start checks, jobs) with no workflow at all. A node's "verdict" is when it left its on-start check: `Running`
(passed), `Failure` with NodeRecovery None (failed; nobody acts on it), or, with Automatic, `Running` after
HyperPod's own replacement and its re-check. No API call is made.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.fakes.hyperpod import CHECK_START_DELAY_S, Clock, Cluster, GroupSpec, Node, install
from tests.harness.engine import REGION
from tests.twin.scenario import Scenario
from tests.twin.simulation import CONTROLLER_GROUP, SimulatedHyperPod

POLL_S = 30.0  # Wait before each DescribeClusterNode while a check or a recovery runs
FIRST_RETRY_S = 30.0  # Start check refused: first back-off ...
MAX_RETRY_S = 300.0  # ... doubling up to this
SKIPPED_AFTER_S = 900.0  # never seen in the check this long after the request: skipped (HyperPod skips busy nodes)
MAX_ACTIONS = 2  # reboot, then replace; a third failure is final
SINGLE_NODE_CHECKS = ("InstanceStress",)  # multi-node check types cannot run in a one-node request
BUSY = "already in progress"  # the fake's (inferred) wording for a second active check
RESULT_STREAM = "DeepHealthCheckResults/"
ERROR_PATTERN = '{ $.level = "error" }'


def create_cluster(sim: SimulatedHyperPod, scenario: Scenario) -> Cluster:
    """The scenario's cluster as the twin creates it (`Twin.__enter__`): its Slurm controller group, then the
    scenario's groups with their on-start checks."""
    groups = [GroupSpec(CONTROLLER_GROUP, "ml.m5.xlarge", count=1, node_type="Controller")]
    groups += [
        GroupSpec(g.name, g.instance_type, on_start_checks=g.on_start_deep_health_checks) for g in scenario.groups
    ]
    return sim.create_cluster(scenario.cluster.name, groups, node_recovery=scenario.cluster.node_recovery)


def arrivals(scenario: Scenario, t0: float) -> list[tuple[float, str]]:
    """(time, group) of every arrival, in the order the twin adds the nodes: the same seed, the same draws."""
    rng = random.Random(scenario.seed + 3)
    due: list[tuple[float, int, str]] = []
    for g in scenario.groups:
        for offset in sorted(g.arrival.start_s + rng.uniform(0, g.arrival.spread_s) for _ in range(g.count)):
            due.append((t0 + offset, len(due), g.name))
    return [(when, group) for when, _, group in sorted(due)]  # the harness runs due actions in (time, seq) order


def back_off(retry: int) -> float:
    """Seconds before attempt `retry + 1` of Start check (ASL Retry: 30 s, BackoffRate 2, MaxDelaySeconds 300)."""
    return min(MAX_RETRY_S, FIRST_RETRY_S * 2.0**retry)


@dataclass
class Model:
    """Modelled Step Functions and Lambda use of one node's workflow."""

    transitions: int = 0
    invocations: int = 0

    def task(self, attempts: int = 1) -> None:
        self.transitions += attempts
        self.invocations += attempts

    def poll(self) -> None:  # Wait + Task + Choice
        self.transitions += 3
        self.invocations += 1

    def end(self) -> None:  # Succeed / Fail
        self.transitions += 1


@dataclass
class NodeRun:
    """One node's workflow (one Standard execution)."""

    logical_id: str
    group: str
    instance_id: str
    started_at: float
    phase: str = "start"  # start | check | recover | back (waiting for the node) | done
    retries: int = 0  # refused attempts of the current Start check entry
    requested_at: float = 0.0
    seen_in_check: bool = False
    actions: list[str] = field(default_factory=list)
    action: str = ""  # the recovery action being requested (retried while HyperPod refuses it)
    old_instance_id: str = ""  # while a replacement runs: the instance it replaces
    verdict: str | None = None  # passed | passed_after_reboot | replaced | failed | gone
    verdict_at: float | None = None
    model: Model = field(default_factory=Model)


@dataclass
class NaiveResult:
    scenario: Scenario
    sim: SimulatedHyperPod
    cluster: Cluster
    runs: dict[str, NodeRun]
    started_at: float
    ended_at: float
    wall_s: float
    coalesced_refusals: int

    @property
    def transitions(self) -> int:
        return sum(r.model.transitions for r in self.runs.values())

    @property
    def invocations(self) -> int:
        return sum(r.model.invocations for r in self.runs.values())

    @property
    def executions(self) -> int:
        return len(self.runs)


class NaiveController:
    def __init__(
        self,
        scenario: Scenario,
        config: dict[str, Any],
        coalesce: bool = True,
        on_hour: Callable[[float, int], None] | None = None,
    ) -> None:
        from hyperpod_dhc.deephealth.domain.policy import parse_config

        self.scenario = scenario
        self.policy = parse_config(config)
        self.coalesce = coalesce and not scenario.incidents and scenario.fidelity.second_check_request == "reject"
        self.sim = SimulatedHyperPod(scenario, Clock())
        self.clock = self.sim.clock
        self.t0 = self.clock.now()
        self.end = self.t0 + scenario.horizon_s
        self.runs: dict[str, NodeRun] = {}
        self.coalesced = 0
        self._heap: list[tuple[float, int, str, str]] = []  # (time, seq, "arrive" | "wake", group | logical id)
        self._seq = itertools.count()
        self._arrivals_left = 0
        self._done = 0  # workflows that reached their end
        self._cluster_arn = ""
        self._on_hour = on_hour  # (virtual seconds elapsed, verdicts so far), every virtual hour
        self._next_hour = self.t0 + 3600.0

    # -- the run -------------------------------------------------------------------------------------
    def run(self) -> NaiveResult:
        wall = time.monotonic()
        env = {
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
        }  # never a real account: everything is moto and the fake
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.dict(os.environ, env))
            stack.enter_context(mock_aws())
            stack.enter_context(install(self.sim))
            retries = Config(retries={"max_attempts": 1, "mode": "standard"})  # no fault is injected here
            self.sm = boto3.client("sagemaker", region_name=REGION, config=retries)
            self.logs = boto3.client("logs", region_name=REGION, config=retries)
            self.cluster = self._create_cluster()
            self._loop()
        return NaiveResult(
            scenario=self.scenario,
            sim=self.sim,
            cluster=self.cluster,
            runs=self.runs,
            started_at=self.t0,
            ended_at=min(self.clock.now(), self.end),
            wall_s=time.monotonic() - wall,
            coalesced_refusals=self.coalesced,
        )

    def _create_cluster(self) -> Cluster:
        cluster = create_cluster(self.sim, self.scenario)
        self._cluster_arn = cluster.arn
        for when, group in arrivals(self.scenario, self.t0):
            self._push(when, "arrive", group)
            self._arrivals_left += 1
        return cluster

    def _push(self, when: float, kind: str, ref: str) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), kind, ref))

    def _loop(self) -> None:
        timers = self.sim._timers  # the fake's own transitions: advance to each, so events are seen on time
        self.sim.drain_events()  # the cluster's own state change: nothing to act on
        while True:
            candidates = [self._heap[0][0]] if self._heap else []
            if timers:
                candidates.append(timers[0][0])
            if not candidates or self._finished():
                return
            when = min(candidates)
            if when > self.end:
                if self.clock.now() < self.end:
                    self.clock.advance(self.end - self.clock.now())
                return
            if when > self.clock.now():
                self.clock.advance(when - self.clock.now())
            if self._on_hour is not None and self.clock.now() >= self._next_hour:
                self._next_hour += 3600.0 * (1 + (self.clock.now() - self._next_hour) // 3600.0)
                self._on_hour(self.clock.now() - self.t0, self._done)
            self._events(self.sim.drain_events())
            while self._heap and self._heap[0][0] <= self.clock.now():
                _, _, kind, ref = heapq.heappop(self._heap)
                if kind == "arrive":
                    self._arrivals_left -= 1
                    self.sim.arrive(ref)
                else:
                    self._wake(self.runs[ref])
                self._events(self.sim.drain_events())

    def _finished(self) -> bool:
        """Every node arrived, and every workflow ended (a node always arrives, and gets a workflow, once)."""
        return not self._arrivals_left and self._done == self.scenario.nodes

    def _events(self, events: list[dict[str, Any]]) -> None:
        """The EventBridge rule: a lifecycle script that succeeded starts the node's workflow (once per node)."""
        for event in events:
            if event.get("detail-type") != "SageMaker HyperPod Cluster Event":
                continue
            record = event["detail"]["EventDetails"]
            instance = record.get("EventDetails", {}).get("EventMetadata", {}).get("Instance", {})
            if instance.get("LcsExecutionState") != "Succeeded" or record["InstanceGroupName"] == CONTROLLER_GROUP:
                continue
            lid = instance["NodeLogicalId"]
            if lid in self.runs:
                continue  # the execution name is the logical id: one workflow per node, replacements included
            run = NodeRun(lid, record["InstanceGroupName"], record["InstanceId"], started_at=self.clock.now())
            self.runs[lid] = run
            self._wake(run)

    # -- one node's workflow -------------------------------------------------------------------------
    def _wake(self, run: NodeRun) -> None:
        if run.phase == "start":
            self._start(run)
        elif run.phase == "check":
            self._poll_check(run)
        elif run.phase == "recover":
            self._recover(run)
        elif run.phase == "back":
            self._poll_back(run)

    def _later(self, run: NodeRun, seconds: float) -> None:
        self._push(self.clock.now() + seconds, "wake", run.logical_id)

    def _start(self, run: NodeRun) -> None:
        now = self.clock.now()
        busy_until = self._busy_until() if self.coalesce else None
        if busy_until is not None and now < busy_until:
            t, refused = now, 0
            while t < busy_until:  # every attempt before the active check ends is refused: count them at once
                refused += 1
                t += back_off(run.retries)
                run.retries += 1
            self.sim.calls["StartClusterHealthCheck"] += refused
            self.sim.started_while_active += refused
            self.coalesced += refused
            run.model.task(refused)
            self._push(t, "wake", run.logical_id)
            return
        run.model.task()
        checks = [c for c in self.policy.policy_for(self.scenario.cluster.name, run.group).checks]
        checks = [c for c in checks if c in SINGLE_NODE_CHECKS] or ["InstanceStress"]
        config = {"InstanceGroupName": run.group, "InstanceIds": [run.instance_id], "DeepHealthChecks": checks}
        try:
            self.sm.start_cluster_health_check(
                ClusterName=self.scenario.cluster.name, DeepHealthCheckConfigurations=[config]
            )
        except ClientError as err:
            if BUSY in err.response["Error"].get("Message", ""):
                self._later(run, back_off(run.retries))
                run.retries += 1
                return
            if err.response["Error"]["Code"] == "ResourceNotFound":
                self._verdict(run, "gone")
                return
            run.phase = "back"  # e.g. the instance changed under us: find the node's current instance first
            self._later(run, POLL_S)
            return
        run.phase, run.retries = "check", 0
        run.requested_at, run.seen_in_check = now, False
        self._later(run, POLL_S)

    def _busy_until(self) -> float | None:
        """A time before which the active check surely does not end (nothing can end it early: no incidents,
        `reject`). A node that began it ends at its start plus the duration the fake drew; one that has not begun
        yet begins (or is skipped) `CHECK_START_DELAY_S` after the request at the earliest, and a job-busy node is
        released later still. The check ends when its last node does."""
        check = self.cluster.check
        if check is None or not check.pending:
            return None
        ends = []
        for lid in check.pending:
            runs = self.sim.check_runs.get(lid)
            if runs and runs[-1][0] >= check.requested:
                began, duration = runs[-1]
                ends.append(began + duration)
            else:
                ends.append(check.requested + CHECK_START_DELAY_S)
        return max(ends)

    def _describe(self, run: NodeRun) -> dict[str, Any] | None:
        try:
            return self.sm.describe_cluster_node(ClusterName=self.scenario.cluster.name, NodeLogicalId=run.logical_id)[
                "NodeDetails"
            ]
        except ClientError as err:
            if err.response["Error"]["Code"] == "ResourceNotFound":
                return None
            raise

    def _poll_check(self, run: NodeRun) -> None:
        run.model.poll()
        node = self._describe(run)
        if node is None:
            self._verdict(run, "gone")
            return
        status = node["InstanceStatus"]["Status"]
        if node["InstanceId"] != run.instance_id or status in ("ShuttingDown", "Pending"):
            # HyperPod acts on the node (its own replacement): wait for it, then re-check
            run.phase, run.old_instance_id = "back", run.instance_id if status == "ShuttingDown" else ""
            self._later(run, POLL_S)
            return
        if status == "DeepHealthCheckInProgress":
            run.seen_in_check = True
            self._later(run, POLL_S)
            return
        if not run.seen_in_check:
            if self.clock.now() - run.requested_at >= SKIPPED_AFTER_S:
                run.phase = "start"  # skipped: start again
                self._start(run)
            else:
                self._later(run, POLL_S)
            return
        failed = status == "Failure" or self._error_logged(run)
        if not failed:
            passed = "replaced" if "replace" in run.actions else "passed_after_reboot" if run.actions else "passed"
            self._verdict(run, passed)
        elif len(run.actions) >= MAX_ACTIONS:
            self._verdict(run, "failed")
        else:
            run.phase, run.action = "recover", "reboot" if not run.actions else "replace"
            self._recover(run)

    def _error_logged(self, run: NodeRun) -> bool:
        """One paginated FilterLogEvents on the node's result stream since the request: any error line."""
        cluster_id = self._cluster_arn.rsplit("/", 1)[-1]
        try:
            pages = self.logs.get_paginator("filter_log_events").paginate(
                logGroupName=f"/aws/sagemaker/Clusters/{self.scenario.cluster.name}/{cluster_id}",
                logStreamNamePrefix=RESULT_STREAM + run.instance_id,
                startTime=int(run.requested_at * 1000),
                filterPattern=ERROR_PATTERN,
            )
            for page in pages:
                for event in page.get("events", []):
                    if json.loads(event["message"]).get("level") == "error":
                        return True
        except ClientError as err:
            if err.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
        return False

    def _recover(self, run: NodeRun) -> None:
        run.model.task()
        action = run.action
        call = self.sm.batch_reboot_cluster_nodes if action == "reboot" else self.sm.batch_replace_cluster_nodes
        out = call(ClusterName=self.scenario.cluster.name, NodeIds=[run.instance_id])
        if out.get("Failed"):  # InvalidInstanceStatus / InstanceIdInUse: the Task's Retry, 30 s later
            self._later(run, POLL_S)
            return
        run.actions.append(action)
        run.old_instance_id = run.instance_id if action == "replace" else ""
        run.phase = "back"
        self._later(run, POLL_S)

    def _poll_back(self, run: NodeRun) -> None:
        """Wait for the node to be Running again (a new instance after a replacement), then re-check."""
        run.model.poll()
        node = self._describe(run)
        if node is None:
            self._verdict(run, "gone")
            return
        if node["InstanceStatus"]["Status"] != "Running" or node["InstanceId"] in ("", run.old_instance_id):
            self._later(run, POLL_S)
            return
        run.instance_id, run.old_instance_id = node["InstanceId"], ""
        run.phase, run.retries = "start", 0
        self._start(run)

    def _verdict(self, run: NodeRun, verdict: str) -> None:
        run.model.end()
        self._done += 1
        run.phase, run.verdict, run.verdict_at = "done", verdict, self.clock.now()


def run_naive(scenario: Scenario, config: dict[str, Any], coalesce: bool = True) -> NaiveResult:
    return NaiveController(scenario, config, coalesce=coalesce).run()


def on_start_scenario(scenario: Scenario, config: dict[str, Any]) -> Scenario:
    """The scenario with every group's on-start deep health checks set to the checks its policy names."""
    from hyperpod_dhc.deephealth.domain.policy import parse_config

    policy = parse_config(config)
    groups = tuple(
        g.model_copy(update={"on_start_deep_health_checks": policy.policy_for(scenario.cluster.name, g.name).checks})
        for g in scenario.groups
    )
    return scenario.model_copy(update={"groups": groups})


@contextlib.contextmanager
def on_start_checks_recorded(sim: SimulatedHyperPod) -> Iterator[None]:
    """Record on-start checks in `sim.check_runs` too (the simulation records the on-demand ones), so that a
    node's own check time and its first check's start count the on-start check it ran."""
    lcs_done = sim._lcs_done

    def recorded(c: Cluster, n: Node) -> None:
        drawn = len(sim.check_durations)
        lcs_done(c, n)
        if len(sim.check_durations) > drawn:  # its on-start checks began, for the duration just drawn
            sim.check_runs.setdefault(n.logical_id, []).append((sim._t, sim.check_durations[-1]))

    with mock.patch.object(sim, "_lcs_done", recorded):
        yield


class OnStartOnly(NaiveController):
    """No controller: HyperPod's on-start checks (of a scenario from `on_start_scenario`) and nothing else."""

    def __init__(
        self, scenario: Scenario, config: dict[str, Any], on_hour: Callable[[float, int], None] | None = None
    ) -> None:
        super().__init__(scenario, config, coalesce=False, on_hour=on_hour)
        self._outcomes_seen = 0

    def run(self) -> NaiveResult:
        with on_start_checks_recorded(self.sim):
            return super().run()

    def _events(self, events: list[dict[str, Any]]) -> None:
        """No workflow: each on-start check outcome since the last step settles its node, unless HyperPod
        (NodeRecovery Automatic) replaces it and checks the replacement."""
        outcomes = self.sim.check_outcomes
        for at, lid, outcome in outcomes[self._outcomes_seen :]:
            if lid in self.runs or outcome not in ("pass", "fail"):
                continue
            if outcome == "fail" and self.scenario.cluster.node_recovery == "Automatic":
                continue  # HyperPod replaces the node and checks the new instance on start
            node = self.cluster.nodes[lid]
            replaced = any(kind == "replace" and a_lid == lid for _, kind, a_lid, _ in self.sim.actions)
            verdict = "failed" if outcome == "fail" else "replaced" if replaced else "passed"
            run = NodeRun(lid, node.group, node.instance_id, started_at=at, phase="done")
            run.verdict, run.verdict_at = verdict, at
            self.runs[lid] = run
            self._done += 1
        self._outcomes_seen = len(outcomes)
