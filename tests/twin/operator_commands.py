"""`hpdhc status | nodes | history | check | breakers | reset-breaker`: the operator API from a shell (tables, or
--json)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any, TextIO

from tests.twin.cli import table
from tests.twin.operator_client import ApiError, OperatorClient

SHOWN_STATES = (
    "pending",
    "checking",
    "passed",
    "recovery_due",
    "recovering",
    "failed",
    "quarantined",
    "inconclusive",
    "gone",
    "shadowed",
)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        client = OperatorClient(args.endpoint, args.profile, args.region, args.stack)
        if args.command == "status":
            return _status(client, args, out)
        if args.command == "nodes":
            query = {k: v for k, v in (("group", args.group), ("state", args.state)) if v}
            return _print(args, out, client.pages(f"/clusters/{args.cluster}/nodes", query, "nodes"), _nodes_table)
        if args.command == "history":
            return _print(args, out, client.call("GET", f"/clusters/{args.cluster}/nodes/{args.node}"), _history)
        if args.command == "check":
            body: dict[str, Any] = {"groups": args.groups or [], "instances": args.instances or []}
            if args.checks:
                body["checks"] = args.checks
            return _print(args, out, client.call("POST", f"/clusters/{args.cluster}/checks", body), _check)
        if args.command == "breakers":
            return _print(args, out, client.call("GET", f"/clusters/{args.cluster}/breakers"), _breakers)
        if args.command == "reset-breaker":
            body = {"reason": args.reason, **({"group": args.group} if args.group else {})}
            return _print(args, out, client.call("POST", f"/clusters/{args.cluster}/breakers/reset", body), _reset)
    except ApiError as err:
        print(f"hpdhc: error: {err}", file=sys.stderr)
        return 2 if 400 <= err.status < 500 or err.status == 0 else 1
    raise AssertionError(args.command)


def _print(args: argparse.Namespace, out: TextIO, data: Any, render) -> int:
    if args.json:
        json.dump(data, out, indent=2)
        out.write("\n")
    else:
        render(data, out)
    return 0


def _status(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    while True:
        if args.cluster:
            data = client.call("GET", f"/clusters/{args.cluster}/groups")
            if args.group:
                data = {**data, "groups": [g for g in data["groups"] if g["group"] == args.group]}
        else:
            data = client.call("GET", "/clusters")
        if args.watch and not args.json:
            out.write("\x1b[2J\x1b[H")  # clear the screen: a progress view, redrawn in place
            print(f"hyperpod-dhc status at {datetime.now(UTC):%H:%M:%S} UTC (every {args.watch:g} s)", file=out)
        _print(args, out, data, _groups_table if args.cluster else _clusters_table)
        if not args.watch:
            return 0
        out.flush()
        time.sleep(args.watch)


def _counts(states: dict[str, int]) -> list[str]:
    return [str(states.get(s, 0)) for s in SHOWN_STATES]


def _clusters_table(data: dict, out: TextIO) -> None:
    rows = [["cluster", "live round", *SHOWN_STATES]]
    rows += [[c["cluster"], c["live_round"] or "-", *_counts(c["states"])] for c in data["clusters"]]
    table(rows, out)


def _groups_table(data: dict, out: TextIO) -> None:
    rows = [["group", "progress", "bar", "round", "GPU-h", *SHOWN_STATES]]
    for g in data["groups"]:
        done, total = g["progress"]["checked"], g["progress"]["total"]
        bar = "#" * round(10 * done / total) + "." * (10 - round(10 * done / total)) if total else "-"
        rows.append(
            [
                g["group"],
                f"{done}/{total}",
                bar,
                g["current_round"] or "-",
                f"{g['gpu_hours_in_checks']:g}",
                *_counts(g["states"]),
            ]
        )
    print(f"cluster {data['cluster']}", file=out)
    table(rows, out)


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M")


def _nodes_table(nodes: list[dict], out: TextIO) -> None:
    rows = [["node", "group", "state", "verdict", "attempts", "instance", "ready", "verdict at", "check s"]]
    rows += [
        [
            n["node"],
            n["group"],
            n["state"],
            n["verdict"] or "-",
            str(n["attempts"]),
            n["instance_id"] or "-",
            _when(n["ready_at"]),
            _when(n["verdict_at"]),
            f"{n['check_seconds']:g}",
        ]
        for n in nodes
    ]
    table(rows, out)
    print(f"{len(nodes)} node(s)", file=out)


def _history(node: dict, out: TextIO) -> None:
    print(
        f"node {node['node']} ({node['group']}, {node.get('instance_type') or '?'}): {node['state']}, "
        f"verdict {node['verdict'] or '-'}, {node['attempts']} recovery action(s)",
        file=out,
    )
    print(f"instances: {' -> '.join(node['instance_ids']) or '-'}", file=out)
    rows = [["at", "state", "instance", "reason", "trigger"]]
    rows += [
        [_when(h["at"]), h["state"], h["instance_id"] or "-", h["reason"][:80], (h["trigger"] or "-")[:40]]
        for h in node["history"]
    ]
    table(rows, out)


def _check(result: dict, out: TextIO) -> None:
    print(f"queued {len(result['queued'])} node(s) in {result['cluster']} for the next round", file=out)
    for node in result["queued"]:
        print(f"  + {node}", file=out)
    for refusal in result["not_queued"]:
        print(f"  - {refusal['node']}: {refusal['reason']}", file=out)
    print(result["note"], file=out)


def _breakers(data: dict, out: TextIO) -> None:
    breaker = data["breaker"]
    state = (
        f"OPEN since {_when(breaker['tripped']['at'])}: {breaker['tripped']['reason']}" if breaker["open"] else "closed"
    )
    print(f"cluster {data['cluster']}: breaker {state}", file=out)
    print(
        f"  failures in window: {breaker['failed_nodes']}/{breaker['verdicted_nodes']} nodes "
        f"(trips at {breaker['policy']['max_failure_pct']}% of >= {breaker['policy']['min_verdicts']}, "
        f"or {breaker['policy']['max_failures'] or '-'} nodes, in {breaker['policy']['window_h']} h)",
        file=out,
    )
    for group, hold in data["capacity_holds"].items():
        print(f"  capacity hold on {group} since {_when(hold['at'])}: {hold['reason']}", file=out)
    budgets = data["replace_budget"]
    rows = [["replace budget", "used", "limit", "window h"]]
    rows += [
        [scope, str(b["used"]), str(b["limit"]), str(b["window_h"])] for scope, b in [("cluster", budgets["cluster"])]
    ]
    rows += [[f"group {g}", str(b["used"]), str(b["limit"]), str(b["window_h"])] for g, b in budgets["groups"].items()]
    table(rows, out)
    if data["held_nodes"]:
        rows = [["held node", "group", "held by", "reason"]]
        rows += [[n["node"], n["group"], n["held_by"], n["reason"][:80]] for n in data["held_nodes"]]
        table(rows, out)


def _reset(result: dict, out: TextIO) -> None:
    if not result["reset"]:
        print(f"nothing reset: {result['message']}", file=out)
        return
    print(f"reset {result['scope']} on {result['cluster']}; {len(result['released'])} held node(s) released", file=out)
    for node in result["released"]:
        print(f"  + {node}", file=out)
