"""The twin's report: what actually happened, counted where it happened.

API calls are counted at the fake's boundary (only those that reached HyperPod; injected API faults are
counted apart, per service, in `api_faults`), state transitions read from the executions' histories,
verdicts from the controller's own table, ground truth from the simulation, notifications from the topic's
subscribed queue (`Harness.notifications`).

Version 2 added `actions.duplicate`, `api_faults`, `events.{delayed, retried_invocations,
failed_invocations}`, `checks.{foreign, started_while_foreign_active}`, `incidents`, `alerts`,
`notifications` and `inconclusive_without_alert`; then the verdict categories `held` (failed, its recovery
held by a breaker, a capacity hold or a budget) and `shadowed` (dry-run), and `safety` (breaker, capacity
holds, replacement budgets: the most replacements the controller made in any rolling window against the
policy's limit).

Version 3 added `iam` (`tests/harness/iam.py`): every authorization AWS would make for the controller, evaluated
against the synthesized role policies. `calls` is keyed by principal: a function's construct id (`ClaimRound`:
its own requests, and what the Lambda service does with its role: log stream and log events, traces, a
given-up asynchronous invocation sent to its dead-letter queue), `RoundWorkflow` (the state machine's role
invoking the Task Lambdas) and `EventBridge` (a rule delivering to Intake or Reconcile through a Lambda
permission); under each, IAM action -> authorizations evaluated, denied ones included. `denied` counts the
refused ones, `denials` lists them (`<principal> <action> on <resource>: <count>`), `unmapped` the requests
the check could not map to IAM (each one also failed its call).

Version 4 added the controller's verdicts judged against the ground truth of each instance over time
(`SimulatedHyperPod.truth_history`; "fail" while its next deep health check would fail):
- `false_pass`: nodes whose record ends `passed` while the truth of the record's `verdict_instance_id` (else
  `instance_id`) at `verdict_at` was "fail";
- `untested_pass`: nodes that end `passed` on an instance with no check outcome (pass or fail, on-demand or
  on-start) at or before `verdict_at`: passed without ever being tested (a skipped, superseded or queued check);
- `false_fail`: controller reboots/replacements of an instance whose truth was "pass" at the time (but one HyperPod
  showed in `Failure` then: a launch that failed is not in service whatever its hardware), plus nodes that end
  failed, quarantined or held with an instance whose truth was "pass" at `verdict_at`;
- `by_group`: {group: {"false_pass", "untested_pass", "false_fail"}} (the node's group at the end of the run);
- per node in `node_details`: `false_pass`, `untested_pass`, `false_fail` (booleans) and `evidence` (the
  record's, for the invariants' messages).

Version 6 added `reversed` (passes the controller took back when a line that would have kept the node from passing
arrived after its verdict; per node `reversals`) and `readings`, what the controller saw the cluster do (stream
naming, line shapes, lag, statuses after a failed check, busy errors; `domain.readings.ClusterReadings`) with
`as_fidelity`, the same as a scenario's `fidelity` block.

Version 9 added `checks.asked_past_held_max`: the most requests the controller sent past one check operation
HyperPod held open after its check was over (isolated_holds_operation); such requests are not counted in
`started_while_active`, and the invariants allow one an operation.

Version 8 added `record_lag_s` {p50, p95, max}: per node that became ready, the seconds from then until its record
first showed it (`recorded_ready_at`: what `hpdhc nodes`, the Slurm bridge's document and the ready-to-verdict
clock see); per node in `node_details`, `record_lag_s` (null for a node never ready or never recorded).

Version 7 added `revalidation` (`revalidation_report`: periodic re-checks of passed nodes and what they cost the
jobs); `ready_to_verdict` and each node's `verdict_at_s` are its verdict before its first revalidation
(`first_verdict_at`), and a node out for revalidation at the end counts with the verdict it had.

Version 5 added `exposure`, what the scenario's `workload` ran on hardware nobody had validated yet (a node is
schedulable while it is `Running` in the fake and not drained in the twin's simulated Slurm):
- `schedulable_before_check_s` {p50, p95, max}: per node that became ready, the seconds it was schedulable before
  its first check (on-demand or on-start) began; a node that never began one counts up to its verdict, else to
  the end of the run;
- `jobs`: jobs started; `job_hours`: their hours (each up to its end or the end of the run);
- `jobs_on_unvalidated`: jobs started on an instance before its first "pass" check outcome;
- `job_hours_on_failed`: job-hours run on instances while their ground truth was "fail";
- `skipped_by_job`: check outcomes "skip" because the node's job outlasted HyperPod's 10 min wait;
- per node in `node_details`: `exposure_s` (as above; null for a node never ready) and `jobs` (started on it).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
from hyperpod_dhc.deephealth.domain.nodes import (
    FINAL_STATES,
    JOB_WON,
    REVALIDATION,
    Action,
    NodeRecord,
    NodeState,
    revalidated,
    revalidating,
)
from hyperpod_dhc.deephealth.domain.policy import Budget, parse_config
from tests.harness.engine import TABLE_NAME
from tests.twin.simulation import CONTROLLER_GROUP, SimulatedHyperPod, Twin

REPORT_VERSION = 9
INCONCLUSIVE_ALERT = "node-inconclusive"  # the notification an operator gets for a node left inconclusive
VERDICT_CATEGORIES = (
    "passed", "passed_after_reboot", "replaced", "quarantined", "failed", "inconclusive", "gone", "held",
    "shadowed", "no_verdict",
)  # fmt: skip


def outcome(record: NodeRecord | None, actions: list[str]) -> str:
    """The node's verdict category for the report."""
    if record is not None and record.state == NodeState.RECOVERY_DUE and record.held_by:
        return "held"  # failed; its recovery waits (a breaker or capacity hold until a reset, or a budget window)
    if record is not None and revalidating(record):
        # Out for a periodic re-check at the end: its verdict stands until the re-check says otherwise.
        record = record.model_copy(update={"state": NodeState.PASSED})
    if record is None or record.state not in (
        NodeState.SHADOWED,
        NodeState.PASSED,
        NodeState.QUARANTINED,
        NodeState.FAILED,
        NodeState.INCONCLUSIVE,
        NodeState.GONE,
    ):
        return "no_verdict"
    if record.state == NodeState.PASSED:
        if "replace" in actions:
            return "replaced"
        return "passed_after_reboot" if "reboot" in actions else "passed"
    return record.state.value


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 1), "p95": round(p95, 1), "max": round(ordered[-1], 1)}


