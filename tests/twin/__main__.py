"""The digital twin from a shell: the controller against a simulated HyperPod cluster, no AWS account.

    python -m tests.twin [--scenario FILE] [--json] [--timeline FILE.html] [--serve [--port P]]
                                                                        (also `hpdhc simulate ...`)

Without --json: live progress, then tables per group and per instance (logical id and current instance id).
With --json: one JSON report on stdout and nothing else (the Lambdas' logs go to --lambda-log). --serve keeps the
twin alive behind a local operator API for the `hpdhc` commands. --timeline writes the run as one self-contained
HTML page (`hyperpod_dhc.hpdhc.timeline`: nodes by group against time) and prints its path (on stderr with --json). A
bad scenario exits with code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, TextIO

from hyperpod_dhc.hpdhc.render import hm, table

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_SCENARIO = REPO_ROOT / "tests" / "scenarios" / "demo.json"
BAR = 30


def main(argv: list[str] | None = None, prog: str = "python -m tests.twin") -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="run the controller against a simulated HyperPod cluster (no AWS account)"
    )
    parser.add_argument("--scenario", type=Path, default=DEMO_SCENARIO, help="scenario JSON (default: the demo)")
    parser.add_argument("--json", action="store_true", help="print one JSON report on stdout, nothing else")
    parser.add_argument(
        "--progress-every",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="virtual seconds between progress lines (default 1800)",
    )
    parser.add_argument(
        "--lambda-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="where the Lambdas' JSON logs and metrics go (default: a temporary file)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="after the run, serve the twin's operator API on 127.0.0.1 for the other commands",
    )
    parser.add_argument(
        "--timeline",
        type=Path,
        default=None,
        metavar="FILE",
        help="after the run, write it as one self-contained HTML page (nodes by group against time)",
    )
    parser.add_argument("--port", type=int, default=8642)
    parser.add_argument("--serve-seconds", type=float, default=None, help="stop serving after this long")
    return simulate(parser.parse_args(argv))


def simulate(args: argparse.Namespace) -> int:
    from tests.harness.synth import base_config
    from tests.twin.scenario import ScenarioError, load_scenario

    out = sys.stdout
    base = base_config()
    try:
        scenario, config = load_scenario(args.scenario, base)
    except ScenarioError as err:
        print(f"hpdhc: error: {err}", file=sys.stderr)
        return 2
    log_path = args.lambda_log or Path(tempfile.mkstemp(prefix=f"hpdhc-{scenario.name}-", suffix=".log")[1])
    if not args.json:
        print(
            f"scenario {scenario.name}: {scenario.nodes} nodes in {len(scenario.groups)} group(s), "
            f"NodeRecovery={scenario.cluster.node_recovery}, horizon {hm(scenario.horizon_s)}",
            file=out,
        )
        print(f"lambda logs: {log_path}", file=out)
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    with log_path.open("w") as log, contextlib.redirect_stdout(log):
        report = _run(
            scenario,
            config,
            None if args.json else out,
            args.progress_every,
            serve=(args.port, args.serve_seconds) if args.serve else None,
            out=out,
            timeline=args.timeline,
        )
    if args.json:
        json.dump(report, out)
        out.write("\n")
    elif not args.serve:
        tables(report, out)
    if args.timeline is not None and not args.serve:  # with --serve, written (and said) before serving
        print(f"timeline: {args.timeline}", file=sys.stderr if args.json else out)
    return 0


def _run(
    scenario: Any,
    config: dict,
    progress_out: TextIO | None,
    every_s: float,
    serve: tuple[int, float | None] | None = None,
    out: TextIO = sys.stdout,
    timeline: Path | None = None,
) -> dict:
    from tests.harness.synth import synthesized_template
    from tests.harness.template import ControllerTemplate
    from tests.twin.report import build_report, progress
    from tests.twin.simulation import Twin

    template = ControllerTemplate(synthesized_template())
    with Twin(scenario, template, config) as twin:
        if progress_out is not None:
            next_line = [twin.started_at]

            def show(now: float) -> None:
                if now >= next_line[0]:
                    next_line[0] = now + every_s
                    _progress(twin, progress(twin), now - twin.started_at, progress_out)

            twin.on_step.append(show)
        wall = twin.run()
        if progress_out is not None:
            _progress(twin, progress(twin), twin.clock.now() - twin.started_at, progress_out)
        report = build_report(twin, wall)
        if timeline is not None:
            from tests.twin.timeline import write_timeline

            write_timeline(twin, timeline)
        if serve is not None:
            if progress_out is not None:
                tables(report, out)
            if timeline is not None:
                print(f"timeline: {timeline}", file=out if progress_out is not None else sys.stderr, flush=True)
            _serve(twin, *serve, out)
        return report


def _serve(twin: Any, port: int, seconds: float | None, out: TextIO) -> None:
    """Keep the twin alive behind a local operator API until interrupted (or `seconds` pass)."""
    from tests.twin.local_api import endpoint, serve

    server = serve(twin, port)
    print(
        f"serving the twin's operator API on {endpoint(server)}; try:\n"
        f"  hpdhc status --endpoint {endpoint(server)}\n"
        f"  hpdhc nodes {twin.scenario.cluster.name} --endpoint {endpoint(server)}\n"
        f"  hpdhc check {twin.scenario.cluster.name} --group {twin.scenario.groups[0].name} "
        f"--endpoint {endpoint(server)}\n"
        f"  hpdhc timeline {twin.scenario.cluster.name} --until last --endpoint {endpoint(server)}\n(Ctrl-C to stop)",
        file=out,
        flush=True,
    )
    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
            if not twin.running() and twin.scheduled == 0:
                twin.advance(60)  # idle: let virtual time (reconcile, recoveries) move on slowly
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


def _progress(twin: Any, groups: dict, elapsed: float, out: TextIO) -> None:
    total = twin.scenario.nodes
    done = sum(g.verdicted for g in groups.values())
    filled = round(BAR * done / total) if total else BAR
    print(f"t+{hm(elapsed)} [{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} nodes with a verdict", file=out)
    for name, g in groups.items():
        s = g.states
        print(
            f"    {name:<20} arrived={g.arrived:<4} waiting={s['pending']:<4} checking={s['checking']:<4} "
            f"passed={s['passed']:<4} failed={s['recovery_due'] + s['failed']:<3} recovering={s['recovering']:<3} "
            f"quarantined={s['quarantined']:<3} inconclusive={s['inconclusive']}",
            file=out,
        )
    out.flush()


def tables(report: dict, out: TextIO) -> None:
    """The report as a summary, a table per instance group and a table per instance."""
    from tests.twin.report import VERDICT_CATEGORIES

    print(f"\nfinished after {hm(report['virtual_s'])} virtual ({report['wall_s']:.1f} s wall)", file=out)
    print(f"verdicts: {_kv(report['verdicts'])}", file=out)
    print(f"actions:  {_kv(report['actions'])}", file=out)
    print(
        f"against the ground truth: false_pass={report['false_pass']} (passed a faulty instance), "
        f"untested_pass={report['untested_pass']} (passed, never tested), "
        f"false_fail={report['false_fail']} (acted on or failed a healthy instance)",
        file=out,
    )
    print(f"api calls: {_kv(report['api_calls'])}", file=out)
    sf = report["step_functions"]
    print(f"step functions: {sf['executions']} executions, {sf['state_transitions']} state transitions", file=out)
    lat = report["latency_s"]
    print(
        f"ready -> verdict: p50 {hm(lat['ready_to_verdict']['p50'])}, p95 {hm(lat['ready_to_verdict']['p95'])}, "
        f"max {hm(lat['ready_to_verdict']['max'])} (check itself: p50 {hm(lat['check']['p50'])})",
        file=out,
    )
    lag = report["record_lag_s"]
    print(f"ready -> on record: p50 {hm(lag['p50'])}, p95 {hm(lag['p95'])}, max {hm(lag['max'])}", file=out)
    ex = report["exposure"]
    print(
        f"exposure: schedulable before its first check p95 {hm(ex['schedulable_before_check_s']['p95'])}; "
        f"jobs on unvalidated nodes {ex['jobs_on_unvalidated']} of {ex['jobs']}, "
        f"checks skipped by a job {ex['skipped_by_job']}",
        file=out,
    )

    rows: dict[str, dict[str, int]] = {}
    for d in report["node_details"]:
        rows.setdefault(d["group"], {"nodes": 0}).setdefault(d["verdict"], 0)
        rows[d["group"]]["nodes"] += 1
        rows[d["group"]][d["verdict"]] += 1
    columns = ["nodes", *VERDICT_CATEGORIES]
    print("\nper instance group", file=out)
    table([["group", *columns]] + [[g] + [str(r.get(c, 0)) for c in columns] for g, r in rows.items()], out)
    print("\nper instance (node: NodeLogicalId; instance: its current instance id, of `instances` so far)", file=out)
    body = [["group", "node", "instance", "truth", "ready", "verdict", "at", "actions", "instances"]]
    for d in report["node_details"]:
        body.append(
            [
                d["group"],
                d["logical_id"],
                d["instance_ids"][-1] if d["instance_ids"] else "-",
                d["truth"],
                hm(d["ready_at_s"]),
                d["verdict"],
                hm(d["verdict_at_s"]),
                ", ".join(d["actions"]) or "-",
                str(len(d["instance_ids"])),
            ]
        )
    table(body, out)


def _kv(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


if __name__ == "__main__":
    sys.exit(main())
