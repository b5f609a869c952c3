"""Deep health check results from CloudWatch Logs: `/aws/sagemaker/Clusters/<name>/<id>`, streams
`DeepHealthCheckResults/*`, one JSON object per line with a `level` of "error" for failures."""

from __future__ import annotations

import json
import re
from typing import Any

from deephealth.adapters import aws

STREAM_PREFIX = "DeepHealthCheckResults/"
ERROR_PATTERN = '{ $.level = "error" }'
INSTANCE_ID = re.compile(r"\bi-[0-9a-f]{8}(?:[0-9a-f]{9})?\b")


class ResultLogs:
    def __init__(self, logs: Any | None = None) -> None:
        self._logs = logs

    @property
    def logs(self) -> Any:
        return self._logs or aws.client("logs")

    @aws.translated
    def errors_since(self, log_group: str, since_s: float, instance_ids: set[str]) -> dict[str, str]:
        """First error line per instance (of `instance_ids`) logged since `since_s`, from one paginated query."""
        found: dict[str, str] = {}
        try:
            pages = self.logs.get_paginator("filter_log_events").paginate(
                logGroupName=log_group,
                logStreamNamePrefix=STREAM_PREFIX,
                startTime=int(since_s * 1000),
                filterPattern=ERROR_PATTERN,
            )
            for page in pages:
                for event in page.get("events", []):
                    hit = _error_line(event)
                    if hit and hit[0] in instance_ids and hit[0] not in found:
                        found[hit[0]] = hit[1]
        except aws.ClientError as err:
            if err.response["Error"]["Code"] == "ResourceNotFoundException":
                return found  # no log group yet: nothing has been logged, so no errors
            raise
        return found


def _error_line(event: dict[str, Any]) -> tuple[str, str] | None:
    """(instance id, message) for an error line; the filter pattern is re-checked here on purpose."""
    stream = event.get("logStreamName", "")
    if not stream.startswith(STREAM_PREFIX):
        return None
    try:
        line = json.loads(event.get("message", ""))
    except ValueError:
        return None
    if not isinstance(line, dict) or str(line.get("level", "")).lower() != "error":
        return None
    message = str(line.get("msg", ""))
    # Where the instance id appears is not documented: the stream name, a field, or the message text.
    for candidate in (stream, str(line.get("instance_id", "")), str(line.get("InstanceId", "")), message):
        match = INSTANCE_ID.search(candidate)
        if match:
            return match.group(0), message
    return None