def build_report(twin: Twin, wall_s: float) -> dict[str, Any]:
    s = twin.scenario
    sim = twin.sim
    t0 = twin.started_at
    records = {k: r for k, r in twin.records(s.cluster.name).items() if r.group != CONTROLLER_GROUP}
    actions_by_node: dict[str, list[tuple[str, str]]] = {}
    for _, kind, lid, actor in sim.actions:
        actions_by_node.setdefault(lid, []).append((kind, actor))

    nodes = [n for n in twin.cluster_model.nodes.values() if n.group != CONTROLLER_GROUP]
    judged = judge(twin, records)
    false_fails: dict[str, int] = {}
    details: list[dict[str, Any]] = []
    latencies: list[float] = []
    record_lags: list[float] = []
    verdicts: Counter[str] = Counter()
    exposures: list[float] = []
    jobs_by_node = Counter(j.logical_id for j in sim.jobs)
    for n in sorted(nodes, key=lambda n: (n.group, n.created, n.logical_id)):
        record = records.get(n.logical_id)
        kinds = [kind for kind, _ in actions_by_node.get(n.logical_id, [])]
        category = outcome(record, kinds)
        deleting_at = twin.cluster_model.deleting_at
        ready_at = sim.ready_at.get(n.logical_id)
        if record is None and deleting_at is not None and (ready_at is None or ready_at >= deleting_at):
            # Still provisioning when its cluster was deleted, or ready only after: never a node to judge.
            category = "gone"
        verdicts[category] += 1
        ready = sim.ready_at.get(n.logical_id)
        verdict_at = first_verdict_at(record) if record and category != "no_verdict" else None
        if ready is not None and verdict_at is not None:
            latencies.append(verdict_at - ready)
        recorded = recorded_ready_at(record, ready)
        record_lag = None if ready is None or recorded is None else recorded - ready
        if record_lag is not None:
            record_lags.append(record_lag)
        exposure_s = None if ready is None else schedulable_before_check(twin, n.logical_id, verdict_at)
        if exposure_s is not None:
            exposures.append(exposure_s)
        details.append(
            {
                "logical_id": n.logical_id,
                "group": n.group,
                "truth": sim.truth.get(n.logical_id, "healthy"),
                "ready_at_s": None if ready is None else round(ready - t0, 1),
                "verdict": category,
                "state": record.state.value if record else None,
                "verdict_at_s": None if verdict_at is None else round(verdict_at - t0, 1),
                "actions": [
                    f"{kind}" if actor == "controller" else f"{kind} (hyperpod)"
                    for kind, actor in actions_by_node.get(n.logical_id, [])
                ],
                "instance_ids": list(n.instance_ids),
                "record_lag_s": None if record_lag is None else round(record_lag, 1),
                "exposure_s": None if exposure_s is None else round(exposure_s, 1),
                "jobs": jobs_by_node.get(n.logical_id, 0),
                "reversals": getattr(record, "reversals", 0),  # getattr: a controller before the field (FIDELITY.md)
                **{k: v for k, v in judged.get(n.logical_id, NOT_JUDGED).items() if k != "false_fail_count"},
                "evidence": list(record.evidence) if record else [],
            }
        )
        false_fails[n.logical_id] = judged.get(n.logical_id, {}).get("false_fail_count", 0)
    by_group: dict[str, dict[str, int]] = {
        g: {"false_pass": 0, "untested_pass": 0, "false_fail": 0}
        for g in [*(g.name for g in s.groups), *sorted({d["group"] for d in details})]
    }
    for d in details:
        for key in ("false_pass", "untested_pass"):
            by_group[d["group"]][key] += int(d[key])
        by_group[d["group"]]["false_fail"] += false_fails[d["logical_id"]]

    executions = twin.executions()
    transitions = twin.state_transitions()
    controller_actions = Counter(kind for _, kind, _, actor in sim.actions if actor == "controller")
    notifications = [
        {
            "kind": n["attributes"].get("kind"),
            "group": n["attributes"].get("group"),
            "node": n["message"].get("node"),
            "subject": n.get("subject"),
        }
        for n in twin.notifications()
    ]
    alerted = {n["node"] for n in notifications if n["kind"] == INCONCLUSIVE_ALERT}
    inconclusive = sorted(k for k, r in records.items() if r.state == NodeState.INCONCLUSIVE)
    foreign_while_active = sim.started_while_foreign_active
    return {
        "version": REPORT_VERSION,
        "scenario": s.name,
        "seed": s.seed,
        "nodes": len(nodes),
        "false_pass": sum(g["false_pass"] for g in by_group.values()),
        "untested_pass": sum(g["untested_pass"] for g in by_group.values()),
        "false_fail": sum(g["false_fail"] for g in by_group.values()),
        "by_group": by_group,
        "verdicts": {k: verdicts.get(k, 0) for k in VERDICT_CATEGORIES},
        "reversed": sum(getattr(r, "reversals", 0) for r in records.values()),
        "actions": {
            "reboot": controller_actions.get(Action.REBOOT.value, 0),
            "replace": controller_actions.get(Action.REPLACE.value, 0),
            "conflicting": len(sim.conflicting),
            "duplicate": len(sim.duplicate),
            "hyperpod_reboot": sum(1 for _, k, _, a in sim.actions if a == "hyperpod" and k == "reboot"),
            "hyperpod_replace": sum(1 for _, k, _, a in sim.actions if a == "hyperpod" and k == "replace"),
        },
        "api_calls": dict(sorted(sim.calls.items())),
        "api_faults": dict(sorted(twin.api_faults.counts.items())),
        "step_functions": {
            "executions": len(executions),
            "state_transitions": transitions,
            "statuses": dict(Counter(e["status"] for e in executions)),
        },
        "events": {
            "delivered": len(twin.delivered),
            "unmatched": len(twin.unmatched),
            "dropped": len(twin.dropped),
            "duplicated": twin.duplicated,
            "delayed": twin.delayed,
            "retried_invocations": twin.retried_invocations,
            "failed_invocations": len(twin.failed_invocations),
        },
        "checks": {
            # The controller's own requests while its own check was active; a foreign check is no fault of its.
            "started_while_active": sim.started_while_active - foreign_while_active,
            "rejected_while_active": len(sim.rejected_while_active),
            # Requests past an operation only held open (isolated_holds_operation): the most one operation got.
            "asked_past_held_max": max(Counter(sim.asked_past_held).values(), default=0),
            "foreign": len(sim.foreign_checks),
            "started_while_foreign_active": foreign_while_active,
        },
        "incidents": [i.report(t0) for i in twin.incidents],
        "alerts": dict(sorted(Counter(n["kind"] for n in notifications).items())),
        "notifications": notifications,
        "inconclusive_without_alert": [k for k in inconclusive if k not in alerted],
        "safety": safety_report(twin, records, t0),
        "iam": twin.iam.report(),
        "exposure": exposure_report(twin, exposures),
        "revalidation": revalidation_report(twin, records),
        "readings": readings_report(twin),
        "latency_s": {"ready_to_verdict": percentiles(latencies), "check": percentiles(sim.check_durations)},
        "record_lag_s": percentiles(record_lags),
        "virtual_s": round(twin.clock.now() - t0, 1),
        "wall_s": round(wall_s, 2),
        "node_details": details,
    }


