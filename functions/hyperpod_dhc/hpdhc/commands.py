"""One function per operator command: call the API, then print a table (or the API's JSON with --json).

Nothing here knows the controller's vocabulary: node states, verdicts and reasons are shown as the API returns
them, and the state columns are the keys of the API's `states` counts (every state, in the API's order).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TextIO

from hyperpod_dhc.deephealth.evidence.text import printable
from hyperpod_dhc.hpdhc import timeline as pictures
from hyperpod_dhc.hpdhc.client import Json, OperatorClient
from hyperpod_dhc.hpdhc.render import table, when
from hyperpod_dhc.hpdhc.timeline_page import render_html


def status(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    """Per cluster, or per instance group of one cluster; redrawn every --watch seconds."""
    while True:
        if args.cluster:
            data = client.list_groups(args.cluster)
            if args.group:
                data = {**data, "groups": [g for g in data["groups"] if g["group"] == args.group]}
                if "capacity_holds" in data:
                    data["capacity_holds"] = {g: h for g, h in data["capacity_holds"].items() if g == args.group}
        else:
            data = client.list_clusters()
        if args.watch and not args.json:
            getattr(out, "raw", out.write)("\x1b[2J\x1b[H")  # clear the screen: a progress view, redrawn in place
            print(
                f"hyperpod-dhc status at {datetime.now(timezone.utc):%H:%M:%S} UTC (every {args.watch:g} s)", file=out
            )
        _print(args, out, data, _groups_table if args.cluster else _clusters_table)
        if not args.watch:
            return 0
        out.flush()
        time.sleep(args.watch)


def nodes(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    return _print(args, out, client.list_nodes(args.cluster, args.group, args.state), _nodes_table)


def history(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    return _print(args, out, client.get_node(args.cluster, args.node), _history)


def check(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    result = client.request_checks(args.cluster, args.groups or [], args.instances or [], args.checks)
    return _print(args, out, result, _check)


def breakers(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    return _print(args, out, client.get_breakers(args.cluster), _breakers)


def reset_breaker(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    return _print(args, out, client.reset_breaker(args.cluster, args.reason, args.group), _reset)


def readings(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    data = client.get_readings(args.cluster)
    if args.as_fidelity:  # a scenario's `fidelity` block: feed it to `hpdhc simulate` to replay the cluster
        json.dump(data.get("as_fidelity", {}), out, indent=2)
        out.write("\n")
        return 0
    return _print(args, out, data, _readings)


def capture(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    """The node's last check as a captured check, written to --out (`hpdhc readings classify` judges it)."""
    document = client.capture(args.cluster, args.node)
    with open(args.out, "w", encoding="utf-8") as written:
        json.dump(document, written, indent=1, ensure_ascii=False)
        written.write("\n")
    captured = document.get("captured", {})
    print(
        f"wrote {args.out}: {len(document.get('events', []))} event(s) of {printable(str(captured.get('node')))}'s "
        f"last check ({printable(str(captured.get('state')))}); judge it with: hpdhc readings classify {args.out}",
        file=out,
    )
    return 0


def timeline(client: OperatorClient, args: argparse.Namespace, out: TextIO) -> int:
    """Every node's history (one `get_node` each) as one self-contained HTML page, nodes by group against time
    (`hyperpod_dhc.hpdhc.timeline`); with --json, the page's data instead. The Api function reads the cluster's records
    for each node it is asked about: thousands of nodes take minutes (`client.NODE_WORKERS` at a time)."""
    listed = client.list_nodes(args.cluster, args.group)
    documents = client.get_nodes(args.cluster, [n["node"] for n in listed])
    now, last = time.time(), pictures.last_change(documents)
    end = (last if last is not None else now) if args.until == "last" else max(now, last or now)
    asked = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    picture = pictures.build(
        args.cluster,
        documents,
        end=end,
        source=f"hpdhc timeline {args.cluster}{' --group ' + args.group if args.group else ''}: {client.endpoint}, "
        f"{asked}.",
        since_s=None if args.since is None else args.since * 3600,
    )
    if args.json:
        json.dump(pictures.to_json(picture), out, indent=2)
        out.write("\n")
        return 0
    path = args.out or f"timeline-{args.cluster}.html"
    with open(path, "w", encoding="utf-8") as page:
        page.write(render_html(picture))
    print(f"wrote {path}: {pictures.summary(picture)}", file=out)
    return 0


