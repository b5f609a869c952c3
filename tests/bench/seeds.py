"""`python -m tests.bench.run --scenario NAME --seeds N`: ours against the floor on N seeds of one scenario.

One seed is one draw of arrivals, hardware faults and check durations; a ratio p95 from one seed is partly that
draw's luck. For each seed, the scenario with its `seed` replaced gets its floor (`tests/bench/floor.py`) and a
run of our controller on the twin (`run.run_ours`); the table gives both, ours / floor, and the medians.
`--jobs J` runs J seeds at a time, each in its own process (each synthesizes the template once, ~15 s).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from typing import Any

from hyperpod_dhc.hpdhc.render import table


@dataclass
class SeedRow:
    seed: int
    floor: float | None
    ratio_p95: float
    ratio_p95_lb: bool  # a node without a verdict at the horizon: a lower bound
    over_floor: float | None
    verdicts: int
    nodes: int
    wall_s: float


def run_one(name: str, seed: int, wall_budget_s: float | None = None, floor_max_nodes: int | None = None) -> SeedRow:
    """The floor and a run of ours on the scenario with this seed, in this process."""
    from tests.bench import run

    scenario, config = run.load(name)
    scenario = run.with_seed(scenario, seed)
    limit = run.FLOOR_MAX_NODES if floor_max_nodes is None else floor_max_nodes
    sides = run.run_loaded(
        scenario, config, ("ours",), template=_template(), wall_budget_s=wall_budget_s, floor_max_nodes=limit
    )
    ours = sides["ours"]
    return SeedRow(
        seed=seed,
        floor=None if ours.floor_ratio_p95 is None else round(ours.floor_ratio_p95, 4),
        ratio_p95=ours.ratio.p95,
        ratio_p95_lb=ours.ratio.p95_lb,
        over_floor=None if ours.over_floor is None else round(ours.over_floor, 3),
        verdicts=ours.nodes - ours.no_verdict,
        nodes=ours.nodes,
        wall_s=ours.wall_s,
    )


@functools.cache
def _template() -> Any:
    from tests.harness.synth import synthesized_template
    from tests.harness.template import ControllerTemplate

    return ControllerTemplate(synthesized_template())


def _quiet_worker() -> None:
    """A worker process: the Lambdas' JSON logs go nowhere (Powertools keeps the stream it first sees)."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")


def run_seeds(name: str, seeds: range, args: argparse.Namespace) -> int:
    from tests.bench.run import header, header_line

    out, progress = sys.stdout, sys.stderr
    head = header()
    if not args.json:
        print(header_line(head), file=out, flush=True)
    wall0 = time.monotonic()
    rows: list[SeedRow] = []

    def done(row: SeedRow) -> None:
        rows.append(row)
        print(
            f"{name} seed {row.seed}: ratio p95 {row.ratio_p95:.2f}, floor {_f(row.floor)}, "
            f"{row.wall_s:,.0f} s wall ({len(rows)}/{len(seeds)}, {time.monotonic() - wall0:,.0f} s in all)",
            file=progress,
            flush=True,
        )

    if args.jobs > 1:
        spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no moto, threads or patches inherited
        with ProcessPoolExecutor(args.jobs, mp_context=spawn, initializer=_quiet_worker) as pool:
            futures = [pool.submit(run_one, name, s, args.wall_budget, args.floor_max_nodes) for s in seeds]
            for future in as_completed(futures):
                done(future.result())
    else:
        with open(args.lambda_log or os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            for s in seeds:
                done(run_one(name, s, args.wall_budget, args.floor_max_nodes))
    rows.sort(key=lambda r: r.seed)
    summary = medians(rows)
    if args.json:
        doc = {**head, "scenario": name, "seeds": [asdict(r) for r in rows], "median": summary}
        json.dump(doc, out, indent=1)
        out.write("\n")
    else:
        render(name, rows, summary, out)
    return 0


def medians(rows: list[SeedRow]) -> dict[str, float | None]:
    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.median(known), 3) if known else None

    return {
        "floor": median([r.floor for r in rows]),
        "ratio_p95": median([r.ratio_p95 for r in rows]),
        "over_floor": median([r.over_floor for r in rows]),
    }


def render(name: str, rows: list[SeedRow], summary: dict[str, float | None], out: Any) -> None:
    print(file=out)
    lines = [["seed", "floor", "ours ratio p95", "ours / floor", "verdicts", "wall s"]]
    for r in rows:
        lb = ">=" if r.ratio_p95_lb else ""
        over = "-" if r.over_floor is None else f"{lb}{r.over_floor:.2f}"
        lines.append(
            [str(r.seed), _f(r.floor), f"{lb}{r.ratio_p95:.2f}", over, f"{r.verdicts}/{r.nodes}", f"{r.wall_s:,.1f}"]
        )
    lines.append(["median", _f(summary["floor"]), _f(summary["ratio_p95"]), _f(summary["over_floor"]), "", ""])
    print(f"  {name}: ours against the floor on {len(rows)} seeds (ratio = ready->verdict / own check time)", file=out)
    table(lines, out)
    out.flush()


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