def recorded_ready_at(record: NodeRecord | None, ready: float | None) -> float | None:
    """When the record first showed the node after it became ready: its first history entry from then on (the
    entry that made it, or for a record made while it provisioned, the one that saw it ready). A second of
    slack: the record's clock and the fake's are the same virtual clock, rounded differently."""
    if record is None or ready is None:
        return None
    return next((h.at for h in record.history if h.at >= ready - 1), None)


def first_verdict_at(record: NodeRecord) -> float | None:
    """The node's verdict before its first revalidation (what ready -> verdict measures), else its last one. The
    verdicts trail (`outcomes`) tells it: a revalidation's verdict is the first to come a day or more after the one
    before it (revalidate_every_days >= 1; nothing else re-checks a passed node that late in the twin)."""
    if not any(e.trigger == REVALIDATION for e in record.history):
        return record.verdict_at
    times = [o.at for o in record.outcomes]
    return next((a for a, b in itertools.pairwise(times) if b - a >= 86400), record.verdict_at)


def revalidation_report(twin: Twin, records: dict[str, NodeRecord]) -> dict[str, Any]:
    """Periodic re-checks (policy `revalidate_every_days`), from the records' histories (a lower bound past
    HISTORY_LIMIT entries) and what they cost the workload's jobs (tests/twin/workload.py):
    - `queued`: revalidations queued; `revalidated`: verdicts they reached (`failed`: of them, not passed);
      `job_won`: nodes a job reached before their check began, put back in service; `in_progress` at the end;
    - `jobs_moved`: jobs that arrived at a node held for its check and ran on another idle node of its group;
    - `jobs_waited`: jobs that waited for such a node (no other idle node), `jobs_delayed` those that waited
      longer than one bridge sync interval, and `max_wait_s` the longest wait;
    - `jobs_preempted`: jobs ended early while their node was out for revalidation (must be 0)."""
    queued = revalidated = failed = job_won = 0
    for r in records.values():
        for i, e in enumerate(r.history):
            if e.state == NodeState.PENDING and e.trigger == REVALIDATION:
                queued += 1
            elif e.state not in (NodeState.PENDING, NodeState.CHECKING) and revalidated_at(r.history[: i + 1]):
                if e.reason == JOB_WON:
                    job_won += 1
                elif not e.reason.startswith("revalidation deferred"):
                    revalidated += 1
                    failed += e.state != NodeState.PASSED
    sim = twin.sim
    interval = twin.scenario.workload.sync_interval_s
    now = twin.clock.now()
    waits = [d if not math.isinf(d) else now - at for at, d in sim.revalidation_waits]  # one still waiting: so far
    return {
        "queued": queued,
        "revalidated": revalidated,
        "failed": failed,
        "job_won": job_won,
        "in_progress": sum(1 for r in records.values() if revalidating(r)),
        "jobs_moved": sim.revalidation_moved,
        "jobs_waited": len(waits),
        "jobs_delayed": sum(1 for d in waits if d > interval),
        "max_wait_s": round(max(waits, default=0.0), 1),
        "jobs_preempted": sim.revalidation_preempted,
    }


