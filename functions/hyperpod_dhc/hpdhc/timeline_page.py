"""The page of a timeline (`hyperpod_dhc.hpdhc.timeline`): one self-contained HTML file, inline CSS and the inline SVG
`hyperpod_dhc.hpdhc.timeline_svg` draws, with no script but the data itself (`<script type="application/json"
id="timeline-data">`, the timeline's `to_json`, which `read_html` reads back): no network, no build step. A heading, a
legend (Okabe & Ito's colour-blind-safe palette), the time axis kept on top; then each group: its heading, its summary
row, and a row per node, problem nodes first (`is_problem`). Past `FOLD_OVER` nodes, each group's passed nodes fold
into a closed `<details>`: 1,000 nodes read as a few summary rows and their problem nodes.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from datetime import datetime, timezone

from hyperpod_dhc.hpdhc.timeline import STATES, Json, Node, Timeline, summary, to_json
from hyperpod_dhc.hpdhc.timeline_svg import (
    LEGEND,
    MARKS,
    MIN_FINAL_W,
    SUMMARY_H,
    Page,
    axis,
    mark_shape,
    rows,
    summary_row,
)

# Okabe & Ito's colour-blind-safe palette, plus greys; `held` is `recovery-due` hatched (the pattern the axis's SVG
# defines, `timeline_svg.axis`).
COLOURS = {
    "waiting": "#c8c8c8",
    "in-check": "#56b4e9",
    "recovery-due": "#e69f00",
    "held": "url(#hatch-held)",
    "recovering": "#cc79a7",
    "passed": "#009e73",
    "failed": "#d55e00",
    "quarantined": "#1a1a1a",
    "inconclusive": "#f0e442",
    "gone": "#f2f2f2",
    "shadowed": "#0072b2",
    "unknown": "#8c8c8c",
}

DATA_BLOCK = re.compile(r'<script type="application/json" id="timeline-data">(.*?)</script>', re.S)


def read_html(page: str) -> Json:
    """The data a page embeds."""
    match = DATA_BLOCK.search(page)
    if match is None:
        raise ValueError("no timeline data in this page")
    data: Json = json.loads(match.group(1))
    return data


FOLD_OVER = 200  # past that many nodes, each group's passed nodes (no reboot, no replacement) fold under a count
# The rows' order in a group: the worst final state first, passed (after a reboot or replacement) last.
PROBLEM_ORDER: tuple[str | None, ...] = (
    "quarantined", "failed", "held", "recovery-due", "recovering", "inconclusive", "unknown", None, "gone",
    "shadowed", "in-check", "waiting", "passed",
)  # fmt: skip


def is_problem(node: Node) -> bool:
    """Anything but a node that passed without a reboot or replacement: no verdict yet, failed, recovered..."""
    return node.final != "passed" or bool(node.marks)


def rows_of(nodes: list[Node]) -> tuple[list[Node], list[Node]]:
    """A group's problem nodes, worst final state first (then in the timeline's order), and its passed ones."""
    problems = [n for n in nodes if is_problem(n)]
    rank = {state: i for i, state in enumerate(PROBLEM_ORDER)}
    problems.sort(key=lambda n: rank.get(n.final, rank["unknown"]))  # stable: arrival order within a state
    return problems, [n for n in nodes if not is_problem(n)]


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _group(page: Page, nodes: list[Node], name: str, fold: bool) -> str:
    """A group: its heading, its summary row, its problem nodes, then its passed ones (folded when `fold`)."""
    finals = Counter(n.final or "no record" for n in nodes)
    counts = ", ".join(f"{n} {state}" for state, n in finals.most_common())
    problems, passed = rows_of(nodes)
    head = [summary_row(page, nodes)]
    parts = [
        f'<section class="group"><h2>{_e(name)} <span class="gc">{len(nodes)} node(s): {_e(counts)}</span></h2>',
        rows(page, problems + ([] if fold else passed), head, SUMMARY_H),
    ]
    if fold and passed:
        parts.append(
            f'<details class="passed"><summary>{len(passed)} passed node(s), none rebooted or replaced</summary>'
            f"{rows(page, passed)}</details>"
        )
    parts.append("</section>")
    return "\n".join(parts)


CSS = """
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1a1a1a; margin: 16px 20px;
  background: #fff; }
