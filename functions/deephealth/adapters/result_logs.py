"""Deep health check results from CloudWatch Logs: `/aws/sagemaker/Clusters/<name>/<id>`, streams
`DeepHealthCheckResults/*`. Every line is read (not only errors): a pass needs a line that says so."""

from __future__ import annotations

from typing import Any

from deephealth.adapters import aws
from deephealth.domain.result_lines import STREAM_PREFIX, ResultLine, parse_line


class ResultLogs:
    def __init__(self, logs: Any | None = None) -> None:
        self._logs = logs

    @property
    def logs(self) -> Any:
        return self._logs or aws.client("logs")

    @aws.translated
    def lines_since(self, log_group: str, since_s: float) -> tuple[ResultLine, ...]:
        """Every result line timestamped at or after `since_s`, from one paginated query, with when CloudWatch
        Logs ingested it (the lag the settle time follows)."""
        lines: list[ResultLine] = []
        try:
            pages = self.logs.get_paginator("filter_log_events").paginate(
                logGroupName=log_group, logStreamNamePrefix=STREAM_PREFIX, startTime=int(since_s * 1000)
            )
            for page in pages:
                for event in page.get("events", []):
                    line = parse_line(
                        event.get("logStreamName", ""),
                        event.get("message", ""),
                        event["timestamp"],
                        event.get("ingestionTime"),
                    )
                    if line is not None:
                        lines.append(line)
        except aws.ClientError as err:
            if err.response["Error"]["Code"] == "ResourceNotFoundException":
                return ()  # no log group yet: nothing has been logged
            raise
        return tuple(lines)
