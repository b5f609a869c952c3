"""`hpdhc`: the hyperpod-dhc command line. `hpdhc simulate` runs the digital twin.

    hpdhc simulate [--scenario FILE] [--json] [--progress-every SECONDS] [--lambda-log FILE]

Without --json: live progress per instance group, then a table per group and per instance.
With --json: one JSON report on stdout and nothing else there. A bad scenario exits with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, TextIO

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_SCENARIO = REPO_ROOT / "tests" / "scenarios" / "demo.json"
BAR = 30


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hpdhc", description="hyperpod-dhc command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser("simulate", help="run the controller against a simulated HyperPod cluster (no AWS account)")
    sim.add_argument("--scenario", type=Path, default=DEMO_SCENARIO, help="scenario JSON (default: the demo)")
    sim.add_argument("--json", action="store_true", help="print one JSON report on stdout, nothing else")
    sim.add_argument(
        "--progress-every",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="virtual seconds between progress lines (default 1800)",
    )
    sim.add_argument(
        "--lambda-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="where the Lambdas' JSON logs and metrics go (default: a temporary file)",
    )
    args = parser.parse_args(argv)
    return simulate(args)


def simulate(args: argparse.Namespace) -> int:
    from tests.twin.scenario import ScenarioError, load_scenario

    out = sys.stdout
    base = json.loads((REPO_ROOT / "cdk.json").read_text())["context"].get("hyperpod-dhc", {})
    try:
        scenario, config = load_scenario(args.scenario, base)
    except ScenarioError as err:
        print(f"hpdhc: error: {err}", file=sys.stderr)
        return 2
    log_path = args.lambda_log or Path(tempfile.mkstemp(prefix=f"hpdhc-{scenario.name}-", suffix=".log")[1])
    if not args.json:
        print(
            f"scenario {scenario.name}: {scenario.nodes} nodes in {len(scenario.groups)} group(s), "
            f"NodeRecovery={scenario.cluster.node_recovery}, horizon {_hm(scenario.horizon_s)}",
            file=out,
        )
        print(f"lambda logs: {log_path}", file=out)
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    with log_path.open("w") as log, contextlib.redirect_stdout(log):
        report = _run(scenario, config, None if args.json else out, args.progress_every)
    if args.json:
        json.dump(report, out)
        out.write("\n")
    else:
        _tables(report, out)
    return 0


def _run(scenario: Any, config: dict, out: TextIO | None, every_s: float) -> dict:
    from tests.twin.report import build_report
    from tests.twin.simulation import Twin, progress
    from tests.twin.synth import synthesized_template
    from tests.twin.template import ControllerTemplate

    template = ControllerTemplate(synthesized_template())
    with Twin(scenario, template, config) as twin:
        if out is not None:
            next_line = [twin.started_at]

            def show(now: float) -> None:
                if now >= next_line[0]:
                    next_line[0] = now + every_s
                    _progress(twin, progress(twin), now - twin.started_at, out)

            twin.on_step.append(show)
        wall = twin.run()
        if out is not None:
            _progress(twin, progress(twin), twin.clock.now() - twin.started_at, out)
        return build_report(twin, wall)


def _progress(twin: Any, groups: dict, elapsed: float, out: TextIO) -> None:
    total = twin.scenario.nodes
    done = sum(g.verdicted for g in groups.values())
    filled = round(BAR * done / total) if total else BAR
    print(f"t+{_hm(elapsed)} [{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} nodes with a verdict", file=out)
    for name, g in groups.items():
        s = g.states
        print(
            f"    {name:<20} arrived={g.arrived:<4} waiting={s['pending']:<4} checking={s['checking']:<4} "
            f"passed={s['passed']:<4} failed={s['recovery_due'] + s['failed']:<3} recovering={s['recovering']:<3} "
            f"quarantined={s['quarantined']:<3} inconclusive={s['inconclusive']}",
            file=out,
        )
    out.flush()


def _tables(report: dict, out: TextIO) -> None:
    from tests.twin.report import VERDICT_CATEGORIES

    print(f"\nfinished after {_hm(report['virtual_s'])} virtual ({report['wall_s']:.1f} s wall)", file=out)
    print(f"verdicts: {_kv(report['verdicts'])}", file=out)
    print(f"actions:  {_kv(report['actions'])}", file=out)
    print(f"api calls: {_kv(report['api_calls'])}", file=out)
    sf = report["step_functions"]
    print(f"step functions: {sf['executions']} executions, {sf['state_transitions']} state transitions", file=out)
    lat = report["latency_s"]
    print(
        f"ready -> verdict: p50 {_hm(lat['ready_to_verdict']['p50'])}, p95 {_hm(lat['ready_to_verdict']['p95'])}, "
        f"max {_hm(lat['ready_to_verdict']['max'])} (check itself: p50 {_hm(lat['check']['p50'])})",
        file=out,
    )

    rows = {}
    for d in report["node_details"]:
        rows.setdefault(d["group"], {"nodes": 0}).setdefault(d["verdict"], 0)
        rows[d["group"]]["nodes"] += 1
        rows[d["group"]][d["verdict"]] += 1
    columns = ["nodes", *VERDICT_CATEGORIES]
    print("\nper instance group", file=out)
    _table([["group", *columns]] + [[g] + [str(r.get(c, 0)) for c in columns] for g, r in rows.items()], out)
    print("\nper instance", file=out)
    body = [["group", "node", "truth", "ready", "verdict", "at", "actions", "instances"]]
    for d in report["node_details"]:
        body.append(
            [
                d["group"],
                d["logical_id"][:8],
                d["truth"],
                _hm(d["ready_at_s"]),
                d["verdict"],
                _hm(d["verdict_at_s"]),
                ", ".join(d["actions"]) or "-",
                str(len(d["instance_ids"])),
            ]
        )
    _table(body, out)


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths), file=out)


def _kv(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def _hm(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}"


if __name__ == "__main__":
    sys.exit(main())
