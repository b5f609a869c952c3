"""The latency floor of `make bench` (`tests/bench/floor.py`): the oracle's figure for bench-128, and the
programme against brute force on scenarios small enough to try every schedule."""

import itertools
import math
import random

import pytest

from tests.bench import floor as F
from tests.bench.run import load
from tests.simulation.conftest import BASE_CONFIG
from tests.twin.scenario import Scenario


def brute_force(trace: F.Trace, q: float) -> float:
    """The least ratio q-percentile over every ready-order schedule: each way of cutting the order into rounds,
    each round requested as soon as its last node is ready and the previous round ended."""
    best = math.inf
    for cuts in itertools.product((False, True), repeat=trace.n - 1):
        rounds, first, free = [], 0, -math.inf
        for i in range(trace.n):
            if i == trace.n - 1 or cuts[i]:
                start = max(free, trace.ready[i])
                rounds.append(F.Round(start, first, i + 1))
                free = start + F.CHECK_START_DELAY_S + max(trace.durations[first : i + 1])
                first = i + 1
        best = min(best, F.percentile(F.ratios(trace, rounds), q))
    return best


def assert_optimal(trace: F.Trace, q: float) -> None:
    best = brute_force(trace, q)
    found = F.floor(trace, q)
    assert found.above < best + 1e-9, "the bracket holds the optimum"
    assert best - 1e-9 <= found.ratio_p95 <= best + 1e-6, (trace, q)
    assert F.percentile(F.ratios(trace, found.rounds), q) == pytest.approx(found.ratio_p95)


def test_the_floor_of_bench_128_is_the_oracles():
    """`oracle_floor.py floor` on the same draws: ratio p95 2.14, T in (2.1444, 2.1445]."""
    scenario, config = load("bench-128")
    found = F.scenario_floor(scenario, config)
    assert found.nodes == 128
    assert 2.1444 < found.ratio_p95 <= 2.1445
    assert found.ratio_p95 - found.above <= F.TOLERANCE


@pytest.mark.parametrize("seed", [3, 4])
def test_the_programme_is_the_brute_force_optimum_on_a_small_scenario(seed):
    raw = {
        "version": 1,
        "name": "floor-small",
        "seed": seed,
        "horizon_s": 24 * 3600,
        "cluster": {"name": "small", "node_recovery": "None"},
        "groups": [
            {"name": "p5", "count": 7, "arrival": {"start_s": 0, "spread_s": 5400}},
            {"name": "g5", "count": 4, "arrival": {"start_s": 1800, "spread_s": 600}},
        ],
        "check_duration_s": {"InstanceStress": [900, 5400]},
    }
    scenario = Scenario.model_validate(raw)
    trace = F.extract(scenario, scenario.controller_config(BASE_CONFIG))
    assert trace.n == 11 and list(trace.ready) == sorted(trace.ready)
    for q in (0.95, 0.5):  # p95 of 11 nodes is their max; p50 lets 5 nodes be above it
        assert_optimal(trace, q)


def test_the_programme_is_the_brute_force_optimum_on_random_traces():
    """Ties in ready time, checks of very different lengths, nodes all waiting or all apart."""
    rng = random.Random(14)
    for _ in range(150):
        n = rng.randint(1, 9)
        span = rng.choice([0.0, 900.0, 3600.0, 20000.0])
        ready = sorted(round(rng.uniform(0, span), rng.choice([-2, 3])) for _ in range(n))
        durations = [rng.choice([rng.uniform(300, 900), rng.uniform(2700, 5400), 3600.0]) for _ in range(n)]
        trace = F.Trace("random", 0, tuple(ready), tuple(durations))
        assert_optimal(trace, rng.choice([0.5, 0.75, 0.95]))
