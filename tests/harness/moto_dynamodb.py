"""moto_patches (f), DynamoDB's part: the speed of moto's Query and of its JSON serializer at fleet scale.

moto's DynamoDB Query sorted every item of the table by comparing its key objects (each comparison casting both
values again), on every page, and walked the pages before the one asked for: a Query of a partition now reads that
partition from its exclusive start key, as DynamoDB does, up to the item that ends its page, from partitions kept
in order while no item comes or goes, and items are sorted on their keys' values, cast once (the same order). A
Query of an index (the controller's "saved since t?") sorts only the items its key condition holds: the same items,
but a page is cut by their size alone, as DynamoDB cuts it, where moto counted the items left out. A projection of
top-level strings and numbers takes them as they are (moto turned the whole item into plain Python and back once a
name), and moto's deep copy of the items a Query read is skipped when each of them is projected into a new one
anyway. Its JSON serializer walked the ten members of the AttributeValue union for every attribute of every item
returned: a string or number value (`{"S": "..."}`, `{"N": "..."}`), already in wire form, is now written as it is
(the same JSON).

They reach into moto's internals; `tests/integration/test_moto_patches.py` compares every page with moto's own and
fails loudly when they move.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import inspect
import itertools
import re
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from moto.core.serialize import BaseJSONSerializer
from moto.dynamodb.models import dynamo_type
from moto.dynamodb.models import table as table_module
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, Table

# The Query this thread runs: `query`, (table, what its key condition reaches); `projected`: each item it returns is
# projected into a new one (`_query_reading_its_partition`).
_QUERIED = threading.local()


def _cast_key(item: Any) -> Any:
    """An item's sort key in moto's all_items order, on cast values: DynamoType compares by them."""
    return (item.hash_key.cast_value, item.range_key.cast_value) if item.range_key else item.hash_key.cast_value


def _all_items(self: Table) -> list[Any]:
    """moto's Table.all_items (every item, by hash then range key) or, inside a Query this thread runs, only what
    the Query's key condition can reach (`_QUERIED`)."""
    queried = getattr(_QUERIED, "query", None)
    if queried is not None and queried[0] is self:
        return queried[1]()
    items = [
        item for hash_set in self.items.values() for item in (hash_set.values() if self.range_key_attr else [hash_set])
    ]
    return sorted(items, key=_cast_key)


# A table's partitions sorted by range key, kept while no item came or went: table -> (its key changes, {hash key:
# (range keys in order, their cast values)}). Only put_item and delete_item add or remove a key (`_noting_new_keys`).
_ORDERED: weakref.WeakKeyDictionary[Table, tuple[int, dict[Any, tuple[list[Any], list[Any]]]]] = (
    weakref.WeakKeyDictionary()
)
_KEY_CHANGES: weakref.WeakKeyDictionary[Table, int] = weakref.WeakKeyDictionary()
_KEY_WRITE = threading.Lock()  # one counted write at a time: two overlapping ones could each see the count unchanged


def _item_count(table: Table) -> int:
    partitions: Any = table.items.values()
    return sum(map(len, partitions)) if table.range_key_attr else len(table.items)


def _noting_new_keys(write: Callable[..., Any]) -> Callable[..., Any]:
    """moto's Table.put_item or delete_item, noting when an item came or went (not when one was overwritten)."""

    def run(self: Table, *args: Any, **kwargs: Any) -> Any:
        with _KEY_WRITE:
            before = _item_count(self)
            try:
                return write(self, *args, **kwargs)
            finally:
                if _item_count(self) != before:
                    _KEY_CHANGES[self] = _KEY_CHANGES.get(self, 0) + 1

    return run


def _ordered(
    table: Table, hash_key: Any, partition: dict[Any, Any], again: bool = False
) -> tuple[list[Any], list[Any]]:
    changes = _KEY_CHANGES.get(table, 0)
    known = _ORDERED.get(table)
    if known is None or known[0] != changes:
        known = (changes, {})
        _ORDERED[table] = known
    if again or hash_key not in known[1] or len(known[1][hash_key][0]) != len(partition):
        keys = sorted(partition, key=lambda key: key.cast_value)
        known[1][hash_key] = (keys, [key.cast_value for key in keys])
    return known[1][hash_key]