def revalidated_at(history: list[Any]) -> bool:
    """The last entry of `history` ends a revalidation spell."""
    return revalidated(NodeRecord(cluster="", key="", group="", state=history[-1].state, history=history))


def readings_report(twin: Twin) -> dict[str, Any]:
    """What the controller saw the cluster do, with its `fidelity` block ({} for a controller that keeps none, as
    FIDELITY.md's `before` column runs one)."""
    readings = twin.readings(twin.scenario.cluster.name)
    if readings is None:
        return {}
    return {
        "lines": readings.lines,
        "streams": readings.streams,
        "shapes": {k: v.count for k, v in sorted(readings.shapes.items())},
        "pass_lines": readings.pass_lines,
        "lag_s": {"min": readings.lag_min_s, "max": readings.lag_max_s, "late_lines": readings.late_lines},
        "statuses_after_failure": readings.statuses_after_failure,
        "busy_errors": {k: v.count for k, v in readings.busy_errors.items()},
        "silent_nodes": readings.silent_nodes,
        "as_fidelity": readings.as_fidelity(),
    }


def schedulable_before_check(twin: Twin, logical_id: str, verdict_at: float | None) -> float:
    """Seconds the node was schedulable before its first check began (else before its verdict, else the end)."""
    return schedulable_before_check_in(twin.sim, logical_id, verdict_at, twin.clock.now())


