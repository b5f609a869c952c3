"""The twin's workload: jobs on nodes, and when each node was schedulable (for the report's `exposure`).

`busy_rate`: a node that becomes ready starts one job with that probability (queued-then-skipped checks).
`utilisation`: every schedulable node (`Running`, not drained, not claimed by a check) runs jobs about that share
of its time, lengths from `job_s`, idle gaps exponential; a job dies with its instance (reboot, replacement,
move, `Failure`). `drain` / `resume` are the twin's Slurm drain: a drained node takes no new job.

A mixin of `SimulatedHyperPod` (it reads the fake's clock, timers and clusters); at most one pending timer per
node, so 10 000 nodes stay cheap.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tests.fakes.checks import IN_CHECK
from tests.fakes.hyperpod import Cluster, Node
from tests.twin.scenario import CONTROLLER_GROUP, Scenario

KEEPS_JOB = frozenset({"Running", IN_CHECK})  # statuses a job survives; any other (a reboot, replacement...) ends it


@dataclass
class Job:
    """One job on one instance, from `start` to `end` (moved earlier if the node left `Running` mid-job)."""

    start: float
    logical_id: str
    instance_id: str
    end: float
    kind: Literal["ready", "steady"]  # workload.busy_rate (one at ready) | workload.utilisation


class Workload:
    """Jobs and schedulable spans; `SimulatedHyperPod` calls `_observe(n)` after each transition of `n`."""

    scenario: Scenario
    _t: float
    _clusters: dict[str, Cluster]
    _workload: random.Random
    _jobs: random.Random

    if TYPE_CHECKING:  # the fake's, through SimulatedHyperPod (never defined here: they would shadow it)

        def _catch_up(self) -> None: ...
        def _at(self, c: Cluster, delay: float, fn: Any) -> None: ...

    def _init_workload(self) -> None:
        self.jobs: list[Job] = []  # every job the workload started, in start order
        self._steady_job: dict[str, Job] = {}  # logical id -> its latest utilisation job
        self._job_timer: set[str] = set()  # logical ids with a job arrival pending (at most one timer each)
        self.drained: set[str] = set()  # logical ids drained in (simulated) Slurm: no new jobs
        self.locked: set[str] = set()  # logical ids in the controller's lock (its reservation): no new jobs
        # Logical id -> [start, end] spans while Running and not drained (end: inf while it lasts).
        self.schedulable: dict[str, list[list[float]]] = {}
        # Revalidation (the report's `revalidation`): the twin sets `revalidating` (logical id -> whether the
        # controller has the node out for a periodic re-check). A job that arrives at a node it keeps from jobs runs
        # on another idle node of the group (`moved`), else it waits for the node (`waits`: arrival, then delay).
        self.revalidating: Any = None
        self.revalidation_moved = 0
        self.revalidation_waits: list[list[float]] = []  # [arrival, delay s] (delay inf while it waits)
        self.revalidation_preempted = 0  # jobs ended early while their node was out for revalidation
        self._waiting_job: dict[str, list[float]] = {}  # logical id -> its waiting arrival's entry

    def _maybe_busy(self, c: Cluster, n: Node) -> None:
        """The workload: a node that just became ready (Running) starts a job with probability busy_rate."""
        w = self.scenario.workload
        if not w.busy_rate or n.status != "Running" or c.name != self.scenario.cluster.name:
            return
        if n.logical_id in self.drained or n.logical_id in self.locked:  # gated at boot: Slurm starts no job on it
            return
        if self._workload.random() < w.busy_rate:
            until = self._t + self._workload.uniform(*w.job_s)
            self.jobs.append(Job(self._t, n.logical_id, n.instance_id, until, "ready"))
            # What set_busy does, without its catch-up: this runs inside a transition of the fake.
            n.busy_until = until

    # -- Slurm, as far as the workload needs it ------------------------------------------------------
    def drain(self, logical_id: str) -> None:
        """Drain the node in (simulated) Slurm: it takes no new job; a running one goes on."""
        self._catch_up()
        self.drained.add(logical_id)
        self._observe_id(logical_id)

    def resume(self, logical_id: str) -> None:
        """Undo `drain`: the node takes jobs again."""
        self._catch_up()
        self.drained.discard(logical_id)
        self._observe_id(logical_id)

    def lock(self, logical_ids: set[str]) -> None:
        """The controller's lock holds exactly these nodes: none of them takes a new job; a running one goes on."""
        self._catch_up()
        changed = self.locked ^ logical_ids
        self.locked = set(logical_ids)
        for logical_id in changed:
            self._observe_id(logical_id)

    def _observe_id(self, logical_id: str) -> None:
        c = self._clusters.get(self.scenario.cluster.name)
        n = c.nodes.get(logical_id) if c is not None else None
        if n is not None:
            self._observe(n)

    def _schedulable(self, n: Node) -> bool:
        c = self._clusters.get(self.scenario.cluster.name)
        return (
            n.status == "Running"
            and n.logical_id not in self.drained
            and n.logical_id not in self.locked
            and c is not None
            and c.status == "InService"
            and c.nodes.get(n.logical_id) is n
        )

    def _observe(self, n: Node) -> None:
        """Called after every transition of the fake that may change `n`'s status (and on drain/resume): keeps its
        schedulable spans, ends its job if its instance went away, and keeps one job arrival pending while it is
        schedulable. O(1): cheap at 10 000 nodes."""
        if n.group == CONTROLLER_GROUP:
            return
        lid = n.logical_id
        now = self._schedulable(n)
        spans = self.schedulable.setdefault(lid, [])
        was = bool(spans) and spans[-1][1] == math.inf
        if now and not was:
            spans.append([self._t, math.inf])
        elif was and not now:
            spans[-1][1] = self._t
        if n.status not in KEEPS_JOB:  # rebooting, replaced, moving, Failure: the job dies with the instance
            job = self._steady_job.get(lid)
            if job is not None and job.end > self._t:
                job.end = self._t
                n.busy_until = min(n.busy_until, self._t)
                self.revalidation_preempted += bool(self.revalidating and self.revalidating(lid))
        if now and lid in self._waiting_job:  # the job that waited for the node's revalidation starts now
            self._start_waiting_job(n)
        if now and self.scenario.workload.utilisation and lid not in self._job_timer:
            self._next_job(n, self._t)

    def _next_job(self, n: Node, after: float) -> None:
        """The node's next job arrives an idle gap after `after` (exponential: mean job * (1 - u) / u)."""
        w = self.scenario.workload
        mean_job = (w.job_s[0] + w.job_s[1]) / 2
        gap = 0.0 if w.utilisation >= 1.0 else self._jobs.expovariate(w.utilisation / ((1 - w.utilisation) * mean_job))
        self._job_timer.add(n.logical_id)
        c = self._clusters[self.scenario.cluster.name]
        self._at(c, max(0.0, after - self._t) + gap, lambda: self._job_arrives(c, n))

    def _job_arrives(self, c: Cluster, n: Node) -> None:
        lid = n.logical_id
        self._job_timer.discard(lid)
        claimed = c.check is not None and lid in c.check.pending
        if (not self._schedulable(n) or claimed) and self._held_for_revalidation(c, n):
            return
        if not self._schedulable(n):
            return  # `_observe` sets the next arrival when the node is schedulable again
        if n.busy_until > self._t or claimed:
            self._next_job(n, max(self._t, n.busy_until))  # busy, or claimed by the check: try again later
            return
        job = Job(self._t, lid, n.instance_id, self._t + self._jobs.uniform(*self.scenario.workload.job_s), "steady")
        self.jobs.append(job)
        self._steady_job[lid] = job
        n.busy_until = job.end
        self._next_job(n, job.end)

    # -- revalidation: what a periodic re-check costs the jobs -------------------------------------------------
    def _held_for_revalidation(self, c: Cluster, n: Node) -> bool:
        """A job arrived at a node the controller keeps from jobs for its revalidation: like Slurm, start it on
        another idle node of the group if there is one, else let it wait for this one (started by `_observe` when
        the node is schedulable again). False: the node is held for anything else (the caller decides)."""
        if self.revalidating is None or n.busy_until > self._t or not self.revalidating(n.logical_id):
            return False
        spare = next(
            (
                m
                for m in sorted(c.nodes.values(), key=lambda m: m.logical_id)
                if m.group == n.group
                and m is not n
                and m.busy_until <= self._t
                and self._schedulable(m)
                and not (c.check is not None and m.logical_id in c.check.pending)
                and m.logical_id not in self._waiting_job
            ),
            None,
        )
        if spare is not None:
            self.revalidation_moved += 1
            self._start_job(spare)
        elif n.logical_id not in self._waiting_job:
            entry = [self._t, math.inf]
            self.revalidation_waits.append(entry)
            self._waiting_job[n.logical_id] = entry
        return True

    def _start_waiting_job(self, n: Node) -> None:
        entry = self._waiting_job.pop(n.logical_id)
        entry[1] = self._t - entry[0]
        if n.busy_until <= self._t:
            self._start_job(n)

    def _start_job(self, n: Node) -> None:
        """A utilisation job starts on `n` now (its own next arrival follows the job, as after any job)."""
        end = self._t + self._jobs.uniform(*self.scenario.workload.job_s)
        job = Job(self._t, n.logical_id, n.instance_id, end, "steady")
        self.jobs.append(job)
        self._steady_job[n.logical_id] = job
        n.busy_until = job.end
        if n.logical_id not in self._job_timer:
            self._next_job(n, job.end)
