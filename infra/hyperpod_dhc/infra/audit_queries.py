"""CloudWatch Logs Insights saved queries over the controller's ``decision`` audit lines.

Every state transition is logged by the function that made it as one JSON line::

    {"level": "INFO", "message": "decision", "correlation_id": "demo-r000003",
     "decision": {"cluster": "demo", "node": "<logical id>", "group": "p5", "instance_id": "i-…",
                  "from_state": "checking", "to_state": "passed", "reason": "…", "verdict": "passed",
                  "evidence": ["…"], "action": null}}

``correlation_id`` is the trigger: the round id (``<cluster>-r<seq>``) in round steps, the event id in
Intake, the API request in Api. The queries run over every controller function's log group; the
``"<node>"`` and ``"<round-id>"`` placeholders are replaced in the console before running them.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_logs as logs
from constructs import Construct

PREFIX = "hyperpod-dhc/"
DECISION_FIELDS = [
    "@timestamp",
    "decision.cluster",
    "decision.group",
    "decision.node",
    "decision.instance_id",
    "decision.from_state",
    "decision.to_state",
    "decision.verdict",
    "decision.action",
    "decision.reason",
    "correlation_id",
]
RECOVERY_ACTIONS = ("reboot", "replace", "hyperpod", "await-hyperpod")
RECOVERY_STATES = ("recovering", "quarantined")


def _in(values: Sequence[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


QUERIES: dict[str, logs.QueryString] = {
    "NodeHistory": logs.QueryString(
        fields=[*DECISION_FIELDS, "decision.evidence.0"],
        filter_statements=['message = "decision"', 'decision.node = "<node>"'],
        sort="@timestamp asc",
        limit=1000,
    ),
    "RecoveryActions": logs.QueryString(
        fields=DECISION_FIELDS,
        filter_statements=[
            'message = "decision"',
            f"decision.action in {_in(RECOVERY_ACTIONS)} or decision.to_state in {_in(RECOVERY_STATES)}",
        ],
        sort="@timestamp desc",
        limit=1000,
    ),
    "RoundDecisions": logs.QueryString(
        fields=DECISION_FIELDS,
        filter_statements=[
            'message = "decision"',
            'correlation_id = "<round-id>" or decision.trigger = "<round-id>"',
        ],
        sort="@timestamp asc",
        limit=10000,
    ),
}
NAMES = {
    "NodeHistory": f"{PREFIX}history of one node",
    "RecoveryActions": f"{PREFIX}recovery actions",
    "RoundDecisions": f"{PREFIX}every decision of one round",
}


class AuditQueries(Construct):
    def __init__(self, scope: Construct, id: str, *, log_groups: Sequence[logs.ILogGroup]) -> None:
        super().__init__(scope, id)
        self.queries = {
            key: logs.QueryDefinition(
                self,
                key,
                query_definition_name=NAMES[key],
                query_string=query,
                log_groups=list(log_groups),
            )
            for key, query in QUERIES.items()
        }