def _partition_from(
    table: Table,
    hash_key: Any,
    start: dict[str, Any] | None,
    page: tuple[tuple[str, str, list[Any]] | None, int | None] | None,
) -> list[Any]:
    """A base-table Query's partition from its exclusive start key on, by range key; with `page` (the range condition,
    None: every item; the Limit), only the items the range condition holds, up to the one at which moto's loop ends
    the page (the item after the `limit`-th, whatever it is, or the one past 1 MB).
    moto's query keeps only that partition's items, skips those up to the start key and reads on until the page is
    full: the same page, but a page is cut by the size of the items the key condition holds alone, as DynamoDB cuts
    it, where moto counted those it left out."""
    partition = table.items.get(hash_key)
    if partition is None:
        return []
    if not table.range_key_attr:
        return [partition]
    try:
        return _reached(table, hash_key, partition, start, page, _ordered(table, hash_key, partition))
    except KeyError:  # a key gone that the order still held (a write this module did not see): sort again
        return _reached(table, hash_key, partition, start, page, _ordered(table, hash_key, partition, again=True))


def _reached(  # see _partition_from
    table: Table,
    hash_key: Any,
    partition: dict[Any, Any],
    start: dict[str, Any] | None,
    page: tuple[tuple[str, str, list[Any]] | None, int | None] | None,
    order: tuple[list[Any], list[Any]],
) -> list[Any]:
    (keys, casts), ranges = order, str(table.range_key_attr)
    first = 0
    if start and {table.hash_key_attr, ranges} <= set(start) and DynamoType(start[table.hash_key_attr]) == hash_key:
        first = bisect.bisect_right(casts, DynamoType(start[ranges]).cast_value)
    if page is None:
        return [partition[key] for key in itertools.islice(keys, first, None)]
    (ranged, limit), size = page, 0
    items: list[Any] = []
    for key in itertools.islice(keys, first, None):
        item = partition[key]
        if len(items) == limit:
            items.append(item)  # moto ends a full page at the next item, whatever it holds: a LastEvaluatedKey
            break
        if ranged is not None:
            bound = item.attrs.get(ranged[0])
            if not bound or not bound.compare(ranged[1], ranged[2]):
                continue
        items.append(item)
        size += item.size()
        if size > RESULT_SIZE_LIMIT:
            break  # moto's loop ends the page at this item
    return items


def _meeting_key_condition(
    table: Table, hashed: tuple[str, Any], ranged: tuple[str, str, list[Any]] | None
) -> list[Any]:
    """The items an index Query's key condition (one hash key, at most one range condition) holds, in no order (moto
    sorts an index's candidates itself). moto walks every item of the table, sorting all of them twice, and cuts a
    page by the size of items the condition leaves out; DynamoDB reads only the items the key condition holds. The
    values the condition names are cast once, not once an item (DynamoType's comparisons, done here on cast values)."""
    from moto.dynamodb.comparisons import get_comparison_func

    hash_name, hash_value = hashed
    wanted = (hash_value.type, hash_value.cast_value)
    if hash_name == table.hash_key_attr:  # an index keyed by the table's own hash key: that one partition
        partition = table.items.get(hash_value)
        candidates: Any = [] if partition is None else partition.values() if table.range_key_attr else [partition]
    else:
        candidates = (
            item
            for hash_set in table.items.values()
            for item in (hash_set.values() if table.range_key_attr else [hash_set])
        )
    if ranged is not None:
        range_name, holds, bounds = ranged[0], get_comparison_func(ranged[1]), [b.cast_value for b in ranged[2]]
    out = []
    for item in candidates:
        value = item.attrs.get(hash_name)
        if not value or (value.type, value.cast_value) != wanted:
            continue
        if ranged is not None:
            bound = item.attrs.get(range_name)
            if not bound or not holds(bound.cast_value, *bounds):
                continue
        out.append(item)
    return out


def _sorted_items(
    self: Table, hash_key_attrs: list[str], range_key_attrs: list[str | None], items: list[Any]
) -> list[Any]:
    """moto's Table.sorted_items on cast values."""
    attrs = self._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
    items.sort(key=lambda item: tuple(item.attrs[a].cast_value for a in attrs))
    return items


_TABLE_QUERY = inspect.signature(Table.query)