COMMANDS: dict[str, Callable[[OperatorClient, argparse.Namespace, TextIO], int]] = {
    "status": status,
    "nodes": nodes,
    "history": history,
    "check": check,
    "breakers": breakers,
    "reset-breaker": reset_breaker,
    "readings show": readings,
    "readings capture": capture,
    "timeline": timeline,
}


def _print(args: argparse.Namespace, out: TextIO, data: Any, render: Callable[[Any, TextIO], None]) -> int:
    if args.json:
        json.dump(data, out, indent=2)
        out.write("\n")
    else:
        render(data, out)
    return 0


def _state_columns(rows: list[Json]) -> list[str]:
    """The states the API counts, in its order (every row has them all; a union keeps an older API readable)."""
    return list(dict.fromkeys(state for row in rows for state in row["states"]))


def _clusters_table(data: Json, out: TextIO) -> None:
    states = _state_columns(data["clusters"])
    rows = [["cluster", "live round", *states]]
    rows += [
        [c["cluster"], c["live_round"] or "-", *(str(c["states"].get(s, 0)) for s in states)] for c in data["clusters"]
    ]
    table(rows, out)
    for c in data["clusters"]:
        _stopped(c["cluster"], c, out)


def _stopped(cluster: str, data: Json, out: TextIO) -> None:
    """The cluster's open breaker and its groups' capacity holds, one line each: they stop recovery until an
    operator resets them. An API that does not say (an older one) shows nothing."""
    breaker, holds = data.get("breaker") or {}, data.get("capacity_holds") or {}
    lines = []
    if breaker.get("open"):
        tripped = breaker.get("tripped") or {}
        lines.append(f"{cluster}: BREAKER OPEN since {when(tripped.get('at'))}: {tripped.get('reason', '?')}")
    lines += [
        f"{cluster}: CAPACITY HOLD on {g} since {when(hold.get('at'))}: {hold.get('reason', '?')}"
        for g, hold in holds.items()
    ]
    for line in lines:
        print(f"  {line}", file=out)
    if lines:
        print(f"  (`hpdhc breakers {cluster}`: held nodes and budgets; `hpdhc reset-breaker` resets)", file=out)


def _groups_table(data: Json, out: TextIO) -> None:
    states = _state_columns(data["groups"])
    rows = [["group", "progress", "bar", "round", "GPU-h", *states]]
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
                *(str(g["states"].get(s, 0)) for s in states),
            ]
        )
    print(f"cluster {data['cluster']}", file=out)
    table(rows, out)
    _stopped(data["cluster"], data, out)


def _nodes_table(nodes: list[Json], out: TextIO) -> None:
    rows = [["node", "instance", "group", "state", "verdict", "attempts", "ready", "verdict at", "check s"]]
    rows += [
        [
            n["node"],
            n["instance_id"] or "-",
            n["group"],
            n["state"],
            n["verdict"] or "-",
            str(n["attempts"]),
            when(n["ready_at"]),
            when(n["verdict_at"]),
            f"{n['check_seconds']:g}",
        ]
        for n in nodes
    ]
    table(rows, out)
    print(f"{len(nodes)} node(s)", file=out)


def _history(node: Json, out: TextIO) -> None:
    print(
        f"node {node['node']} ({node['group']}, {node.get('instance_type') or '?'}): {node['state']}, "
        f"verdict {node['verdict'] or '-'}, {node['attempts']} recovery action(s)",
        file=out,
    )
    print(f"instances: {' -> '.join(node['instance_ids']) or '-'}", file=out)
    rows = [["at", "state", "instance", "reason", "trigger"]]
    rows += [
        [when(h["at"]), h["state"], h["instance_id"] or "-", h["reason"][:80], (h["trigger"] or "-")[:40]]
        for h in node["history"]
    ]
    table(rows, out)


