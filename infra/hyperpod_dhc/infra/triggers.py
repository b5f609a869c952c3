"""What makes the controller act: HyperPod events into Intake, a schedule into Reconcile.

Every EventBridge target retries 4 times within 2 hours and then drops the event into an encrypted
dead-letter queue; the two async Lambdas have their own on-failure DLQs (see ``ControllerFunction``).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from hyperpod_dhc.deephealth.domain.events import CLUSTER_EVENT, NODE_HEALTH_EVENT, SOURCE, STATE_CHANGE_EVENT
from hyperpod_dhc.infra.controller_config import ControllerConfig
from hyperpod_dhc.infra.dead_letter_queue import DeadLetterQueue

# construct id -> (detail-type, path of the cluster name inside `detail`), one rule per detail type Intake
# classifies (domain/events.py; tests/infra/test_stack.py fails when a detail type has no rule).
HYPERPOD_EVENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ClusterEvent": (CLUSTER_EVENT, ("EventDetails", "ClusterName")),
    "ClusterStateChange": (STATE_CHANGE_EVENT, ("ClusterName",)),
    "NodeHealthEvent": (NODE_HEALTH_EVENT, ("ClusterName",)),
}
TARGET_RETRY_ATTEMPTS = 4
TARGET_MAX_EVENT_AGE = Duration.hours(2)


def cluster_name_filter(path: tuple[str, ...], names: tuple[str, ...]) -> dict[str, Any]:
    """``("EventDetails", "ClusterName")`` -> ``{"EventDetails": {"ClusterName": [names...]}}``."""
    pattern: dict[str, Any] = {path[-1]: list(names)}
    for key in reversed(path[:-1]):
        pattern = {key: pattern}
    return pattern


class Triggers(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: ControllerConfig,
        intake: lambda_.IFunction,
        reconcile: lambda_.IFunction,
    ) -> None:
        super().__init__(scope, id)
        self.undelivered = DeadLetterQueue(
            self,
            "UndeliveredEvents",
            holds="events that could not be delivered to Intake or Reconcile",
            target_of_eventbridge=True,
        )
        self.rules: dict[str, events.Rule] = {}
        for name, (detail_type, name_path) in HYPERPOD_EVENTS.items():
            self.rules[name] = events.Rule(
                self,
                name,
                description=f"{detail_type} -> hyperpod-dhc Intake",
                event_pattern=events.EventPattern(
                    source=[SOURCE],
                    detail_type=[detail_type],
                    detail=None if config.clusters == "all" else cluster_name_filter(name_path, config.clusters),
                ),
                targets=[self._target(intake)],
            )
        self.rules["ReconcileSchedule"] = events.Rule(
            self,
            "ReconcileSchedule",
            description="Periodic hyperpod-dhc reconciliation",
            schedule=events.Schedule.rate(Duration.minutes(config.reconcile_every_minutes)),
            targets=[self._target(reconcile)],
        )

    def _target(self, function: lambda_.IFunction) -> targets.LambdaFunction:
        return targets.LambdaFunction(
            function,
            dead_letter_queue=self.undelivered,
            retry_attempts=TARGET_RETRY_ATTEMPTS,
            max_event_age=TARGET_MAX_EVENT_AGE,
        )
