"""``HyperPodDhc``: the whole controller as one construct, for a CDK app of one's own
(``infra/hyperpod_dhc/infra/app.py`` is the example).

    stack = cdk.Stack(app, "HyperPodDhc", description=STACK_DESCRIPTION)
    HyperPodDhc(stack, "Default", props=HyperPodDhcProps(config=parse_config({"clusters": ["prod"]})))

The id ``"Default"`` leaves the construct out of every logical id (CDK drops a ``Default`` path component), so a
stack named as the example's gets the example's template. (One logical id follows the construct path anyway: the API
Gateway deployment's, which CDK hashes from the RestApi resource with its ``aws:cdk:path`` metadata when path
metadata is on, as under ``cdk synth``.) One controller per stack: its named
resources take the stack's name (``<stack>-check-round``, ``<stack>-notifications``, ``<stack>-operations``,
``<stack>-operator-api``, the alarms). It composes the construct modules; all decisions live in them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aws_cdk import CfnOutput, Stack, Tags
from constructs import Construct

from hyperpod_dhc.deephealth.domain.policy import ConfigError, ControllerConfig, parse_config
from hyperpod_dhc.infra.audit_queries import AuditQueries
from hyperpod_dhc.infra.controller_config import (
    SLACK_KEY,
    TEAMS_KEY,
    config_parameter,
    deletion_protection,
    notification_email,
    principal_map,
    read_breaker_resetters,
    read_check_requesters,
    read_controller_config,
    read_deletion_protection,
    read_notification_email,
    read_slurm_bridges,
    read_table,
    read_webhooks,
    retention,
)
from hyperpod_dhc.infra.controller_functions import ROUND_STARTERS, ControllerFunctions
from hyperpod_dhc.infra.nodes_table import NodesTable
from hyperpod_dhc.infra.notifications import Notifications, SlackChannel, TeamsChannel, webhook_urls
from hyperpod_dhc.infra.operations_dashboard import OperationsDashboard
from hyperpod_dhc.infra.operator_api import OperatorApi
from hyperpod_dhc.infra.round_workflow import RoundWorkflow
from hyperpod_dhc.infra.triggers import Triggers

SLACK_FIELDS = ("workspace_id", "channel_id")
TEAMS_FIELDS = ("team_id", "channel_id", "tenant_id")

__all__ = ["STACK_DESCRIPTION", "ConfigError", "HyperPodDhc", "HyperPodDhcProps", "parse_config"]

STACK_DESCRIPTION = "hyperpod-dhc: deep health checks for HyperPod Slurm nodes"


@dataclass(frozen=True, kw_only=True)
class HyperPodDhcProps:
    """What ``cdk.json`` carries, as typed values. Each field is its context key's (``from_context``):

    - ``config``: ``hyperpod-dhc``, the controller's policy (``parse_config`` of that mapping validates it);
    - ``table_deletion_protection``: ``hyperpod-dhc:table-deletion-protection``;
    - ``notification_email``: ``hyperpod-dhc:notification-email``, an address subscribed to the notifications topic;
    - ``breaker_resetters``, ``slurm_bridges``, ``check_requesters``: ``hyperpod-dhc:breaker-resetters``,
      ``:slurm-bridges``, ``:check-requesters``: cluster name (or ``"*"``, every cluster) -> IAM role or user ARN
      patterns (lists or tuples; kept as tuples), see ``infra/hyperpod_dhc/infra/operator_api.py``;
    - ``slack``, ``teams``, ``webhooks``: ``hyperpod-dhc:slack`` ({workspace_id, channel_id}), ``:teams``
      ({team_id, channel_id, tenant_id}), ``:webhooks`` ([https URLs]): where the notifications topic is also
      delivered (AWS Chatbot channels; HTTPS subscriptions), see ``infra/hyperpod_dhc/infra/notifications.py``.

    Values given in code are checked as their context keys are on synth: a bad one raises ``ConfigError`` naming the
    field (``from_context`` names the context key). The API's resource-policy size is checked by the construct.
    """

    config: ControllerConfig
    table_deletion_protection: bool = True
    notification_email: str | None = None
    breaker_resetters: Mapping[str, Sequence[str]] = field(default_factory=dict)
    slurm_bridges: Mapping[str, Sequence[str]] = field(default_factory=dict)
    check_requesters: Mapping[str, Sequence[str]] = field(default_factory=dict)
    slack: SlackChannel | None = None
    teams: TeamsChannel | None = None
    webhooks: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.config, ControllerConfig):
            raise ConfigError(
                f"{_named('config')} must be a ControllerConfig (parse_config of the hyperpod-dhc mapping), "
                f"got {type(self.config).__name__}"
            )
        for name, kind in (("slack", SlackChannel), ("teams", TeamsChannel)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise ConfigError(f"{_named(name)} must be a {kind.__name__} or None, got {type(value).__name__}")
        checked = {
            "table_deletion_protection": deletion_protection(
                self.table_deletion_protection, _named("table_deletion_protection")
            ),
            "notification_email": notification_email(self.notification_email, _named("notification_email")),
            **{
                name: principal_map(getattr(self, name), self.config, _named(name))
                for name in ("breaker_resetters", "slurm_bridges", "check_requesters")
            },
            "webhooks": webhook_urls(self.webhooks),
        }
        for name, value in checked.items():  # normalized: stripped address, tuples of unique patterns
            object.__setattr__(self, name, value)

    @classmethod
    def from_context(cls, scope: Construct) -> HyperPodDhcProps:
        """The props ``scope``'s CDK context gives (``cdk.json``, ``-c``); a bad value raises ``ConfigError`` naming
        its context key."""
        config = read_controller_config(scope)
        return cls(
            config=config,
            notification_email=read_notification_email(scope),
            breaker_resetters=read_breaker_resetters(scope, config),
            slurm_bridges=read_slurm_bridges(scope, config),
            check_requesters=read_check_requesters(scope, config),
            table_deletion_protection=read_deletion_protection(scope),
            slack=SlackChannel(**slack) if (slack := read_table(scope, SLACK_KEY, SLACK_FIELDS)) else None,
            teams=TeamsChannel(**teams) if (teams := read_table(scope, TEAMS_KEY, TEAMS_FIELDS)) else None,
            webhooks=read_webhooks(scope),
        )


def _named(field_name: str) -> str:
    return f"HyperPodDhcProps.{field_name}"


class HyperPodDhc(Construct):
    """The controller: nodes table, configuration parameter, Lambdas and their layer, round workflow, triggers,
    notifications, operator API, dashboard and alarms, audit queries, and the stack outputs operators read."""

    # The dead-letter queues' KMS key is created as this construct's child
    # (infra/hyperpod_dhc/infra/dead_letter_queue.py).
    holds_dead_letter_key = True

    def __init__(self, scope: Construct, id: str, *, props: HyperPodDhcProps) -> None:
        stack = Stack.of(scope)
        if any(isinstance(construct, HyperPodDhc) for construct in stack.node.find_all()):
            raise ValueError(
                f"stack {stack.stack_name} already holds a HyperPodDhc: its resources are named after the stack "
                f"({stack.stack_name}-check-round, ...), so each controller needs a stack of its own"
            )
        super().__init__(scope, id)
        Tags.of(self).add("project", "hyperpod-dhc")
        self.props = props
        self.config = props.config
        log_retention = retention(self.config)

        self.table = NodesTable(self, "Nodes", deletion_protection=props.table_deletion_protection)
        self.config_parameter = config_parameter(self, "ControllerConfig", self.config)
        self.functions = ControllerFunctions(
            self,
            "Functions",
            table=self.table,
            config_parameter=self.config_parameter,
            log_retention=log_retention,
            list_clusters=self.config.clusters == "all",
        )
        self.notifications = Notifications(
            self,
            "Notifications",
            email=props.notification_email,
            slack=props.slack,
            teams=props.teams,
            webhooks=props.webhooks,
        )
        for function in self.functions:
            self.notifications.add_publisher(function)
        self.workflow = RoundWorkflow(
            self,
            "RoundWorkflow",
            tasks=self.functions.round_tasks,
            starters=[self.functions[name] for name in ROUND_STARTERS],
            log_retention=log_retention,
        )
        self.triggers = Triggers(
            self,
            "Triggers",
            config=self.config,
            intake=self.functions["Intake"],
            reconcile=self.functions["Reconcile"],
        )
        self.operator_api = OperatorApi(
            self,
            "OperatorApi",
            handler=self.functions["Api"],
            log_retention=log_retention,
            resetters=props.breaker_resetters,
            bridges=props.slurm_bridges,
            check_requesters=props.check_requesters,
        )
        self.dashboard = OperationsDashboard(
            self,
            "Operations",
            config=self.config,
            state_machine=self.workflow.state_machine,
            dead_letter_queues={
                "undelivered-events": self.triggers.undelivered,
                **{
                    f"{name.lower()}-failed-invocations": fn.failed_invocations
                    for name, fn in self.functions.functions.items()
                    if fn.failed_invocations is not None
                },
            },
            functions=self.functions.functions,
            topic=self.notifications.topic,
            api=self.operator_api.api,
            slurm_bridges=props.slurm_bridges,
        )
        self.audit_queries = AuditQueries(
            self, "AuditQueries", log_groups=[function.log_group for function in self.functions]
        )

        outputs = [
            CfnOutput(self, "RoundStateMachineArn", value=self.workflow.state_machine.state_machine_arn),
            CfnOutput(self, "NodesTableName", value=self.table.table_name),
            CfnOutput(self, "ConfigParameterName", value=self.config_parameter.parameter_name),
            CfnOutput(self, "NotificationsTopicArn", value=self.notifications.topic.topic_arn),
            CfnOutput(self, "ApiEndpoint", value=self.operator_api.url, description="Stage URL of the operator API"),
            CfnOutput(self, "ApiId", value=self.operator_api.api.rest_api_id),
            CfnOutput(
                self,
                "SlurmBridgePolicyArn",
                value=self.operator_api.bridge_policy.managed_policy_arn,
                description="Attach to the execution role of each cluster's Slurm controller group (the Slurm "
                "bridge), and name that role for its cluster in hyperpod-dhc:slurm-bridges",
            ),
        ]
        # Named as here under any construct id (one controller per stack): `hpdhc` reads ApiEndpoint by this name.
        for output in outputs:
            output.override_logical_id(output.node.id)
