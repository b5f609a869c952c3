"""Deep health check results from CloudWatch Logs: `/aws/sagemaker/Clusters/<name>/<id>`, streams
`DeepHealthCheckResults/*`. Every event of a window is read (not only errors): a pass needs records that say so.
Late failures of nodes already passed are looked for with a server-side filter: a prefilter, never a judge (what
it returns is rebuilt into records and classified like everything else)."""

from __future__ import annotations

from typing import Any

from hyperpod_dhc.deephealth.adapters import aws
from hyperpod_dhc.deephealth.evidence.records import STREAM_PREFIX, Event

# The failure family as a CloudWatch Logs filter pattern (a regular expression between %: letters, digits and
# | only, case spelled out): every built-in failure (levels of the error family, failure words, a DCGM flag
# `true`, XID, #wrong) has one of these in its text.
FAILURE_TERMS = (
    "err", "fail", "fault", "fatal", "crit", "panic", "emerg", "unhealthy", "true", "xid", "wrong", "alert",
)  # fmt: skip
FAILURE_FILTER = "%" + "|".join("".join(f"[{c.upper()}{c}]" for c in term) for term in FAILURE_TERMS) + "%"


class ResultLogs:
    def __init__(self, logs: Any | None = None) -> None:
        self._logs = logs

    @property
    def logs(self) -> Any:
        return self._logs or aws.client("logs")

    @aws.translated
    def events_since(self, log_group: str, since_s: float) -> tuple[Event, ...]:
        """Every result-stream event timestamped at or after `since_s`, from one paginated query, with when
        CloudWatch Logs ingested it (the lateness the settle time follows)."""
        return self._events(log_group, since_s)

    @aws.translated
    def count_since(self, log_group: str, since_s: float) -> int:
        """How many result-stream events are timestamped at or after `since_s` (a round's polls list its members
        when this moves: the lines are not read or parsed, only counted)."""
        return sum(1 for _ in self._raw(log_group, since_s))

    @aws.translated
    def failure_events(self, log_group: str, since_s: float) -> tuple[Event, ...]:
        """The result-stream events timestamped at or after `since_s` that FAILURE_FILTER lets through."""
        return self._events(log_group, since_s, FAILURE_FILTER)

    def _events(self, log_group: str, since_s: float, pattern: str | None = None) -> tuple[Event, ...]:
        return tuple(e for raw in self._raw(log_group, since_s, pattern) if (e := Event.of(raw)) is not None)

    def _raw(self, log_group: str, since_s: float, pattern: str | None = None) -> list[dict[str, Any]]:
        """The events of one paginated FilterLogEvents query, as CloudWatch Logs returns them."""
        query: dict[str, Any] = {
            "logGroupName": log_group,
            "logStreamNamePrefix": STREAM_PREFIX,
            "startTime": int(since_s * 1000),
        }
        if pattern is not None:
            query["filterPattern"] = pattern
        try:
            return [raw for page in self.logs.get_paginator("filter_log_events").paginate(**query)
                    for raw in page.get("events", [])]  # fmt: skip
        except aws.ClientError as err:
            if err.response["Error"]["Code"] == "ResourceNotFoundException":
                return []  # no log group yet: nothing has been logged
            raise
