"""`hpdhc`: the hyperpod-dhc command line.

    hpdhc status [--cluster C] [--group G] [--watch]      progress per cluster / per instance group
    hpdhc nodes C [--group G] [--state S]                 per instance
    hpdhc history C NODE                                  one node across instance ids
    hpdhc check C (--group G ... | --instance I ...) [--checks T ...]   queue on-demand checks
    hpdhc simulate [--scenario FILE] [--json] [--serve [--port P]]      the digital twin

The API commands sign with SigV4 from the standard AWS credential chain (--profile, --region) and find the
endpoint in the stack's ApiEndpoint output (--stack) unless --endpoint is given; --json prints raw JSON.
`simulate` without --json shows live progress, then tables per group and per instance; with --json it prints
one JSON report on stdout and nothing else. A bad scenario or request exits with code 2.
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
    api = argparse.ArgumentParser(add_help=False)
    api.add_argument("--endpoint", help="API URL (default: the stack's ApiEndpoint output)")
    api.add_argument("--stack", default="HyperPodDhc", help="stack to read the endpoint from")
    api.add_argument("--profile")
    api.add_argument("--region")
    api.add_argument("--json", action="store_true", help="print the API's JSON")

    status = sub.add_parser("status", parents=[api], help="progress per cluster or per instance group")
    status.add_argument("--cluster")
    status.add_argument("--group")
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=30.0,
        metavar="SECONDS",
        help="redraw every SECONDS (default 30) until interrupted",
    )
    nodes = sub.add_parser("nodes", parents=[api], help="per instance: state, verdict, attempts, timings")
    nodes.add_argument("cluster")
    nodes.add_argument("--group")
    nodes.add_argument("--state")
    history = sub.add_parser("history", parents=[api], help="one node's history across instance ids")
    history.add_argument("cluster")
    history.add_argument("node", help="NodeLogicalId or instance id")
    check = sub.add_parser("check", parents=[api], help="queue on-demand deep health checks")
    check.add_argument("cluster")
    selection = check.add_mutually_exclusive_group(required=True)
    selection.add_argument("--group", action="append", dest="groups", metavar="GROUP")
    selection.add_argument("--instance", action="append", dest="instances", metavar="ID")
    check.add_argument("--checks", nargs="+", metavar="TYPE", help="InstanceStress InstanceConnectivity ...")

    breakers = sub.add_parser("breakers", parents=[api], help="breaker, capacity holds, budgets and held nodes")
    breakers.add_argument("cluster")
    reset = sub.add_parser("reset-breaker", parents=[api], help="close the breaker (or a group's capacity hold)")
    reset.add_argument("cluster")
    reset.add_argument("--group", help="lift this instance group's bad-capacity hold instead of the cluster breaker")
    reset.add_argument("--reason", required=True, help="why it is safe to act again (kept in the audit trail)")

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
    sim.add_argument(
        "--serve",
        action="store_true",
        help="after the run, serve the twin's operator API on 127.0.0.1 for the other commands",
    )
    sim.add_argument("--port", type=int, default=8642)
    sim.add_argument("--serve-seconds", type=float, default=None, help="stop serving after this long")
    args = parser.parse_args(argv)
    if args.command == "simulate":
        return simulate(args)
    from tests.twin import operator_commands

    return operator_commands.run(args)


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
        )
    if args.json:
        json.dump(report, out)
        out.write("\n")
    elif not args.serve:
        _tables(report, out)
    return 0


def _run(
    scenario: Any,
    config: dict,
    progress_out: TextIO | None,
    every_s: float,
    serve: tuple[int, float | None] | None = None,
    out: TextIO = sys.stdout,
) -> dict:
    from tests.twin.report import build_report
    from tests.twin.simulation import Twin, progress
    from tests.twin.synth import synthesized_template
    from tests.twin.template import ControllerTemplate

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
        if serve is not None:
            if progress_out is not None:
                _tables(report, out)
            _serve(twin, *serve, out)
        return report


def _serve(twin: Any, port: int, seconds: float | None, out: TextIO) -> None:
    """Keep the twin alive behind a local operator API until interrupted (or `seconds` pass)."""
    import time

    from tests.twin.local_api import endpoint, serve

    server = serve(twin, port)
    print(
        f"serving the twin's operator API on {endpoint(server)}; try:\n"
        f"  hpdhc status --endpoint {endpoint(server)}\n"
        f"  hpdhc check {twin.scenario.cluster.name} --group {twin.scenario.groups[0].name} "
        f"--endpoint {endpoint(server)}\n(Ctrl-C to stop)",
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


def _tables(report: dict, out: TextIO) -> None:
    from tests.twin.report import VERDICT_CATEGORIES

    print(f"\nfinished after {hm(report['virtual_s'])} virtual ({report['wall_s']:.1f} s wall)", file=out)
    print(f"verdicts: {_kv(report['verdicts'])}", file=out)
    print(f"actions:  {_kv(report['actions'])}", file=out)
    print(f"api calls: {_kv(report['api_calls'])}", file=out)
    sf = report["step_functions"]
    print(f"step functions: {sf['executions']} executions, {sf['state_transitions']} state transitions", file=out)
    lat = report["latency_s"]
    print(
        f"ready -> verdict: p50 {hm(lat['ready_to_verdict']['p50'])}, p95 {hm(lat['ready_to_verdict']['p95'])}, "
        f"max {hm(lat['ready_to_verdict']['max'])} (check itself: p50 {hm(lat['check']['p50'])})",
        file=out,
    )

    rows = {}
    for d in report["node_details"]:
        rows.setdefault(d["group"], {"nodes": 0}).setdefault(d["verdict"], 0)
        rows[d["group"]]["nodes"] += 1
        rows[d["group"]][d["verdict"]] += 1
    columns = ["nodes", *VERDICT_CATEGORIES]
    print("\nper instance group", file=out)
    table([["group", *columns]] + [[g] + [str(r.get(c, 0)) for c in columns] for g, r in rows.items()], out)
    print("\nper instance", file=out)
    body = [["group", "node", "truth", "ready", "verdict", "at", "actions", "instances"]]
    for d in report["node_details"]:
        body.append(
            [
                d["group"],
                d["logical_id"][:8],
                d["truth"],
                hm(d["ready_at_s"]),
                d["verdict"],
                hm(d["verdict_at_s"]),
                ", ".join(d["actions"]) or "-",
                str(len(d["instance_ids"])),
            ]
        )
    table(body, out)


def table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths), file=out)


def _kv(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items())


def hm(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}"


if __name__ == "__main__":
    sys.exit(main())
