"""The page of a timeline (`hpdhc.timeline`): one self-contained HTML file, inline CSS and inline SVG, with no script
but the data itself (`<script type="application/json" id="timeline-data">`, the timeline's `to_json`, which `read_html`
reads back): no network, no build step. A row per node under its group's heading, a bar per segment coloured by
state (Okabe & Ito's colour-blind-safe palette), rounds as bands behind the rows and as a labelled lane under the
time axis, reboots and replacements as marks; a bar, mark or round shows its decision lines on hover (SVG `title`).
Rows get thinner past 200 and 800 nodes (no names beside them then): 3,000 nodes make a page of a few megabytes.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone

from hpdhc.timeline import ROUND_ID, STATES, VERDICT_STATES, Json, Node, Segment, Timeline, summary, to_json

LEGEND = {
    "waiting": "waiting for a round",
    "in-check": "in a deep health check",
    "recovery-due": "failed: recovery due",
    "held": "failed, recovery held",
    "recovering": "rebooting / being replaced",
    "passed": "passed",
    "failed": "failed (record only)",
    "quarantined": "quarantined",
    "inconclusive": "inconclusive",
    "gone": "gone",
    "shadowed": "dry-run verdict",
    "unknown": "state unknown to hpdhc",
}
# Okabe & Ito's colour-blind-safe palette, plus greys; `held` is `recovery-due` hatched.
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
MARKS = {"reboot": "reboot", "replace": "replacement", "hyperpod": "HyperPod's own recovery"}

DATA_BLOCK = re.compile(r'<script type="application/json" id="timeline-data">(.*?)</script>', re.S)


def read_html(page: str) -> Json:
    """The data a page embeds."""
    match = DATA_BLOCK.search(page)
    if match is None:
        raise ValueError("no timeline data in this page")
    data: Json = json.loads(match.group(1))
    return data


WIDTH = 1540
LABEL_W = 200
FINAL_W = 170
AXIS_H = 22
LANE_H = 20
TICK_STEPS = (
    60, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400, 14 * 86400,
    28 * 86400,
)  # fmt: skip
MAX_TICKS = 15


@dataclass(frozen=True)
class _Layout:
    row: float  # height of a node's row
    bar: float  # height of its bars
    group: float  # height of a group's heading
    labels: bool  # room for the node's name and final state beside its row

    @classmethod
    def for_nodes(cls, n: int) -> _Layout:
        if n <= 200:
            return cls(16, 12, 26, True)
        if n <= 800:
            return cls(6, 5, 22, False)
        return cls(3, 3, 22, False)


class _Page:
    def __init__(self, t: Timeline) -> None:
        self.t = t
        self.x0, self.x1 = LABEL_W, WIDTH - FINAL_W
        self.span = max(t.end - t.start, 1.0)

    def x(self, at: float) -> float:
        return round(
            self.x0 + (min(max(at, self.t.start), self.t.end) - self.t.start) / self.span * (self.x1 - self.x0), 1
        )

    def when(self, at: float) -> str:
        if self.t.clock == "relative":
            return "t+" + duration(at)
        return datetime.fromtimestamp(self.t.origin + at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")

    def ticks(self) -> list[tuple[float, str]]:
        t = self.t
        step = next((s for s in TICK_STEPS if self.span / s <= MAX_TICKS - 1), TICK_STEPS[-1])
        while self.span / step > MAX_TICKS - 1:
            step *= 2
        if t.clock == "relative":
            first = math.ceil(t.start / step) * step
            return [(float(a), "t+" + duration(a, ticks=True)) for a in range(int(first), int(t.end) + 1, step)]
        out: list[tuple[float, str]] = []
        at = math.ceil((t.origin + t.start) / step) * step
        last_day = None
        while at <= t.origin + t.end:
            moment = datetime.fromtimestamp(at, timezone.utc)
            day = moment.strftime("%m-%d")
            out.append((at - t.origin, moment.strftime("%H:%M") if day == last_day else f"{day} {moment:%H:%M}"))
            last_day = day
            at += step
        return out


def duration(seconds: float, ticks: bool = False) -> str:
    """`1h05`, `2d03h`; ticks: `1h`, `30m` where exact."""
    minutes = int(round(seconds) // 60)
    if ticks and not minutes:
        return "0"
    hours, mins = divmod(minutes, 60)
    if hours >= 48:
        days, hours = divmod(hours, 24)
        return f"{days}d" if ticks and not hours else f"{days}d{hours:02d}h"
    if ticks and not mins:
        return f"{hours}h"
    if ticks and not hours:
        return f"{mins}m"
    return f"{hours}h{mins:02d}"


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _final_text(node: Node) -> str:
    final = node.final or "no record"
    if node.marks:
        kinds = Counter(m.action for m in node.marks)
        return f"{final} · " + ", ".join(k if n == 1 else f"{k} x{n}" for k, n in kinds.items())
    return final


def _label(node: Node) -> str:
    if node.key.startswith("i-") or not node.instance_ids:
        return node.key[:26]
    return f"{node.key[:8]} {node.instance_ids[-1]}"


def _segment_title(page: _Page, node: Node, s: Segment, last: bool) -> str:
    head = (
        f"{node.key} ({node.group}){' on ' + s.instance_id if s.instance_id else ''}\n"
        f"{s.state}: {page.when(s.start)} to {page.when(s.end)} ({duration(s.end - s.start)})"
    )
    lines = [f"{page.when(line.at)}  {line.text}" for line in s.lines]
    if last and s.state in VERDICT_STATES | {"recovery-due", "held"} and node.evidence:
        lines += ["evidence: " + e for e in node.evidence]
    return head + "\n" + "\n".join(lines)


def _mark_shape(action: str, x: float, y: float, r: float, title: str = "") -> str:
    """A reboot as a triangle pointing down, a replacement as a diamond, anything else (HyperPod's) as a ring."""
    inner = f"<title>{_e(title)}</title>" if title else ""
    if action == "reboot":
        return f'<path class="mk" d="M{x - r:.1f},{y - r:.1f}h{2 * r:.1f}l{-r:.1f},{2 * r:.1f}z">{inner}</path>'
    if action == "replace":
        d = r + 1
        path = f"M{x:.1f},{y - d:.1f}l{d:.1f},{d:.1f}l{-d:.1f},{d:.1f}l{-d:.1f},{-d:.1f}z"
        return f'<path class="mk" d="{path}">{inner}</path>'
    return f'<circle class="mk hp" cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}">{inner}</circle>'


def _svg(page: _Page) -> str:
    t = page.t
    nodes = t.nodes
    lay = _Layout.for_nodes(len(nodes))
    top = AXIS_H + LANE_H + 6
    height = top + len(t.groups) * lay.group + len(nodes) * lay.row + AXIS_H + 4
    bottom = height - AXIS_H
    out = [
        f'<svg width="{WIDTH}" height="{height:.0f}" viewBox="0 0 {WIDTH} {height:.0f}" role="img" '
        f'aria-label="{_e("timeline of cluster " + t.cluster)}">',
        '<defs><pattern id="hatch-held" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e69f00"/>'
        '<rect width="2.5" height="6" fill="#7a4f00"/></pattern></defs>',
    ]
    # Rounds: a labelled lane under the axis, and faint bands behind every row.
    out.append('<g class="rounds">')
    for i, r in enumerate(t.rounds):
        xa, xb = page.x(r.start), page.x(r.end)
        w = max(xb - xa, 1.5)
        span = f"{page.when(r.start)} to {page.when(r.end)} ({duration(r.end - r.start)})"
        title = _e(f"round {r.id}: {span}, {r.nodes} node(s) claimed")
        out.append(f'<rect class="band b{i % 2}" x="{xa}" y="{top}" width="{w:.1f}" height="{bottom - top:.0f}"/>')
        out.append(
            f'<g class="lane"><rect class="rl r{i % 2}" x="{xa}" y="{AXIS_H + 2}" width="{w:.1f}" '
            f'height="{LANE_H - 4}"><title>{title}</title></rect>'
        )
        seq = ROUND_ID.search(r.id)
        short = "r" + str(int(seq.group(0)[2:])) if seq else r.id
        if w >= 8 * len(short) + 6:
            out.append(f'<text class="rt" x="{xa + w / 2:.1f}" y="{AXIS_H + LANE_H - 6}">{_e(short)}</text>')
        out.append("</g>")
    out.append("</g>")
    # Time axis, top and bottom, and its grid.
    out.append('<g class="axis">')
    for at, label in page.ticks():
        x = page.x(at)
        out.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{AXIS_H - 4}" y2="{bottom}"/>')
        out.append(f'<text class="tick" x="{x}" y="{AXIS_H - 8}">{_e(label)}</text>')
        out.append(f'<text class="tick" x="{x}" y="{height - 8:.0f}">{_e(label)}</text>')
    out.append(f'<text class="axl" x="{LABEL_W - 8}" y="{AXIS_H + LANE_H - 6}">rounds</text>')
    out.append("</g>")
    y = float(top)
    for g in t.groups:
        finals = Counter(n.final or "no record" for n in g.nodes)
        counts = ", ".join(f"{n} {state}" for state, n in finals.most_common())
        out.append(
            f'<text class="gh" x="6" y="{y + lay.group - 8:.1f}">{_e(g.name)}'
            f'<tspan class="gc"> {len(g.nodes)} node(s): {_e(counts)}</tspan></text>'
        )
        out.append(f'<line class="gl" x1="0" x2="{WIDTH}" y1="{y + lay.group - 2:.1f}" y2="{y + lay.group - 2:.1f}"/>')
        y += lay.group
        for node in g.nodes:
            out.append(_row(page, node, y, lay))
            y += lay.row
    out.append("</svg>")
    return "\n".join(out)


def _row(page: _Page, node: Node, y: float, lay: _Layout) -> str:
    pad = (lay.row - lay.bar) / 2
    parts = [f'<g transform="translate(0,{y:.1f})">']
    if lay.labels:
        label = f"<title>{_e(node.key)}</title>{_e(_label(node))}"
        parts.append(f'<text class="nl" x="{LABEL_W - 8}" y="{lay.row - 4}">{label}</text>')
        parts.append(f'<text class="fl" x="{page.x1 + 8}" y="{lay.row - 4}">{_e(_final_text(node))}</text>')
    for i, s in enumerate(node.segments):
        xa, xb = page.x(s.start), page.x(s.end)
        title = _e(_segment_title(page, node, s, i == len(node.segments) - 1))
        parts.append(
            f'<rect class="s {s.state}" x="{xa}" y="{pad:.1f}" width="{max(xb - xa, 1.0):.1f}" height="{lay.bar}">'
            f"<title>{title}</title></rect>"
        )
    r = max(lay.bar * 0.42, 2.0)
    for m in node.marks:
        title = (
            f"{MARKS.get(m.action, m.action)} by {m.actor} at {page.when(m.at)}"
            f"{' of ' + m.instance_id if m.instance_id else ''}\n{node.key} ({node.group})\n{m.line}"
        )
        parts.append(_mark_shape(m.action, page.x(m.at), lay.row / 2, r, title))
    parts.append("</g>")
    return "".join(parts)


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
.grid { stroke: #000; stroke-opacity: .12; }
.band.b0 { fill: #5b7fa6; fill-opacity: .07; } .band.b1 { fill: #fff; fill-opacity: 0; }
.rl.r0 { fill: #7b96b8; } .rl.r1 { fill: #a9bdd6; } .rl { stroke: #fff; stroke-width: 1; }
.rt { text-anchor: middle; fill: #fff; font-weight: 600; pointer-events: none; }
.gh { font-family: system-ui, sans-serif; font-size: 13px; font-weight: 700; fill: #1a1a1a; }
.gc { font-weight: 400; fill: #555; }
.gl { stroke: #888; stroke-width: .5; }
.nl { text-anchor: end; fill: #333; }
.fl { fill: #333; }
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
            shape = _mark_shape(action, 7, 7, 5)
            items.append(f'<span><svg width="14" height="14">{shape}</svg>{_e(MARKS[action])}</span>')
    items.append('<span><i class="sw" style="background:#7b96b8"></i>check round (band)</span>')
    return '<div class="legend">' + "".join(items) + "</div>"


def _swatch(state: str) -> str:
    if state == "held":
        return "repeating-linear-gradient(45deg,#e69f00 0 4px,#7a4f00 4px 6px)"
    return COLOURS[state]


def render_html(t: Timeline) -> str:
    """One self-contained page: inline CSS and SVG, and the data as JSON; nothing fetched from anywhere."""
    page = _Page(t)
    data = json.dumps(to_json(t), separators=(",", ":"))
    data = data.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    fills = "\n".join(f".s.{s} {{ fill: {COLOURS[s]}; }}" for s in STATES)
    origin = datetime.fromtimestamp(t.origin, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    clock = f"times after {origin} (t+0)" if t.clock == "relative" else "times in UTC"
    lay = _Layout.for_nodes(len(t.nodes))
    note = "" if lay.labels else " Rows are too thin for names: hover a row for its node."
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
{_svg(page)}
<p class="note">Each row is a node (its NodeLogicalId's first 8 characters and its current instance), each bar a state
it was in; hover a bar for the controller's decision lines, a mark for why it was rebooted or replaced, a round for its
span. Bands are the check rounds, as the nodes' histories name them.{_e(note)}</p>
<script type="application/json" id="timeline-data">{data}</script>
</body>
</html>
"""
