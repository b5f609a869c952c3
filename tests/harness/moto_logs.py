"""moto_patches (f), CloudWatch Logs' part: FilterLogEvents at fleet scale, answered as AWS answers it.

moto's FilterLogEvents tested every event of every stream in the log group against the query, on every page, and
listed every stream in `searchedLogStreams`: at 10,000 nodes a look at one round's lines walked 80,000 events and
sent 10,000 stream names back and forth. Now each stream keeps its events in timestamp order (a stable sort: moto's
order among equal timestamps) and a query reads from its `startTime` on, found by bisection, in only the streams
holding an event that late (each group keeps its streams by their latest timestamp). Two answers follow
AWS where moto did not: `searchedLogStreams` is empty (AWS has returned an empty list since May 2020), and
`logStreamNamePrefix` (which moto ignored) keeps only the streams it starts, refused together with
`logStreamNames` as AWS refuses it. Everything else is moto's: the events, their order, the pages and the tokens.

They reach into moto's internals; `tests/integration/test_moto_patches.py` compares every page with moto's own and
fails loudly when they move.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from moto.logs import models as logs_models
from moto.logs.exceptions import InvalidParameterException
from moto.logs.models import LogGroup, LogStream
from moto.logs.responses import LogsResponse

# A stream's events in timestamp order, their timestamps and how many of the stream's events they hold, kept on the
# stream itself (the attribute's name is ours); the lock is held by a query while it reads or brings them up to date,
# and by a write while it adds events and notes them (re-entrant: a write may end in another write).
_ORDER = "_hpdhc_in_order"
_ORDER_LOCK = threading.RLock()
_KEPT: weakref.WeakSet[LogStream] = weakref.WeakSet()  # the streams holding one, cleared when the patches end
# A group's streams by their latest timestamp, kept on the group itself while the patches run (see `_Latest`).
_LATEST = "_hpdhc_latest"
_INDEXED: weakref.WeakSet[LogGroup] = weakref.WeakSet()


def _in_order(stream: LogStream) -> tuple[list[int], list[Any]]:
    """The stream's events sorted stably by timestamp, and their timestamps. moto only appends events: the ones
    appended since the last look, in order and none earlier than the last one held, extend it; anything else sorts
    the stream again. The caller holds _ORDER_LOCK; the events are read once (a copy), so an event appended
    meanwhile is met at the next look, never counted as held without being held."""
    stamps, ordered, held = stream.__dict__.get(_ORDER) or ([], [], 0)
    if held == len(stream.events):
        return stamps, ordered
    events = list(stream.events)
    if held > len(events):
        stamps, ordered, held = [], [], 0
    new = events[held:]
    new_stamps = [e.timestamp for e in new]
    if (not stamps or new_stamps[0] >= stamps[-1]) and all(a <= b for a, b in itertools.pairwise(new_stamps)):
        stamps, ordered = stamps + new_stamps, ordered + new
    else:
        ordered = sorted(events, key=lambda e: e.timestamp)
        stamps = [e.timestamp for e in ordered]
    setattr(stream, _ORDER, (stamps, ordered, len(events)))
    _KEPT.add(stream)
    return stamps, ordered


class _Latest:
    """A log group's streams by the latest timestamp each holds, and in the group's own order (its dict's), so that
    a query from `startTime` on reads only the streams that reach it, in the order moto reads every stream: at 10,000
    nodes a round's look met 10,000 streams of which a few dozen had lines since. Made from the group at its first
    query, then kept by every stream created, deleted or written (moto's, the fake's and the API's writes all go
    through LogGroup.create_log_stream / delete_log_stream and LogStream.put_log_events); made again when the group
    holds more or fewer streams than it knows (a creation or deletion it missed costs a remake, never an answer).
    Every method is called holding _ORDER_LOCK."""

    def __init__(self, group: LogGroup) -> None:
        self.order: dict[str, int] = {}  # stream name -> place in the group's dict
        self.latest: dict[str, int] = {}  # stream name -> its latest timestamp (streams with events)
        self.by_latest: list[tuple[int, str]] = []  # sorted
        self.next = 0
        for name, stream in group.streams.items():
            self.created(name)
            stamps, _ = _in_order(stream)
            if stamps:
                self.wrote(name, stamps[-1])

    def created(self, name: str) -> None:
        self.order[name] = self.next
        self.next += 1

    def deleted(self, name: str) -> None:
        self.order.pop(name, None)
        if (stamp := self.latest.pop(name, None)) is not None:
            del self.by_latest[bisect.bisect_left(self.by_latest, (stamp, name))]

    def wrote(self, name: str, stamp: int) -> None:
        before = self.latest.get(name)
        if before is not None and before >= stamp:
            return
        if before is not None:
            del self.by_latest[bisect.bisect_left(self.by_latest, (before, name))]
        self.latest[name] = stamp
        bisect.insort(self.by_latest, (stamp, name))

    def reaching(self, start_time: int) -> list[str]:
        """The streams holding an event at or after `start_time`, in the group's order."""
        names = [name for _, name in self.by_latest[bisect.bisect_left(self.by_latest, (start_time, "")) :]]
        return sorted(names, key=self.order.__getitem__)


def _latest(group: LogGroup) -> _Latest:
    """The group's `_Latest`, made (again) when it has none or the group holds streams it does not know."""
    latest = group.__dict__.get(_LATEST)
    if latest is None or len(latest.order) != len(group.streams):
        latest = _Latest(group)
        setattr(group, _LATEST, latest)
        _INDEXED.add(group)
    return latest


def _noting(change: Any, note: Callable[[_Latest, str], None]) -> Any:
    """moto's LogGroup.create_log_stream or delete_log_stream, told to the group's `_Latest` when it keeps one."""

    def run(self: LogGroup, log_stream_name: str) -> None:
        with _ORDER_LOCK:
            change(self, log_stream_name)
            if (latest := self.__dict__.get(_LATEST)) is not None:
                note(latest, log_stream_name)

    return run


def _writing(put: Any) -> Any:
    def put_log_events(self: LogStream, log_events: list[dict[str, Any]]) -> str:
        with _ORDER_LOCK:
            token = put(self, log_events)
            latest = self.log_group.__dict__.get(_LATEST)
            if latest is not None and log_events and self.log_group.streams.get(self.log_stream_name) is self:
                latest.wrote(self.log_stream_name, max(e["timestamp"] for e in log_events))
            return token

    return put_log_events


def _stream_events(stream: LogStream, start_time: int, end_time: int, pattern: Any) -> list[dict[str, Any]]:
    """moto's LogStream.filter_log_events (its events in the window that match, by timestamp), read from the
    window's start by bisection."""
    stamps, ordered = _in_order(stream)
    if not stamps or (start_time and stamps[-1] < start_time):
        return []
    first = bisect.bisect_left(stamps, start_time) if start_time else 0
    last = bisect.bisect_right(stamps, end_time) if end_time else len(stamps)
    name = stream.log_stream_name
    return [
        {**event.to_filter_dict(), "logStreamName": name}
        for event in ordered[first:last]
        if pattern.matches(event.message)
    ]


def _group_filter_log_events(
    self: LogGroup,
    log_group_name: str,
    log_stream_names: list[str],
    start_time: int,
    end_time: int,
    limit: int | None,
    next_token: str | None,
    filter_pattern: str,
    interleaved: bool,
    log_stream_name_prefix: str | None = None,
) -> tuple[list[dict[str, Any]], str | None, list[dict[str, Any]]]:
    """moto's LogGroup.filter_log_events, with the streams a prefix starts and no `searchedLogStreams`."""
    limit = limit or 10000
    events: list[dict[str, Any]] = []
    pattern = logs_models.EventMessageFilter(filter_pattern)
    wanted = set(log_stream_names or ())
    with _ORDER_LOCK:
        # From `startTime` on: only the streams that reach it (the others answer nothing); else every stream.
        names = _latest(self).reaching(start_time) if start_time else list(self.streams)
        for name in names:
            stream = self.streams.get(name)
            if stream is not None and (not wanted or name in wanted) and name.startswith(log_stream_name_prefix or ""):
                events += _stream_events(stream, start_time, end_time, pattern)
    if interleaved:
        events = sorted(events, key=lambda event: event["timestamp"])
    first_index = 0
    if next_token:
        try:
            group, stream_name, event_id = next_token.split("@")
            if group != log_group_name:
                raise ValueError()
            first_index = 1 + next(
                index
                for (index, e) in enumerate(events)
                if e["logStreamName"] == stream_name and e["eventId"] == event_id
            )
        except (ValueError, StopIteration):
            first_index, events = 0, []  # AWS returns an empty list for a token it does not know
    last_index = min(first_index + limit, len(events))
    page = events[first_index:last_index]
    token = None
    if page and last_index < len(events):
        token = f"{log_group_name}@{page[-1]['logStreamName']}@{page[-1]['eventId']}"
    return page, token, []


def _filter_log_events(self: LogsResponse) -> Any:
    """moto's FilterLogEvents response, passing `logStreamNamePrefix` on."""
    log_group_name = self._get_param("logGroupName")
    log_stream_names = self._get_param("logStreamNames", [])
    prefix = self._get_param("logStreamNamePrefix")
    if log_stream_names and prefix is not None:
        raise InvalidParameterException()
    limit = self._get_param("limit")
    backend = self.logs_backend
    if log_group_name not in backend.groups:
        return _original_response(self)  # moto's own refusal
    if limit and limit > 10000:
        return _original_response(self)
    events, next_token, searched = _group_filter_log_events(
        backend.groups[log_group_name],
        log_group_name,
        log_stream_names,
        self._get_param("startTime"),
        self._get_param("endTime"),
        limit,
        self._get_param("nextToken"),
        self._get_param("filterPattern"),
        self._get_param("interleaved", False),
        prefix,
    )
    return json.dumps({"events": events, "nextToken": next_token, "searchedLogStreams": searched})


_original_response = LogsResponse.filter_log_events


@contextlib.contextmanager
def faster_filters() -> Iterator[None]:
    """moto's CloudWatch Logs with the patches above."""
    with (
        mock.patch.object(LogsResponse, "filter_log_events", _filter_log_events),
        mock.patch.object(LogGroup, "create_log_stream", _noting(LogGroup.create_log_stream, _Latest.created)),
        mock.patch.object(LogGroup, "delete_log_stream", _noting(LogGroup.delete_log_stream, _Latest.deleted)),
        mock.patch.object(LogStream, "put_log_events", _writing(LogStream.put_log_events)),
    ):
        try:
            yield
        finally:
            with _ORDER_LOCK:
                for stream in list(_KEPT):
                    stream.__dict__.pop(_ORDER, None)
                _KEPT.clear()
                for group in list(_INDEXED):
                    group.__dict__.pop(_LATEST, None)
                _INDEXED.clear()
