"""Where a round's members are in ListClusterNodes: the launch-time windows a poll lists them in, chosen to cost
the fewest pages (a node checked again, launched hours before the others, must not make each poll list every node
launched between)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from pydantic import BaseModel

from hyperpod_dhc.deephealth.domain.nodes import NodeSnapshot


class ListingWindow(BaseModel):
    """Where a round's members are in ListClusterNodes: launched between these times (epoch s), of `group`."""

    launched_after: float
    launched_before: float
    group: str | None = None  # set when every member is of one instance group


# ListClusterNodes' largest page, which the adapter asks for: what a listing of n nodes costs in calls.
PAGE_SIZE = 100
# A round's members are listed in at most this many windows (each at least one call).
MAX_WINDOWS = 8


def listing_windows(
    members: Iterable[NodeSnapshot | None], listed: Iterable[NodeSnapshot]
) -> list[ListingWindow] | None:
    """The launch-time windows that hold these members in the fewest ListClusterNodes pages, counted on `listed`
    (a whole listing): one member launched long before the others (a node checked again) must not make every
    poll list all the nodes launched in between. Per group (the group filter leaves the other groups' nodes out)
    or across groups, whichever costs fewer pages; None when a member has no launch time or is not listed."""
    given = list(members)
    if not given or any(s is None or s.launched_at is None for s in given):
        return None
    found = [s for s in given if s is not None]
    everyone = [s for s in listed if s.launched_at is not None]
    by_group: dict[str, list[float]] = {}
    for s in found:
        by_group.setdefault(s.group, []).append(s.launched_at or 0.0)
    per_group = [
        w
        for group, times in sorted(by_group.items())
        # InstanceGroupNameContains: a group whose name holds this one's is listed too.
        for w in _split(sorted(times), sorted(s.launched_at or 0.0 for s in everyone if group in s.group), group)
    ]
    across = _split(sorted(s.launched_at or 0.0 for s in found), sorted(s.launched_at or 0.0 for s in everyone), None)
    if len(by_group) == 1:
        return per_group
    candidates = [ws for ws in (across, per_group) if len(ws) <= MAX_WINDOWS]  # `across` always is
    return min(candidates, key=lambda ws: (_cost(ws, everyone), len(ws)))


def _pages(times: list[float], lo: float, hi: float) -> int:
    """Pages of a listing of the nodes launched within [lo, hi] (the adapter widens it by a second each side)."""
    return max(1, math.ceil((bisect.bisect_right(times, hi + 1) - bisect.bisect_left(times, lo - 1)) / PAGE_SIZE))


def _split(members: list[float], listed: list[float], group: str | None) -> list[ListingWindow]:
    """Sorted member launch times into windows, split where two listings cost fewer pages than one."""
    windows: list[ListingWindow] = []
    spans = [(0, len(members) - 1)]
    while spans:
        i, j = spans.pop()
        whole = _pages(listed, members[i], members[j])
        best, at = whole, None
        if len(windows) + len(spans) + 2 <= MAX_WINDOWS:
            for k in range(i, j):
                if members[k + 1] - members[k] < 2:
                    continue  # launched together: one window
                cost = _pages(listed, members[i], members[k]) + _pages(listed, members[k + 1], members[j])
                if cost < best:
                    best, at = cost, k
        if at is None:
            windows.append(ListingWindow(launched_after=members[i], launched_before=members[j], group=group))
        else:
            spans += [(i, at), (at + 1, j)]
    return sorted(windows, key=lambda w: w.launched_after)


def _cost(windows: list[ListingWindow], listed: list[NodeSnapshot]) -> int:
    total = 0
    for w in windows:
        times = sorted(s.launched_at or 0.0 for s in listed if w.group is None or w.group in s.group)
        total += _pages(times, w.launched_after, w.launched_before)
    return total


def narrowed_windows(
    windows: list[ListingWindow], members: Iterable[NodeSnapshot | None], listed: Iterable[NodeSnapshot]
) -> list[ListingWindow] | None:
    """`windows` narrowed to these members as a listing of exactly those windows (`listed`) found them: each window
    split or shrunk around the members in it (its pages counted on what it listed, so never more than it cost), and
    dropped when none is left in it. None (keep the windows) when a member has no launch time or is in none of them,
    no member is left, or the result would exceed MAX_WINDOWS."""
    given = list(members)
    if not given or any(s is None or s.launched_at is None for s in given):
        return None
    found = [s for s in given if s is not None]
    nodes = list(listed)
    out: list[ListingWindow] = []
    placed: set[str] = set()
    for w in windows:
        inside = [s for s in found if _within(s, w) and s.key not in placed]
        if not inside:
            continue
        placed |= {s.key for s in inside}
        narrowed = listing_windows(inside, [s for s in nodes if _within(s, w)])
        if narrowed is None:
            return None
        # Counted on what `w` listed: a window across groups inside one filtered by group keeps that filter.
        out += [n.model_copy(update={"group": w.group}) if n.group is None else n for n in narrowed]
    if len(placed) < len({s.key for s in found}) or len(out) > MAX_WINDOWS:
        return None
    return sorted(out, key=lambda w: w.launched_after)


def _within(node: NodeSnapshot, window: ListingWindow) -> bool:
    """Whether a listing of `window` holds the node (the adapter widens it by a second each side)."""
    at = node.launched_at
    group_ok = window.group is None or window.group in node.group
    return at is not None and group_ok and window.launched_after - 1 < at < window.launched_before + 1