h1 { font-size: 18px; margin: 0 0 2px; }
.sub { color: #555; margin: 0 0 8px; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 0 0 6px; align-items: center; }
.legend span { display: inline-flex; align-items: center; gap: 5px; white-space: nowrap; }
.sw { width: 22px; height: 11px; display: inline-block; border: 1px solid rgba(0,0,0,.25); }
.legend svg { overflow: visible; }
svg text { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 11px; }
.tick { text-anchor: middle; fill: #444; }
.axl { text-anchor: end; fill: #666; font-style: italic; }
.axl.ol { text-anchor: start; }
.grid { stroke: #000; stroke-opacity: .12; }
.band.b0 { fill: #5b7fa6; fill-opacity: .07; } .band.b1 { fill: #fff; fill-opacity: 0; }
.rl.r0 { fill: #7b96b8; } .rl.r1 { fill: #a9bdd6; } .rl { stroke: #fff; stroke-width: 1; }
.rt { text-anchor: middle; fill: #fff; font-weight: 600; pointer-events: none; }
svg { display: block; width: 100%; height: auto; max-width: 1980px; }
.top { position: sticky; top: 0; background: #fff; z-index: 1; }
h2 { font-size: 13px; margin: 6px 0 0; padding-top: 4px; border-top: 1px solid #888; }
.gc { font-weight: 400; color: #555; }
details.passed > summary { cursor: pointer; color: #333; margin: 2px 0 2px 8px; }
.nl { text-anchor: end; fill: #333; }
.sl { font-style: italic; }
.fl { fill: #333; }
.fo { stroke: rgba(0,0,0,.3); stroke-width: .5; }
.s.none { fill: #fff; stroke: #888; }
.s { shape-rendering: crispEdges; }
.s:hover, .mk:hover, .rl:hover { stroke: #000; stroke-width: 1.5; }
.mk { fill: #1a1a1a; stroke: #fff; stroke-width: 1; }
.mk.hp { fill: #fff; stroke: #1a1a1a; stroke-width: 1.5; }
.gone { stroke: #aaa; stroke-width: .5; }
.note { color: #666; font-size: 12px; margin-top: 8px; }
"""


def _legend(t: Timeline) -> str:
    present = {s.state for n in t.nodes for s in n.segments}
    states = [s for s in STATES if s != "unknown" or s in present]
    items = [f'<span><i class="sw" style="background:{_swatch(s)}"></i>{_e(LEGEND[s])}</span>' for s in states]
    marks = {m.action for n in t.nodes for m in n.marks} | {"reboot", "replace"}
    for action in ("reboot", "replace", "hyperpod"):
        if action in marks:
            shape = mark_shape(action, 7, 7, 5)
            items.append(f'<span><svg width="14" height="14">{shape}</svg>{_e(MARKS[action])}</span>')
    items.append('<span><i class="sw" style="background:#7b96b8"></i>check round (band)</span>')
    return '<div class="legend">' + "".join(items) + "</div>"


def _swatch(state: str) -> str:
    if state == "held":
        return "repeating-linear-gradient(45deg,#e69f00 0 4px,#7a4f00 4px 6px)"
    return COLOURS[state]


def render_html(t: Timeline) -> str:
    """One self-contained page: inline CSS and SVG, and the data as JSON; nothing fetched from anywhere."""
    page = Page(t)
    data = json.dumps(to_json(t), separators=(",", ":"))
    data = data.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    fills = "\n".join(f".s.{s} {{ fill: {COLOURS[s]}; }}" for s in STATES)
    origin = datetime.fromtimestamp(t.origin, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    clock = f"times after {origin} (t+0)" if t.clock == "relative" else "times in UTC"
    fold = len(t.nodes) > FOLD_OVER
    groups = "\n".join(_group(page, g.nodes, g.name, fold) for g in t.groups)
    note = " Passed nodes never rebooted or replaced are folded under their group: open to list them." if fold else ""
    title = f"hyperpod-dhc: cluster {t.cluster}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}: deep health checks over time</title>
<style>{CSS}{fills}
</style>
</head>
<body>
<h1>{_e(title)} &mdash; deep health checks over time</h1>
<p class="sub">{_e(summary(t))}; {_e(clock)}, {_e(page.when(t.start))} to {_e(page.when(t.end))}. {_e(t.source)}</p>
{_legend(t)}
<div class="top">{axis(page)}</div>
{groups}
<p class="note">Each group's first row sums up its nodes' states against time; then a row per node (its
NodeLogicalId's first 8 characters and its current instance), problem nodes first, each bar a state it was in; a final
state too short to see is drawn {MIN_FINAL_W:.0f} px wide. Hover a bar for the controller's decision lines, a mark for
why it was rebooted or replaced, a round for its span. Bands are the check rounds, as the nodes' histories name
them.{_e(note)}</p>
<script type="application/json" id="timeline-data">{data}</script>
</body>
</html>
"""
