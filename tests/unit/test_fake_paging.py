"""The HyperPod fake's sorted index (ListClusterNodes in O(page)) pages exactly as `_paginate` sorts and pages:
the same items, the same order, the same tokens, whatever the filter, direction, page size or cursor, and after
items come or change their keys."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.fakes.model import SortedIndex, _paginate

ITEMS = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), max_size=60, unique=True)


def _walk(page, p: dict) -> list[tuple[list, dict]]:
    """Every page of a listing, following NextToken."""
    pages = []
    while True:
        items, token = page(p)
        pages.append((items, token))
        if not token:
            return pages
        p = {**p, **token}


@given(ITEMS, st.integers(1, 12), st.booleans(), st.integers(0, 3))
def test_the_index_pages_as_paginate_does(items, size, descending, hidden):
    def key(item):
        return [item[0], items.index(item)]  # unique, as the fake's seq makes every key

    def keep(item):
        return item[1] != hidden

    index = SortedIndex.of(0, items, key)
    p = {"MaxResults": size}
    ours = _walk(lambda q: index.page(keep, q, descending), p)
    theirs = _walk(lambda q: _paginate([i for i in items if keep(i)], key, q, descending), p)
    assert ours == theirs


@given(ITEMS, st.lists(st.tuples(st.integers(0, 80), st.integers(0, 20)), max_size=30), st.integers(1, 12))
def test_the_index_pages_as_paginate_does_after_items_come_and_keys_change(items, changes, size):
    """`moved`: each change moves one item (an existing one, or a new one when the draw is past the end) to a new
    first key; the index then pages as a fresh sort of every item does."""
    nodes = [{"at": at, "seq": seq, "hidden": hidden} for seq, (at, hidden) in enumerate(items)]

    def key(node):
        return [node["at"], node["seq"]]

    def keep(node):
        return node["hidden"] != 3

    index = SortedIndex.of(0, nodes, key)
    for n, (which, at) in enumerate(changes):
        if which >= len(nodes):
            nodes.append({"at": at, "seq": len(nodes), "hidden": which % 4})
            moved = nodes[-1]
        else:
            moved = nodes[which]
            moved["at"] = at
        index.moved(n + 1, [moved, moved] if which % 5 == 0 else [moved], key)  # told twice: no harm
    p = {"MaxResults": size}
    for descending in (False, True):
        ours = _walk(lambda q, d=descending: index.page(keep, q, d), p)
        theirs = _walk(lambda q, d=descending: _paginate([i for i in nodes if keep(i)], key, q, d), p)
        assert ours == theirs


@given(
    ITEMS,
    st.integers(1, 12),
    st.booleans(),
    st.one_of(st.none(), st.integers(-1, 21), st.floats(-1, 21)),
    st.one_of(st.none(), st.integers(-1, 21), st.floats(-1, 21)),
)
def test_a_window_of_the_first_key_walks_only_its_part_and_pages_as_paginate_does(
    items, size, descending, above, below
):
    """`above`/`below` (a ListClusterNodes creation-time window): the same pages as `_paginate` of the items inside
    it, the bounds themselves left out (CreationTimeAfter and CreationTimeBefore are exclusive), and no item outside
    it is looked at."""

    def key(item):
        return [item[0], items.index(item)]

    def inside(item):
        return (above is None or item[0] > above) and (below is None or item[0] < below)

    looked_at = []

    def keep(item):
        looked_at.append(item)
        return inside(item) and item[1] != 2

    index = SortedIndex.of(0, items, key)
    p = {"MaxResults": size}
    ours = _walk(lambda q: index.page(keep, q, descending, above=above, below=below), p)
    theirs = _walk(lambda q: _paginate([i for i in items if inside(i) and i[1] != 2], key, q, descending), p)
    assert ours == theirs
    assert all(inside(i) for i in looked_at)