def _check(result: Json, out: TextIO) -> None:
    print(f"queued {len(result['queued'])} node(s) in {result['cluster']} for the next round", file=out)
    for node in result["queued"]:
        print(f"  + {node}", file=out)
    for refusal in result["not_queued"]:
        print(f"  - {refusal['node']}: {refusal['reason']}", file=out)
    print(result["note"], file=out)


def _breakers(data: Json, out: TextIO) -> None:
    breaker = data["breaker"]
    state = (
        f"OPEN since {when(breaker['tripped']['at'])}: {breaker['tripped']['reason']}" if breaker["open"] else "closed"
    )
    print(f"cluster {data['cluster']}: breaker {state}", file=out)
    print(
        f"  failures in window: {breaker['failed_nodes']}/{breaker['verdicted_nodes']} nodes "
        f"(trips at {breaker['policy']['max_failure_pct']}% of >= {breaker['policy']['min_verdicts']}, "
        f"or {breaker['policy']['max_failures'] or '-'} nodes, in {breaker['policy']['window_h']} h)",
        file=out,
    )
    for group, hold in data["capacity_holds"].items():
        print(f"  capacity hold on {group} since {when(hold['at'])}: {hold['reason']}", file=out)
    budgets = data["replace_budget"]
    rows = [["replace budget", "used", "limit", "window h"]]
    scopes = [("cluster", budgets["cluster"]), *((f"group {g}", b) for g, b in budgets["groups"].items())]
    rows += [[scope, str(b["used"]), str(b["limit"]), str(b["window_h"])] for scope, b in scopes]
    table(rows, out)
    if data["held_nodes"]:
        rows = [["held node", "group", "held by", "reason"]]
        rows += [[n["node"], n["group"], n["held_by"], n["reason"][:80]] for n in data["held_nodes"]]
        table(rows, out)


def _readings(data: Json, out: TextIO) -> None:
    print(f"cluster {data['cluster']}: {data.get('lines', 0)} result line(s) read", file=out)
    if not data.get("lines"):
        print(f"  {data.get('note', 'no result line read yet')}", file=out)
        return
    for title, key in (("streams named by", "streams"), ("formats", "formats"), ("instance in", "instance_in_line")):
        counts = ", ".join(f"{k} {v}" for k, v in sorted(data[key].items(), key=lambda kv: -kv[1]))
        print(f"  {title}: {counts}", file=out)
    rows = [["line shape (level pattern)", "count", "example"]]
    rows += [[printable(shape), str(s["count"]), printable(s["example"])[:70]] for shape, s in data["shapes"].items()]
    table(rows, out)
    lag = data["lag"]
    print(
        f"  lag: {lag['min_s'] if lag['min_s'] is not None else '-'}..{lag['max_s']} s, "
        f"{lag['late_lines']} line(s) later than the settle time then; settle "
        + ", ".join(f"{g} {s:.0f} s" for g, s in lag["settle_s"].items())
        + "; revisit "
        + ", ".join(f"{g} {s:.0f} s" for g, s in lag["revisit_s"].items()),
        file=out,
    )
    statuses = ", ".join(f"{k} {v}" for k, v in data["statuses_after_failure"].items()) or "-"
    print(f"  status after a failed check: {statuses}", file=out)
    busy = ", ".join(
        f"{printable(k)} {v['count']} ({printable(v['example'])[:60]})" for k, v in data["busy_errors"].items()
    )
    busy = busy or "-"
    print(f"  busy errors: {busy}", file=out)
    print(f"  nodes back with no line about them: {data['silent_nodes']}; pass lines: {data['pass_lines']}", file=out)
    print(f"  as a twin fidelity block: {json.dumps(data['as_fidelity'])}", file=out)


def _reset(result: Json, out: TextIO) -> None:
    if not result["reset"]:
        print(f"nothing reset: {result['message']}", file=out)
        return
    print(f"reset {result['scope']} on {result['cluster']}; {len(result['released'])} held node(s) released", file=out)
    for node in result["released"]:
        print(f"  + {node}", file=out)
