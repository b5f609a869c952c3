"""The latency floor of a bench scenario: how low any controller's ratio p95 can go under HyperPod's rules.

HyperPod runs one on-demand deep health check per cluster at a time. A check (a "round") is requested at some
time s for nodes that are ready by then; they begin at s + 30 s (`CHECK_START_DELAY_S`) and each ends its own
duration d later; the next round can be requested once the slowest of them ended. A node's ready -> verdict
is at least s + 30 + d - ready, and the benchmark's ratio divides that by d (`tests/bench/run.py`: ready ->
verdict / the node's own check time; p95 nearest rank).

The floor here is the exact optimum of that ratio p95 over the schedules a controller can reasonably run:
rounds that take the nodes in ready order, each a contiguous block of it (first in, first checked), each
requested as soon as both its last node is ready and the previous round ended. It counts first checks only
(no reboot, replacement or re-check), a verdict the instant a check ends and no turnover between rounds, and
the durations of the twin's draws: the k-th duration the scenario's seed draws goes to the k-th node to be
ready, as the twin hands them out when checks begin in that order. Anything real adds to it, so a
controller's ratio divided by this floor says how much of its latency is its own doing. Another order
(a clairvoyant one, knowing the durations in advance) could go a little lower; no controller knows them.

For a given bound T, a dynamic programme over the ready order finds the fewest nodes above T: the state is
(nodes checked so far, how many of them were above T), its value the earliest time the cluster is free again,
and an earlier free time never hurts what follows, so keeping only that value is exact. The p95 allows
n - 1 - rank nodes above it; the least T for which that many suffice is found by bisection, and the schedule
found at the last feasible T gives the floor's value.

    python -m tests.bench.floor [--scenario NAME|FILE] [--seeds N [--first-seed S]]
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.fakes.hyperpod import CHECK_START_DELAY_S, Clock
from tests.twin.scenario import Scenario

P95 = 0.95
TOLERANCE = 1e-6  # the bisection stops when the bracket of the optimum is this narrow (a ratio)
EPS = 1e-6  # seconds: a start this close to a deadline still meets it (the twin's clock is epoch floats)


@dataclass(frozen=True)
class Trace:
    """What the floor needs of a scenario: each node's ready time (seconds from the start, ascending) and the
    duration of its first check."""

    scenario: str
    seed: int
    ready: tuple[float, ...]
    durations: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.ready)


@dataclass(frozen=True)
class Round:
    start: float  # when the round is requested (seconds from the start)
    first: int  # the nodes, in ready order: [first, end)
    end: int


@dataclass(frozen=True)
class Floor:
    ratio_p95: float  # the best schedule's ratio p95
    above: float  # no schedule of the class has a ratio p95 at or below this (the bisection's lower end)
    rounds: tuple[Round, ...]
    nodes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "ratio_p95": round(self.ratio_p95, 4),
            "above": round(self.above, 6),
            "nodes": self.nodes,
            "rounds": [[round(r.start, 1), r.end - r.first] for r in self.rounds],
        }


# -- the trace, drawn by the twin's own code ------------------------------------------------------------
def extract(scenario: Scenario, config: dict[str, Any]) -> Trace:
    """Ready times and first-check durations as the twin draws them: the scenario's arrivals, hardware and
    lifecycle scripts in `SimulatedHyperPod`, run to the horizon without a controller (a node ready after the
    horizon is measured for no controller either); then one duration per node from the seed's duration stream,
    in ready order, with its group's policy checks. On-start checks and jobs are left out: they draw from the
    duration stream, or cost time, and change neither when a node is ready nor what its check would take."""
    from hyperpod_dhc.deephealth.domain.policy import parse_config
    from tests.bench.naive import arrivals, create_cluster
    from tests.twin.simulation import SimulatedHyperPod

    plain = scenario.model_copy(
        update={
            "groups": tuple(g.model_copy(update={"on_start_deep_health_checks": ()}) for g in scenario.groups),
            "workload": scenario.workload.model_copy(update={"utilisation": 0.0, "busy_rate": 0.0}),
        }
    )
    clock = Clock()
    sim = SimulatedHyperPod(plain, clock)
    t0 = clock.now()
    cluster = create_cluster(sim, plain)
    order: dict[str, int] = {}  # logical id -> arrival index: ties in ready time keep arrival order
    for when, group in arrivals(plain, t0):
        if when > clock.now():
            clock.advance(when - clock.now())
        lid = sim.arrive(group)
        if lid is not None:
            order[lid] = len(order)
    clock.advance(max(0.0, t0 + plain.horizon_s - clock.now()))
    policy = parse_config(config)
    checks = {g.name: policy.policy_for(plain.cluster.name, g.name).checks for g in plain.groups}
    ready = sorted((at, order[lid], lid) for lid, at in sim.ready_at.items() if lid in order)
    # The twin draws a check's duration when the node begins it; here, in ready order.
    durations = [sim._duration(checks[cluster.nodes[lid].group]) for _, _, lid in ready]
    return Trace(plain.name, plain.seed, tuple(at - t0 for at, _, _ in ready), tuple(durations))


# -- the measure, as tests/bench/run.py takes it --------------------------------------------------------
def rank(n: int, q: float) -> int:
    """The index of the q-percentile in n sorted values (nearest rank, Python's round: `run.stat`)."""
    return min(n - 1, round(q * (n - 1)))


def allowed_above(n: int, q: float) -> int:
    """How many nodes may be above the q-percentile."""
    return n - 1 - rank(n, q)


def ratios(trace: Trace, rounds: Sequence[Round]) -> list[float]:
    """Each node's ready -> verdict / its check duration under a schedule (checked: one round at a time, every
    node once, none before it is ready)."""
    out = [math.nan] * trace.n
    free = -math.inf
    for r in rounds:
        assert r.start >= free - EPS, "a round requested while the previous one is active"
        assert r.first < r.end, "an empty round"
        longest = 0.0
        for i in range(r.first, r.end):
            assert math.isnan(out[i]), f"node {i} in two rounds"
            assert trace.ready[i] <= r.start + EPS, f"node {i} in a round before it is ready"
            d = trace.durations[i]
            out[i] = (r.start + CHECK_START_DELAY_S + d - trace.ready[i]) / d
            longest = max(longest, d)
        free = r.start + CHECK_START_DELAY_S + longest
    assert not any(math.isnan(x) for x in out), "a node never checked"
    return out


def percentile(values: Sequence[float], q: float) -> float:
    return sorted(values)[rank(len(values), q)]


# -- the optimum ---------------------------------------------------------------------------------------
def fewest_above(trace: Trace, bound: float, allowed: int) -> list[Round] | None:
    """A ready-order schedule with at most `allowed` nodes whose ratio exceeds `bound` (as few as possible);
    None if there is none."""
    return _Programme(trace, bound, allowed).solve()


class _Programme:
    """The dynamic programme for one bound.

    A node is late if its round is requested after its deadline, ready + (bound - 1) * d - 30 s.
    earliest[j][k]: the earliest the cluster is free once the first j nodes are checked, k of them late (with the
    last round's start, first node and the late count before it). From each such state the next round is a block
    [j, m] of the ready order, requested at max(free, ready of node m):
    - blocks of nodes already waiting when the cluster is free go at once. Such a block ends only where the next
      node is not waiting or is longer than all of the block's nodes: a waiting node no longer than the block's
      longest can always join it (the round ends no later, and every later round starts no later);
    - a block that waits for its last node is requested at that node's ready time, from any state free by then:
      of those, the one with the fewest late nodes is the best.
    A state is dropped once the nodes still to check that are due before it is free, with its late ones, exceed
    `allowed`; a block stops growing once it holds more late nodes than that."""

    def __init__(self, trace: Trace, bound: float, allowed: int) -> None:
        self.n, self.ready, self.durations = trace.n, trace.ready, trace.durations
        self.allowed = allowed
        late_by = bound - 1.0  # a node's deadline: its ready time + late_by x its duration - the start delay
        self.deadline = [r + late_by * d - CHECK_START_DELAY_S for r, d in zip(self.ready, self.durations, strict=True)]
        self.longer = _next_longer(self.durations)
        self.due = _Due(self.deadline)
        # earliest[j][late] = (free, the last round's start, its first node, the late count before it)
        self.earliest: list[dict[int, tuple[float, float, int, int]]] = [{} for _ in range(self.n + 1)]
        self.earliest[0][0] = (-math.inf, -math.inf, 0, 0)

    def solve(self) -> list[Round] | None:
        for j in range(self.n):
            self.due.drop_before(j)
            states = self._states(j)
            if states:
                self._waiting_blocks(j, states)
                self._blocks_waiting_for_last(j, states)
        return self._schedule()

    def _reach(self, m: int, late: int, free: float, start: float, j: int, late_before: int) -> None:
        known = self.earliest[m].get(late)
        if known is None or free < known[0]:
            self.earliest[m][late] = (free, start, j, late_before)

    def _states(self, j: int) -> list[tuple[int, float]]:
        """(late, free) worth extending: fewer late nodes first, each free earlier than the one before."""
        states: list[tuple[int, float]] = []
        for late in sorted(self.earliest[j]):
            free = self.earliest[j][late][0]
            if (not states or free < states[-1][1]) and late + self.due.count_before(free - EPS) <= self.allowed:
                states.append((late, free))
        return states

    def _waiting_blocks(self, j: int, states: list[tuple[int, float]]) -> None:
        """Blocks of nodes already waiting when the cluster is free, requested then."""
        ready, deadline = self.ready, self.deadline
        for late_before, free in states:
            if free <= ready[j]:
                return  # this state and the following ones are free before node j is ready
            late, q, counted = late_before, j, j
            while q < self.n and ready[q] < free:
                cut = min(self.longer[q], bisect.bisect_left(ready, free, q))  # the block's last node + 1
                late += sum(map((free - EPS).__gt__, deadline[counted:cut]))
                if late > self.allowed:
                    break
                # node q is the block's longest
                self._reach(cut, late, free + CHECK_START_DELAY_S + self.durations[q], free, j, late_before)
                q = counted = cut

    def _blocks_waiting_for_last(self, j: int, states: list[tuple[int, float]]) -> None:
        """Blocks requested when their last node is ready, from the first node ready once some state is free."""
        ready, deadline, durations = self.ready, self.deadline, self.durations
        first = bisect.bisect_left(ready, states[-1][1], j)
        waiting = deadline[j:first]  # the block's deadlines not passed yet (a heap)
        heapq.heapify(waiting)
        late_in_block, longest, best = 0, max(durations[j:first], default=0.0), len(states)
        for m in range(first, self.n):
            start = ready[m]
            heapq.heappush(waiting, deadline[m])
            while waiting and waiting[0] < start - EPS:
                heapq.heappop(waiting)
                late_in_block += 1
            if states[0][0] + late_in_block > self.allowed:
                return
            longest = max(longest, durations[m])
            while best > 0 and states[best - 1][1] <= start:
                best -= 1  # the states free by `start` are the last ones; the first of them has the fewest late
            if best < len(states) and states[best][0] + late_in_block <= self.allowed:
                late_before = states[best][0]
                late = late_before + late_in_block
                self._reach(m + 1, late, start + CHECK_START_DELAY_S + longest, start, j, late_before)

    def _schedule(self) -> list[Round] | None:
        """The rounds that reach the end with the fewest late nodes, followed back."""
        if not self.earliest[self.n]:
            return None
        rounds: list[Round] = []
        late, m = min(self.earliest[self.n]), self.n
        while m > 0:
            _, start, j, late_before = self.earliest[m][late]
            rounds.append(Round(start, j, m))
            m, late = j, late_before
        return rounds[::-1]


def _next_longer(durations: Sequence[float]) -> list[int]:
    """For each node, the first node after it in ready order with a longer check (n if none)."""
    out = [len(durations)] * len(durations)
    stack: list[int] = []
    for i, d in enumerate(durations):
        while stack and durations[stack[-1]] < d:
            out[stack.pop()] = i
        stack.append(i)
    return out


class _Due:
    """How many of the nodes not yet checked (from node j on) have a deadline before a time: a Fenwick tree over
    the deadlines' ranks, nodes leaving it as j advances."""

    def __init__(self, deadline: Sequence[float]) -> None:
        order = sorted(range(len(deadline)), key=deadline.__getitem__)
        self._sorted = [deadline[k] for k in order]
        self._rank = [0] * len(deadline)
        for r, k in enumerate(order):
            self._rank[k] = r + 1
        n = len(deadline)
        self._tree = [0] * (n + 1)
        for i in range(1, n + 1):  # every node present: the tree of all ones, built in O(n)
            self._tree[i] += 1
            parent = i + (i & -i)
            if parent <= n:
                self._tree[parent] += self._tree[i]
        self._next = 0

    def drop_before(self, j: int) -> None:
        while self._next < j:
            i = self._rank[self._next]
            while i < len(self._tree):
                self._tree[i] -= 1
                i += i & -i
            self._next += 1

    def count_before(self, t: float) -> int:
        i, total = bisect.bisect_left(self._sorted, t), 0
        while i > 0:
            total += self._tree[i]
            i -= i & -i
        return total


def floor(trace: Trace, q: float = P95, tolerance: float = TOLERANCE) -> Floor:
    """The least ratio q-percentile over ready-order schedules (exact to `tolerance`)."""
    allowed = allowed_above(trace.n, q)
    low, high = 1.0, 2.0  # nothing is within 1.0: a check cannot end before it began
    best = fewest_above(trace, high, allowed)
    while best is None:
        low, high = high, high * 2
        best = fewest_above(trace, high, allowed)
    high = percentile(ratios(trace, best), q)  # the schedule's own value: at most `high`, often less
    while high - low > tolerance:
        mid = (low + high) / 2
        found = fewest_above(trace, mid, allowed)
        if found is None:
            low = mid
        else:
            best, high = found, percentile(ratios(trace, found), q)
    return Floor(high, low, tuple(best), trace.n)


def scenario_floor(scenario: Scenario, config: dict[str, Any]) -> Floor:
    return floor(extract(scenario, config))


# -- command line --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from tests.bench.run import load, with_seed

    parser = argparse.ArgumentParser(prog="python -m tests.bench.floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="bench-128", metavar="NAME", help="bench-128 or a FILE")
    parser.add_argument("--seeds", type=int, default=0, help="the floor of N seeds of the scenario instead")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    scenario, config = load(args.scenario)
    seeds = range(args.first_seed, args.first_seed + args.seeds) if args.seeds else [scenario.seed]
    out = {}
    for seed in seeds:
        f = scenario_floor(with_seed(scenario, seed), config)
        out[seed] = f.to_json()
        if not args.json:
            sizes = ", ".join(str(r.end - r.first) for r in f.rounds)
            print(
                f"{scenario.name} seed {seed}: floor ratio p95 {f.ratio_p95:.4f} (optimum in ({f.above:.6f}, "
                f"{f.ratio_p95:.6f}]), {f.nodes} nodes, {len(f.rounds)} rounds of {sizes}"
            )
    if args.json:
        json.dump({"scenario": scenario.name, "floors": out}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
