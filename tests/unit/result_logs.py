"""Result logs as a look reads them, for the domain's tests: events on streams, placed against a few records."""

from __future__ import annotations

import json
from collections.abc import Iterable

from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState
from hyperpod_dhc.deephealth.domain.result_log import ResultLog
from hyperpod_dhc.deephealth.evidence.records import Event


def event(stream: str, at: float, message: str, lag: float | None = 0.0) -> Event:
    """An event of `DeepHealthCheckResults/<stream>` stamped `at` (s), ingested `lag` s later (None: not said)."""
    ingested = None if lag is None else int((at + lag) * 1000)
    return Event(stream, int(at * 1000), message, ingested)


def error(message: str) -> str:
    return json.dumps({"level": "error", "ts": "2026-03-29T19:15:22Z", "msg": message})


def info(message: str) -> str:
    return json.dumps({"level": "info", "ts": "2026-03-29T19:15:22Z", "msg": message})


def owners(**keys_by_instance: str) -> list[NodeRecord]:
    """Records holding these instances (instance id -> record key), as attribution knows them."""
    return [
        NodeRecord(cluster="c", key=key, group="gpu", logical_id=key, instance_id=iid, instance_ids=[iid],
                   state=NodeState.CHECKING)
        for iid, key in keys_by_instance.items()
    ]  # fmt: skip


def read(events: Iterable[Event], records: Iterable[NodeRecord], since: float = 0.0, **kw: object) -> ResultLog:
    return ResultLog.of(events, records, since=since, read_at=0.0, **kw)  # type: ignore[arg-type]