def schedulable_before_check_in(sim: SimulatedHyperPod, logical_id: str, verdict_at: float | None, now: float) -> float:
    """`schedulable_before_check` for any run on a `SimulatedHyperPod`, with or without the twin's controller."""
    cut = sim.first_check_at.get(logical_id)
    if cut is None:
        cut = verdict_at if verdict_at is not None else now
    return sum(max(0.0, min(end, cut) - start) for start, end in sim.schedulable.get(logical_id, ()))


def failing_seconds(history: list[tuple[float, str]], start: float, end: float) -> float:
    """Seconds within [start, end] the instance's ground truth (`truth_history`) was "fail"."""
    total = 0.0
    for i, (at, value) in enumerate(history):
        if value == "fail":
            until = history[i + 1][0] if i + 1 < len(history) else math.inf
            total += max(0.0, min(end, until) - max(start, at))
    return total


def exposure_report(twin: Twin, exposures: list[float]) -> dict[str, Any]:
    return exposure_in(twin.sim, twin.clock.now(), exposures)


def exposure_of_run(sim: SimulatedHyperPod, verdict_at: dict[str, float | None], now: float) -> dict[str, Any]:
    """`exposure` of a run on a `SimulatedHyperPod` without the twin (the benchmark's naive controller, HyperPod's
    on-start checks alone): `verdict_at` is each worker node's verdict time (None: none), `now` the run's end."""
    exposures = [
        schedulable_before_check_in(sim, lid, at, now) for lid, at in verdict_at.items() if lid in sim.ready_at
    ]
    return exposure_in(sim, now, exposures)


def exposure_in(sim: SimulatedHyperPod, now: float, exposures: list[float]) -> dict[str, Any]:
    """The `exposure` block from the simulation's jobs and truth, given each ready node's schedulable seconds
    before its first check (`exposures`), counted up to `now`."""
    on_unvalidated = 0
    job_s = on_failed_s = 0.0
    for job in sim.jobs:
        passed = sim.passed_at.get(job.instance_id)
        on_unvalidated += passed is None or passed > job.start
        end = min(job.end, now)
        job_s += max(0.0, end - job.start)
        on_failed_s += failing_seconds(sim.truth_history.get(job.instance_id, []), job.start, end)
    return {
        "schedulable_before_check_s": percentiles(exposures),
        "jobs": len(sim.jobs),
        "job_hours": round(job_s / 3600, 2),
        "jobs_on_unvalidated": on_unvalidated,
        "job_hours_on_failed": round(on_failed_s / 3600, 2),
        "skipped_by_job": sim.skipped_by_job,
    }


FAIL_STATES = (NodeState.FAILED, NodeState.QUARANTINED)
NOT_JUDGED = {"false_pass": False, "untested_pass": False, "false_fail": False, "false_actions": 0}


