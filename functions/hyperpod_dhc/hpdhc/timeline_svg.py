"""A timeline (`hyperpod_dhc.hpdhc.timeline`) drawn as inline SVG, for the page `hyperpod_dhc.hpdhc.timeline_page` lays
out: the time axis and the rounds' lane; rows of nodes, each with the node's name on the left, a bar per segment (its
class its state, which the page colours), reboots and replacements as marks, and its outcome (final state, reboots and
replacements) on the right; a group's summary row (its nodes' states against time, stacked); rounds as bands behind the
rows. A bar, mark or round shows its decision lines on hover (SVG `title`). Each SVG spans `WIDTH` units and scales to
the window's width (viewBox), so they line up one under another and the outcome column is always on screen.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from datetime import datetime, timezone

from hyperpod_dhc.hpdhc.timeline import ROUND_ID, STATES, VERDICT_STATES, Node, Segment, Timeline

# Each state and mark in words: what the hovers say, and the page's legend.
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
MARKS = {"reboot": "reboot", "replace": "replacement", "hyperpod": "HyperPod's own recovery"}

# The page's own units: its SVGs scale to the window's width (viewBox), 1:1 in a 1,400-px window.
WIDTH = 1320
LABEL_W = 200  # the node's name, left of its row
OUTCOME_W = 190  # the outcome column, right of the rows: the final state's swatch and name, the node's actions
AXIS_H = 22
LANE_H = 20
ROW_H = 16
BAR_H = 12
SUMMARY_H = 26
SUMMARY_STEP = 5  # the summary row's width of one column (a sample of its group's states)
MIN_FINAL_W = 6.0  # a final state minutes long is still seen: a node quarantined at the end is not "in check"
TICK_STEPS = (
    60, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400, 14 * 86400,
    28 * 86400,
)  # fmt: skip
MAX_TICKS = 15


class Page:
    """A timeline in the page's units: where a time is drawn, a time in words, the axis's ticks."""

    def __init__(self, t: Timeline) -> None:
        self.t = t
        self.x0, self.x1 = LABEL_W, WIDTH - OUTCOME_W
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


def _segment_title(page: Page, node: Node, s: Segment, last: bool) -> str:
    head = (
        f"{node.key} ({node.group}){' on ' + s.instance_id if s.instance_id else ''}\n"
        f"{s.state}: {page.when(s.start)} to {page.when(s.end)} ({duration(s.end - s.start)})"
    )
    lines = [f"{page.when(line.at)}  {line.text}" for line in s.lines]
    if last and s.state in VERDICT_STATES | {"recovery-due", "held"} and node.evidence:
        lines += ["evidence: " + e for e in node.evidence]
    return head + "\n" + "\n".join(lines)


def mark_shape(action: str, x: float, y: float, r: float, title: str = "") -> str:
    """A reboot as a triangle pointing down, a replacement as a diamond, anything else (HyperPod's) as a ring."""
    inner = f"<title>{_e(title)}</title>" if title else ""
    if action == "reboot":
        return f'<path class="mk" d="M{x - r:.1f},{y - r:.1f}h{2 * r:.1f}l{-r:.1f},{2 * r:.1f}z">{inner}</path>'
    if action == "replace":
        d = r + 1
        path = f"M{x:.1f},{y - d:.1f}l{d:.1f},{d:.1f}l{-d:.1f},{d:.1f}l{-d:.1f},{-d:.1f}z"
        return f'<path class="mk" d="{path}">{inner}</path>'
    return f'<circle class="mk hp" cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}">{inner}</circle>'


def _svg(height: float, body: list[str], cls: str) -> str:
    """One of the page's SVGs: each spans the page's width in its own units and scales with the window (viewBox),
    so they line up one under another whatever the window."""
    return (
        f'<svg class="{cls}" viewBox="0 0 {WIDTH} {height:.0f}" preserveAspectRatio="xMinYMin meet">'
        + "".join(body)
        + "</svg>"
    )


def axis(page: Page) -> str:
    """The time axis and the rounds' lane: the top of the page, kept in view while its rows scroll."""
    t = page.t
    height = AXIS_H + LANE_H + 2
    out = [
        '<defs><pattern id="hatch-held" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e69f00"/>'
        '<rect width="2.5" height="6" fill="#7a4f00"/></pattern></defs>',
        '<g class="rounds">',
    ]
    for i, r in enumerate(t.rounds):
        xa, xb = page.x(r.start), page.x(r.end)
        w = max(xb - xa, 1.5)
        span = f"{page.when(r.start)} to {page.when(r.end)} ({duration(r.end - r.start)})"
        title = _e(f"round {r.id}: {span}, {r.nodes} node(s) claimed")
        out.append(
            f'<g class="lane"><rect class="rl r{i % 2}" x="{xa}" y="{AXIS_H + 2}" width="{w:.1f}" '
            f'height="{LANE_H - 4}"><title>{title}</title></rect>'
        )
        seq = ROUND_ID.search(r.id)
        short = "r" + str(int(seq.group(0)[2:])) if seq else r.id
        if w >= 8 * len(short) + 6:
            out.append(f'<text class="rt" x="{xa + w / 2:.1f}" y="{AXIS_H + LANE_H - 6}">{_e(short)}</text>')
        out.append("</g>")
    out.append('</g><g class="axis">')
    for at, label in page.ticks():
        x = page.x(at)
        out.append(f'<line class="grid" x1="{x}" x2="{x}" y1="{AXIS_H - 4}" y2="{height}"/>')
        out.append(f'<text class="tick" x="{x}" y="{AXIS_H - 8}">{_e(label)}</text>')
    out.append(f'<text class="axl" x="{LABEL_W - 8}" y="{AXIS_H + LANE_H - 6}">rounds</text>')
    out.append(f'<text class="axl ol" x="{page.x1 + 8}" y="{AXIS_H + LANE_H - 6}">outcome</text></g>')
    return _svg(height, out, "axis")


def _backdrop(page: Page, height: float) -> list[str]:
    """The rounds' bands and the ticks' grid behind a block of rows."""
    out = []
    for i, r in enumerate(page.t.rounds):
        xa, w = page.x(r.start), max(page.x(r.end) - page.x(r.start), 1.5)
        out.append(f'<rect class="band b{i % 2}" x="{xa}" y="0" width="{w:.1f}" height="{height:.0f}"/>')
    out += [
        f'<line class="grid" x1="{x}" x2="{x}" y1="0" y2="{height:.0f}"/>' for x in (page.x(a) for a, _ in page.ticks())
    ]
    return out


def rows(page: Page, nodes: list[Node], head: list[str] | None = None, head_h: float = 0) -> str:
    height = head_h + len(nodes) * ROW_H
    body = _backdrop(page, height) + (head or [])
    body += [_row(page, node, head_h + i * ROW_H) for i, node in enumerate(nodes)]
    return _svg(height, body, "rows")


def summary_row(page: Page, nodes: list[Node]) -> str:
    """The group's states against time, stacked: at each column, how many of its nodes were in which state (the
    last column: their final states). Empty above: nodes not there yet."""
    t, n = page.t, len(nodes)
    cols = max(1, math.ceil((page.x1 - page.x0) / SUMMARY_STEP))
    step = (page.x1 - page.x0) / cols
    times = [t.start + (i + 0.5) / cols * page.span for i in range(cols - 1)] + [t.end]
    counts = [Counter[str]() for _ in times]
    for node in nodes:
        i = 0
        for s in node.segments:
            while i < len(times) and times[i] < s.start:
                i += 1
            last = s is node.segments[-1]
            while i < len(times) and (times[i] < s.end or last):
                counts[i][s.state] += 1
                i += 1
    top, h = 2.0, SUMMARY_H - 6.0
    below = [0] * cols
    out = [f'<g class="summary"><text class="nl sl" x="{LABEL_W - 8}" y="{SUMMARY_H / 2 + 4:.0f}">all {n}</text>']
    for state in STATES:
        per_col = [c[state] for c in counts]
        if not any(per_col):
            continue
        upper = [b + k for b, k in zip(below, per_col, strict=True)]
        x = [page.x0 + i * step for i in range(cols + 1)]
        y_of = [[round(top + h * (1 - v / n), 1) for v in side] for side in (upper, below)]
        tops, bottoms = y_of
        d = f"M{x[0]:.1f},{tops[0]}" + "".join(
            f"H{x[i + 1]:.1f}" + (f"V{tops[i + 1]}" if i + 1 < cols and tops[i + 1] != tops[i] else "")
            for i in range(cols)
        )
        d += f"V{bottoms[-1]}" + "".join(
            f"H{x[i]:.1f}" + (f"V{bottoms[i - 1]}" if i and bottoms[i - 1] != bottoms[i] else "")
            for i in reversed(range(cols))
        )
        d += "z"
        title = f"{LEGEND[state]}: up to {max(per_col)} of {n} node(s); {per_col[-1]} at the end"
        out.append(f'<path class="s {state}" d="{d}"><title>{_e(title)}</title></path>')
        below = upper
    out.append(f'<text class="fl" x="{page.x1 + 8}" y="{SUMMARY_H / 2 + 4:.0f}">{n} node(s)</text></g>')
    return "".join(out)


def _row(page: Page, node: Node, y: float) -> str:
    pad = (ROW_H - BAR_H) / 2
    label = f"<title>{_e(node.key)}</title>{_e(_label(node))}"
    final = node.final or "none"
    parts = [
        f'<g class="row" transform="translate(0,{y:.1f})">',
        f'<text class="nl" x="{LABEL_W - 8}" y="{ROW_H - 4}">{label}</text>',
        f'<rect class="fo s {final}" x="{page.x1 + 8}" y="{pad + 1:.1f}" width="{BAR_H - 2}" height="{BAR_H - 2}"/>',
        f'<text class="fl" x="{page.x1 + 12 + BAR_H}" y="{ROW_H - 4}">{_e(_final_text(node))}</text>',
    ]
    for i, s in enumerate(node.segments):
        xa, xb = page.x(s.start), page.x(s.end)
        last = i == len(node.segments) - 1
        if last:  # drawn over the end of the one before if it is too short to see
            xa = min(xa, max(xb - MIN_FINAL_W, page.x0))
        title = _e(_segment_title(page, node, s, last))
        parts.append(
            f'<rect class="s {s.state}" x="{xa}" y="{pad:.1f}" width="{max(xb - xa, 1.0):.1f}" height="{BAR_H}">'
            f"<title>{title}</title></rect>"
        )
    r = max(BAR_H * 0.42, 2.0)
    for m in node.marks:
        title = (
            f"{MARKS.get(m.action, m.action)} by {m.actor} at {page.when(m.at)}"
            f"{' of ' + m.instance_id if m.instance_id else ''}\n{node.key} ({node.group})\n{m.line}"
        )
        parts.append(mark_shape(m.action, page.x(m.at), ROW_H / 2, r, title))
    parts.append("</g>")
    return "".join(parts)
