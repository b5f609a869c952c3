"""A synthesized CloudWatch alarm evaluated over the EMF records the functions printed, as CloudWatch would.

For a simple single-metric alarm (one `MetricStat`, or the classic `MetricName`/`Statistic` form; no math, no
anomaly band): the records of the alarm's namespace, metric name and exact dimension set (EMF: each dimension set
of a directive is a metric of its own), bucketed into periods aligned on the period (epoch seconds, as CloudWatch
aligns them), one statistic per period, compared with the threshold; of the last `EvaluationPeriods` periods,
`DatapointsToAlarm` breaching ones put it in ALARM. A period without a record is missing data, which
`TreatMissingData` makes good (`notBreaching`), bad (`breaching`) or not counted (`missing`, the default; `ignore`:
and with no data at all the state stays as it was).

What CloudWatch also does and this does not: look at the current, partial period (here the range is the whole
periods before `now`, so the answer does not depend on where `now` falls within one), extend the range back to
find data for `missing`, and ingest late data. The records' time is EMF's `Timestamp`: under the harness's virtual
clock, print them with `virtual_emf_timestamps`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from unittest import mock

ALARM, OK, INSUFFICIENT_DATA = "ALARM", "OK", "INSUFFICIENT_DATA"
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}
_STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "Sum": sum,
    "Maximum": max,
    "Minimum": min,
    "Average": lambda v: sum(v) / len(v),
    "SampleCount": len,
}
# Where Powertools stamps an EMF record with the wall clock (`dt.datetime.now()`): `Metrics` and `single_metric`.
_EMF_MODULES = (
    "aws_lambda_powertools.metrics.base",
    "aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch",
)


def emf_records(stdout: str) -> list[dict[str, Any]]:
    """Every EMF record in captured standard output (one JSON object a line, with `_aws.CloudWatchMetrics`)."""
    out = []
    for line in stdout.splitlines():
        if not line.startswith("{") or '"CloudWatchMetrics"' not in line:
            continue
        record = json.loads(line)
        if isinstance(record.get("_aws"), dict) and "CloudWatchMetrics" in record["_aws"]:
            out.append(record)
    return out


@contextlib.contextmanager
def virtual_emf_timestamps(now: Callable[[], float]) -> Iterator[None]:
    """EMF records stamped with `now()` (the harness's virtual clock) instead of the wall clock."""

    class VirtualDatetime(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> dt.datetime:  # type: ignore[override]
            return dt.datetime.fromtimestamp(now(), tz)

    virtual = types.SimpleNamespace(**{**vars(dt), "datetime": VirtualDatetime})
    with contextlib.ExitStack() as stack:
        for module in _EMF_MODULES:
            stack.enter_context(mock.patch(f"{module}.dt", virtual))
        yield


def metric_query(alarm: Mapping[str, Any]) -> tuple[str, str, dict[str, str], str, int]:
    """(namespace, metric name, dimensions, statistic, period) of a simple single-metric alarm's properties."""
    if "Metrics" in alarm:
        queries = alarm["Metrics"]
        if len(queries) != 1 or "MetricStat" not in queries[0]:
            raise ValueError(f"not a single-metric alarm: {[q.get('Id') for q in queries]}")
        stat = queries[0]["MetricStat"]
        metric, statistic, period = stat["Metric"], stat["Stat"], stat["Period"]
    else:
        metric, statistic, period = alarm, alarm["Statistic"], alarm["Period"]
    dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
    if statistic not in _STATISTICS:
        raise ValueError(f"statistic {statistic} is not evaluated here")
    return metric["Namespace"], metric["MetricName"], dimensions, statistic, int(period)


def datapoints(
    records: Iterable[Mapping[str, Any]], namespace: str, name: str, dimensions: Mapping[str, str]
) -> list[tuple[float, float]]:
    """(epoch seconds, value) of every value of the metric with exactly `dimensions` in the EMF records."""
    out = []
    for record in records:
        meta = record["_aws"]
        at = meta["Timestamp"] / 1000
        for directive in meta["CloudWatchMetrics"]:
            if directive["Namespace"] != namespace or name not in {m["Name"] for m in directive["Metrics"]}:
                continue
            for dimension_set in directive["Dimensions"]:
                if set(dimension_set) == set(dimensions) and all(record.get(k) == v for k, v in dimensions.items()):
                    values = record[name]
                    out += [(at, float(v)) for v in (values if isinstance(values, list) else [values])]
    return out


def period_values(alarm: Mapping[str, Any], records: Iterable[Mapping[str, Any]], now: float) -> list[float | None]:
    """The statistic of each of the alarm's last `EvaluationPeriods` whole periods before `now`, oldest first
    (None: no data in that period)."""
    namespace, name, dimensions, statistic, period = metric_query(alarm)
    count = int(alarm["EvaluationPeriods"])
    end = math.floor(now / period) * period
    buckets: list[list[float]] = [[] for _ in range(count)]
    for at, value in datapoints(records, namespace, name, dimensions):
        index = count - (end - math.floor(at / period) * period) // period  # the period `at` falls in
        if 0 <= index < count:
            buckets[index].append(value)
    return [_STATISTICS[statistic](b) if b else None for b in buckets]


def alarm_state(
    alarm: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]],
    now: float,
    previous: str = INSUFFICIENT_DATA,
) -> str:
    """ALARM, OK or INSUFFICIENT_DATA: the alarm's state at `now` over `records` (module doc)."""
    compare = _COMPARE[alarm["ComparisonOperator"]]
    threshold = float(alarm["Threshold"])
    needed = int(alarm.get("DatapointsToAlarm", alarm["EvaluationPeriods"]))
    missing = alarm.get("TreatMissingData", "missing")
    values = period_values(alarm, records, now)
    if all(v is None for v in values):
        return {"notBreaching": OK, "breaching": ALARM, "ignore": previous}.get(missing, INSUFFICIENT_DATA)
    breaching = sum(compare(v, threshold) if v is not None else missing == "breaching" for v in values)
    return ALARM if breaching >= needed else OK


def find_alarm(template: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The properties of the template's alarm whose `AlarmName` is `<stack>-<name>`."""
    found = [
        r["Properties"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and str(r["Properties"].get("AlarmName")).split("-", 1)[-1] == name
    ]
    if len(found) != 1:
        raise KeyError(f"{len(found)} alarms named {name}")
    return found[0]