def _query_reading_its_partition(query: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Table, *args: Any, **kwargs: Any) -> Any:
        called = _TABLE_QUERY.bind(self, *args, **kwargs).arguments
        forward = called.get("scan_index_forward", True) is not False
        hashed, ranged = called.get("hash_key_conditions") or [], called.get("range_key_conditions") or []
        index: Any = called.get("index_name")
        reach: Callable[[], list[Any]] | None = None
        if (called.get("range_comparison") and not ranged) or called.get("filter_kwargs"):
            pass  # a range comparison given without its key conditions (moto's backend passes both), or a QueryFilter
        elif index:
            if len(hashed) == 1 and len(ranged) <= 1:
                # With a Limit, every item of the hash: moto ends a full page at the next one, whatever it holds.
                condition = ranged[0] if ranged and called.get("limit") is None else None
                reach = functools.partial(_meeting_key_condition, self, hashed[0], condition)
        elif called.get("hash_key") is not None and len(ranged) <= 1:
            # Backward: the whole partition (moto reverses it, then skips to the start key).
            start = called.get("exclusive_start_key") if forward else None
            page = (ranged[0] if ranged else None, called.get("limit")) if forward else None
            reach = functools.partial(_partition_from, self, called["hash_key"], start, page)
        # Every item returned is projected into a new one (a ProjectionExpression, or an index that keeps only some
        # attributes): moto's copy of the items it read would be thrown away unread.
        indexes = {i.name: i for i in self.all_indexes()}
        projected = bool(called.get("projection_expressions")) or (
            index in indexes and (indexes[index].projection or {}).get("ProjectionType") in ("KEYS_ONLY", "INCLUDE")
        )
        _QUERIED.query, _QUERIED.projected = (self, reach) if reach else None, projected
        try:
            return query(self, *args, **kwargs)
        finally:
            _QUERIED.query, _QUERIED.projected = None, False

    return run


def _deepcopy_unless_projected(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """`copy.deepcopy` as moto's table module calls it, but inside a Query whose every item is projected into a new
    one (`_QUERIED.projected`) its copy of the items read is a plain list of them (the projection copies)."""
    if getattr(_QUERIED, "projected", False) and type(value) is list:
        return list(value)
    return copy.deepcopy(value, memo)


_LIST_ELEMENT = re.compile(r"(.+)\[(\d+)\]$")  # moto's find_nested_key: a path into a list


def _project_top_level_scalars(project: Callable[..., Any]) -> Callable[..., Any]:
    """moto's Item.project, but a projection of top-level names whose values are strings or numbers takes those
    values as they are: moto turns the whole item into plain Python once per name and back, and the round trip keeps a
    string as it is and a number as boto3's serializer writes its Decimal (done here too: the same item)."""

    def run(self: Item, projection_expressions: list[list[str]]) -> Any:
        attrs: dict[str, Any] = {}
        for expr in projection_expressions:
            if len(expr) != 1 or _LIST_ELEMENT.match(expr[0]):
                return project(self, projection_expressions)
            value = self.attrs.get(expr[0])
            if value is None:
                continue
            if value.type == "S" and type(value.value) is str:
                attrs[expr[0]] = {"S": value.value}
            elif value.type == "N" and type(value.value) is str:
                attrs[expr[0]] = dynamo_type.serializer.serialize(
                    dynamo_type.deserializer.deserialize({"N": value.value})
                )
            else:
                return project(self, projection_expressions)
        # moto's Item(), without re-checking the size of a part of an item that passed it (as its __deepcopy__)
        projected: Any = Item.__new__(Item)
        projected.hash_key, projected.range_key = self.hash_key, self.range_key
        projected.attrs = LimitedSizeDict({name: DynamoType(value) for name, value in attrs.items()})
        return projected

    return run


_WIRE_SCALARS = frozenset({"S", "N"})


def _serialize_scalars_as_they_are(serialize: Callable[..., None]) -> Callable[..., None]:
    """moto's JSON `_serialize`, but a DynamoDB AttributeValue holding one string or number goes out as it is: what
    the union's serializer makes of it (its one member, a string, str()'d)."""

    def run(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue" and type(value) is dict and len(value) == 1:
            ((kind, scalar),) = value.items()
            if kind in _WIRE_SCALARS and type(scalar) is str:
                self._default_serialize(serialized, {kind: scalar}, shape, key)
                return
        serialize(self, serialized, value, shape, key)

    return run


@contextlib.contextmanager
def faster_queries() -> Iterator[None]:
    """moto's DynamoDB with the patches above."""
    with (
        mock.patch.object(Table, "all_items", _all_items),
        mock.patch.object(Table, "sorted_items", _sorted_items),
        mock.patch.object(Table, "query", _query_reading_its_partition(Table.query)),
        mock.patch.object(Table, "put_item", _noting_new_keys(Table.put_item)),
        mock.patch.object(Table, "delete_item", _noting_new_keys(Table.delete_item)),
        mock.patch.object(Item, "project", _project_top_level_scalars(Item.project)),
        mock.patch.object(
            table_module, "copy", types.SimpleNamespace(deepcopy=_deepcopy_unless_projected, copy=copy.copy)
        ),
        mock.patch.object(
            BaseJSONSerializer, "_serialize", _serialize_scalars_as_they_are(BaseJSONSerializer._serialize)
        ),
    ):
        _ORDERED.clear()  # an order kept is good only while every write is counted: under these patches
        try:
            yield
        finally:
            _ORDERED.clear()