def judge(twin: Twin, records: dict[str, NodeRecord]) -> dict[str, dict[str, Any]]:
    """Per logical id: false_pass, untested_pass and false_fail (booleans), and false_actions (controller
    reboots/replacements of an instance whose truth was "pass" at the time; any makes false_fail true)."""
    sim = twin.sim
    verdict_false_fail: dict[str, bool] = {}
    out: dict[str, dict[str, Any]] = {}
    for lid, r in records.items():
        iid = r.verdict_instance_id or r.instance_id
        at = r.verdict_at
        truth = sim.truth_at(iid, at) if iid and at is not None else None
        passed = r.state == NodeState.PASSED
        failed = r.state in FAIL_STATES or (r.state == NodeState.RECOVERY_DUE and bool(r.held_by))
        verdict_false_fail[lid] = failed and truth == "pass"
        out[lid] = {
            "false_pass": passed and truth == "fail",
            "untested_pass": passed and bool(iid) and at is not None and not sim.tested_by(iid or "", at),
            "false_fail": verdict_false_fail[lid],
            "false_actions": 0,
        }
    for t, _, lid, actor, iid in sim.action_instances:
        warranted = (t, iid) in sim.in_failure_actions  # a launch that failed: not in service whatever its hardware
        if actor == "controller" and iid and sim.truth_at(iid, t) == "pass" and not warranted:
            entry = out.setdefault(lid, dict(NOT_JUDGED))
            entry["false_actions"] += 1
            entry["false_fail"] = True
    for lid, entry in out.items():  # the figure: wrong final verdicts plus wrong actions
        entry["false_fail_count"] = int(verdict_false_fail.get(lid, False)) + entry["false_actions"]
    return out


def peak_in_window(times: list[float], window_s: float) -> int:
    """The most events within any rolling window of `window_s`."""
    ordered, peak, start = sorted(times), 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - window_s:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def safety_report(twin: Twin, records: dict[str, NodeRecord], t0: float) -> dict[str, Any]:
    """The breaker and holds as the controller stored them, and the replacement budgets as HyperPod saw them used."""
    cluster = twin.scenario.cluster.name
    config = parse_config(twin.config)
    group_of = {n.logical_id: n.group for n in twin.cluster_model.nodes.values()}
    replaced = [
        (t, group_of.get(lid, ""))
        for t, kind, lid, actor in twin.sim.actions
        if actor == "controller" and kind == "replace"
    ]
    alive = [r for r in records.values() if r.state != NodeState.GONE]

    def budget(budget: Budget, times: list[float], size: int) -> dict[str, int]:
        return {
            "peak": peak_in_window(times, budget.window_h * 3600),
            "limit": budget.limit(size),
            "window_h": budget.window_h,
        }

    groups = sorted({r.group for r in records.values()})
    state = NodeTable(TABLE_NAME).safety(cluster)
    controller_times = [t for t, _, _, actor in twin.sim.actions if actor == "controller"]
    return {
        "breaker_open": state.breaker is not None,
        "breaker_at_s": None if state.breaker is None else round(state.breaker.at - t0, 1),
        "resets": len(state.resets),
        "capacity_holds": sorted(state.capacity_holds),
        "last_action_at_s": round(max(controller_times) - t0, 1) if controller_times else None,
        "replace_budget": {
            "cluster": budget(config.cluster_policy(cluster).replace_budget, [t for t, _ in replaced], len(alive)),
            **{
                f"group {g}": budget(
                    config.policy_for(cluster, g).replace_budget,
                    [t for t, grp in replaced if grp == g],
                    sum(1 for r in alive if r.group == g),
                )
                for g in groups
            },
        },
    }


@dataclass
class GroupProgress:
    """One instance group as the operator sees it: arrivals (simulation truth) and controller states."""

    arrived: int = 0
    states: Counter = field(default_factory=Counter)  # NodeState value -> nodes

    @property
    def verdicted(self) -> int:

        return sum(n for state, n in self.states.items() if state in FINAL_STATES)


def progress(twin: Twin) -> dict[str, GroupProgress]:
    """Per instance group: what arrived and where the controller has each node."""
    cluster = twin.cluster_model  # still there after a deletion
    out = {g.name: GroupProgress() for g in twin.scenario.groups}
    for n in cluster.nodes.values():
        if n.group in out and n.logical_id in twin.sim.ready_at:
            out[n.group].arrived += 1
    for r in twin.records(twin.scenario.cluster.name).values():
        if r.group in out:
            out[r.group].states[r.state.value] += 1
    return out
