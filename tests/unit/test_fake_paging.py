"""The HyperPod fake's sorted index (ListClusterNodes in O(page)) pages exactly as `_paginate` sorts and pages:
the same items, the same order, the same tokens, whatever the filter, direction, page size or cursor."""

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
