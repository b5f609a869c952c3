"""The operators' CloudWatch dashboard ``<stack name>-operations`` and the alarms that notify them.

Controller metrics are Powertools EMF in namespace ``HyperPodDHC`` with the dimension
``service=hyperpod-dhc``; node metrics are also emitted with ``service`` + ``cluster``, and when the
configuration names its clusters each one gets a row of its own. Step Functions, SQS and Lambda
metrics come from their services.

Alarms (each notifies the topic, and treats missing data as not breaching): a round execution that failed, timed
out or was aborted, a message in any dead-letter queue, 10 or more throttled AWS calls in 5 minutes, a quarantined
node, 5 or more 5xx answers of the operator API in 5 minutes, a failed invocation of the Api function. Each
alarm's description ends with the link to its section of docs/RUNBOOKS.md (``hyperpod_dhc.deephealth.domain.runbooks``).

Slurm bridges (``hyperpod-dhc:slurm-bridges``). Per cluster named there (naming a cluster says it runs a bridge):

- ``slurm-bridge-silent-<cluster>``: the Api function counts each state pull and occupancy report it accepts as
  ``SlurmBridgeReports`` (``service`` + ``cluster``). The bridge pulls every sync (60 s), so none in
  ``BRIDGE_SILENT_PERIODS`` consecutive 5-minute periods means it stopped: a 403 after a role change, a crash loop,
  a node gone. Nodes then stay drained, or take jobs unchecked, in silence. Here missing data is the signal, so it
  breaches (a bridge with no node in Slurm still pulls, so it does not alarm).
- What the bridge holding the cluster's fence says of its last pass on each pull (``domain.bridge_fence``; the Api
  counts it per cluster and stack-wide, a bridge that does not hold the fence is not counted), each alarm at the
  first 5-minute period that shows it: ``slurm-bridge-behind-<cluster>``, changes were due and none was applied
  for 3 syncs (``SlurmBridgeBehindSeconds`` above ``BRIDGE_BEHIND_S``); ``slurmctld-unreachable-<cluster>``,
  slurmctld did not answer a pass (``SlurmctldUnreachable`` ≥ 1); ``slurm-bridge-refused-<cluster>``, slurmctld
  refused every update of a pass (``SlurmBridgeUpdatesRefused`` ≥ 1). No data is a silent bridge, which is the
  silent alarm's to say: they treat missing data as not breaching.

A ``"*"`` entry cannot name its clusters: the same three alarms then also watch the stack-wide metrics (``service``
only: every cluster's bridge, named or not), named ``slurm-bridge-behind``, ``slurmctld-unreachable`` and
``slurm-bridge-refused``, and ``slurm-bridge-silent`` watches ``SlurmBridgeSilent``, which Reconcile emits for every
cluster some bridge ever held the fence of, each run: 1 when the holder has not pulled for ``SILENT_S`` (15
minutes), else 0 (missing data: no such cluster, not breaching). Which cluster: the same metric per ``cluster`` in
the namespace. Each alarm has its graph on the dashboard, in a "Slurm bridges" row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Duration, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from hyperpod_dhc.deephealth.domain.bridge_fence import (
    BEHIND_METRIC,
    REFUSED_METRIC,
    SILENT_METRIC,
    SILENT_S,
    UNREACHABLE_METRIC,
)
from hyperpod_dhc.deephealth.domain.nodes import Verdict
from hyperpod_dhc.deephealth.domain.runbooks import alarm_runbook
from hyperpod_dhc.deephealth.domain.slurm import SYNC_INTERVAL_S
from hyperpod_dhc.infra.controller_config import EVERY_CLUSTER, ControllerConfig
from hyperpod_dhc.infra.controller_functions import METRICS_NAMESPACE, SERVICE_NAME
from hyperpod_dhc.infra.notifications import alarm_name

PERIOD = Duration.minutes(5)
# Every verdict (domain/nodes.py; the controller counts each as metric `Verdict_<verdict>`), in the order of the
# enum but `gone` last: it is the node's end, not a judgement of it.
VERDICTS = tuple(v.value for v in sorted(Verdict, key=lambda v: v is Verdict.GONE))
RECOVERY_METRICS = ("RebootRequests", "ReplaceRequests", "NodesRecovered")
# Intake drops (tests/integration/test_bad_input_corpus.py) and the operator API's 4xx answers.
BAD_INPUT_METRICS = ("MalformedEvents", "ForeignEvents", "IgnoredEvents", "RejectedRequests")
THROTTLED_THRESHOLD = 10  # throttled AWS calls (after botocore's retries) in one 5-minute period
# 5xx answers of the operator API in one 5-minute period: a lone 503 (AWS throttled the Api function, "retry") is
# retried by hpdhc and the bridges; the function's own failures alarm at the first (api-function-errors).
API_5XX_THRESHOLD = 5
BRIDGE_REPORTS_METRIC = "SlurmBridgeReports"  # hyperpod_dhc.deephealth.observability.bridge_reported
BRIDGE_SILENT_PERIODS = 3  # 5-minute periods without an occupancy report: 15 syncs of the bridge missed
BRIDGE_BEHIND_S = 3 * SYNC_INTERVAL_S  # Slurm not matching what the bridge had to apply for 3 syncs
WIDTH = 8  # three widgets per row of 24
BRIDGE_WIDTH = 6  # a Slurm bridge's four alarms in a row


@dataclass(frozen=True)
class BridgeStatusAlarm:
    """An alarm on what the fence holder says of its last pass (module doc), per named cluster and stack-wide."""

    what: str  # the alarm's name: `<what>-<cluster>` per cluster, `<what>` stack-wide
    metric: str
    threshold: float
    comparison: cw.ComparisonOperator
    title: str  # its dashboard widget's
    says: str  # what it means and what to do, of "{where}"


_JOURNAL = "`journalctl -u hpdhc-slurm-bridge` on the Slurm controller node"
BRIDGE_STATUS_ALARMS = (
    BridgeStatusAlarm(
        "slurm-bridge-behind",
        BEHIND_METRIC,
        BRIDGE_BEHIND_S,
        cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        "Slurm behind the controller (s)",
        f"The Slurm bridge of {{where}} had changes to apply and Slurm has not matched them for over "
        f"{BRIDGE_BEHIND_S} s (3 syncs): new nodes may take jobs before their check, passed ones stay drained. "
        f"Look at {_JOURNAL} (metric SlurmBridgeErrors counts each pass's errors).",
    ),
    BridgeStatusAlarm(
        "slurmctld-unreachable",
        UNREACHABLE_METRIC,
        1,
        cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        "slurmctld unreachable",
        "slurmctld did not answer a pass of the Slurm bridge of {where}: no node is drained or resumed until it "
        "does. Check `scontrol ping` and `systemctl status slurmctld` on the Slurm controller node.",
    ),
    BridgeStatusAlarm(
        "slurm-bridge-refused",
        REFUSED_METRIC,
        1,
        cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        "Slurm updates refused",
        "slurmctld refused every update of a pass of the Slurm bridge of {where}: nodes keep their old state in "
        f"Slurm. {_JOURNAL} shows slurmctld's answer.",
    ),
)


def described(description: str, runbook: str) -> str:
    """An alarm's description: what it means, then the link to its runbook section (docs/RUNBOOKS.md)."""
    return f"{description} Runbook: {alarm_runbook(runbook)}"


def controller_metric(
    name: str, *, cluster: str | None = None, statistic: str = "Sum", label: str | None = None
) -> cw.Metric:
    dimensions = {"service": SERVICE_NAME} | ({"cluster": cluster} if cluster is not None else {})
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map=dimensions,
        statistic=statistic,
        period=PERIOD,
        label=label,
    )


def graph(title: str, left: Sequence[cw.IMetric], *, stacked: bool = False, width: int = WIDTH) -> cw.GraphWidget:
    return cw.GraphWidget(title=title, left=list(left), stacked=stacked, width=width, height=6)


class OperationsDashboard(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: ControllerConfig,
        state_machine: sfn.StateMachine,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
        topic: sns.ITopic,
        api: apigw.RestApi | None = None,
        slurm_bridges: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.dashboard_name = f"{stack.stack_name}-operations"
        action = cw_actions.SnsAction(topic)

        def alarm(
            what: str, metric: cw.IMetric, threshold: float, description: str, runbook: str | None = None
        ) -> cw.Alarm:
            created = cw.Alarm(
                self,
                "".join(part.capitalize() for part in what.split("-")) + "Alarm",
                alarm_name=alarm_name(self, what),
                alarm_description=described(description, runbook or what),
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
            created.add_alarm_action(action)
            return created

        failed = state_machine.metric_failed(period=PERIOD, statistic="Sum", label="ExecutionsFailed")
        dlq_depth = {
            name: queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum", label=name)
            for name, queue in dead_letter_queues.items()
        }
        throttled = controller_metric("Throttled", label="Throttled AWS calls (controller)")
        quarantined = controller_metric("NodesQuarantined")

        self.alarms: dict[str, cw.Alarm] = {
            "rounds-failed": alarm(
                "rounds-failed",
                failed,
                1,
                f"A check round ({state_machine.state_machine_name}) execution failed; Reconcile restarts "
                "the cluster's round. Look at the execution's history and the 'every decision of one round' query.",
            ),
            **{
                f"dlq-{name}": alarm(
                    f"dlq-{name}",
                    metric,
                    1,
                    f"Messages are waiting in the {name} dead-letter queue (kept 14 days); inspect and redrive them.",
                    runbook="dlq",
                )
                for name, metric in dlq_depth.items()
            },
            "throttled": alarm(
                "throttled",
                throttled,
                THROTTLED_THRESHOLD,
                f"{THROTTLED_THRESHOLD} or more AWS API calls of the controller were throttled in 5 minutes "
                "(after botocore's retries); rounds slow down.",
            ),
            "nodes-quarantined": alarm(
                "nodes-quarantined",
                quarantined,
                1,
                "A node was quarantined after its recovery attempts; an operator decides what happens to it "
                "(see the 'recovery actions' and 'history of one node' queries).",
            ),
            "rounds-timed-out": alarm(
                "rounds-timed-out",
                state_machine.metric_timed_out(period=PERIOD, statistic="Sum", label="ExecutionsTimedOut"),
                1,
                f"A check round ({state_machine.state_machine_name}) execution ran past its 24 h timeout and was "
                "stopped mid-step; Reconcile restarts the cluster's round. Look at where the execution stopped.",
            ),
            "rounds-aborted": alarm(
                "rounds-aborted",
                state_machine.metric_aborted(period=PERIOD, statistic="Sum", label="ExecutionsAborted"),
                1,
                f"A check round ({state_machine.state_machine_name}) execution was stopped (StopExecution) by "
                "someone or something outside the controller; Reconcile restarts the cluster's round.",
            ),
        }
        if api is not None:
            self.alarms["operator-api-5xx"] = alarm(
                "operator-api-5xx",
                api.metric_server_error(period=PERIOD, statistic="Sum", label="5XXError"),
                API_5XX_THRESHOLD,
                f"The operator API answered {API_5XX_THRESHOLD} or more requests with a 5xx in 5 minutes: hpdhc "
                "and the Slurm bridges get errors (a 503 says AWS throttled the Api function's calls; a 502 or "
                "504, that the function failed or timed out).",
            )
        api_function = functions.get("Api")
        if api_function is not None:
            self.alarms["api-function-errors"] = alarm(
                "api-function-errors",
                api_function.metric_errors(period=PERIOD, statistic="Sum", label="Api Errors"),
                1,
                "An invocation of the Api function (the operator API's) failed: an unhandled error or a timeout; "
                "its request got a 5xx. Look at the function's log group for the error.",
            )

        # Slurm bridges: cluster (None: stack-wide, for a "*" entry) -> its alarms (dashboard title, alarm), in order.
        bridge_alarms: dict[str | None, list[tuple[str, cw.Alarm]]] = {}
        for cluster in sorted(c for c in slurm_bridges or {} if c != EVERY_CLUSTER):
            silent = self._bridge_silent_alarm(cluster, action)
            self.alarms[f"slurm-bridge-silent-{cluster}"] = silent
            bridge_alarms[cluster] = [("Slurm bridge reports", silent), *self._bridge_status_alarms(cluster, action)]
        if EVERY_CLUSTER in (slurm_bridges or {}):
            silent = self._bridge_silence_alarm(action)
            self.alarms["slurm-bridge-silent"] = silent
            bridge_alarms[None] = [("Slurm bridge silent", silent), *self._bridge_status_alarms(None, action)]

        dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=self.dashboard_name,
            default_interval=Duration.days(1),
        )
        dashboard.add_widgets(
            cw.TextWidget(
                markdown=(
                    f"# hyperpod-dhc operations\n"
                    f"Controller metrics: namespace `{METRICS_NAMESPACE}`, dimension `service={SERVICE_NAME}` "
                    f"(node metrics also per `cluster`). Alarms notify the `{topic.topic_name}` topic. Audit: "
                    "Logs Insights saved queries `hyperpod-dhc/*`."
                ),
                width=24,
                height=2,
            )
        )
        dashboard.add_widgets(*self._node_widgets(None))
        dashboard.add_widgets(
            graph("Quarantines", [quarantined]),
            self._rounds_widget(state_machine),
            graph(
                "Failed executions",
                [
                    failed,
                    state_machine.metric_timed_out(period=PERIOD, statistic="Sum", label="ExecutionsTimedOut"),
                    state_machine.metric_aborted(period=PERIOD, statistic="Sum", label="ExecutionsAborted"),
                ],
            ),
        )
        dashboard.add_widgets(
            graph("Dead-letter queue depth", list(dlq_depth.values())),
            graph("Bad input", [controller_metric(name) for name in BAD_INPUT_METRICS]),
            graph(
                "Throttling",
                [throttled]
                + [
                    fn.metric_throttles(period=PERIOD, statistic="Sum", label=f"{name} Lambda Throttles")
                    for name, fn in functions.items()
                ],
            ),
        )
        health = [
            graph(
                "Lambda errors",
                [fn.metric_errors(period=PERIOD, statistic="Sum", label=name) for name, fn in functions.items()],
            )
        ]
        if api is not None:
            health += [
                graph(
                    "Operator API requests",
                    [
                        api.metric_count(period=PERIOD, statistic="Sum", label="Count"),
                        api.metric_client_error(period=PERIOD, statistic="Sum", label="4XXError"),
                        api.metric_server_error(period=PERIOD, statistic="Sum", label="5XXError"),
                    ],
                ),
                graph(
                    "Operator API latency (ms)",
                    [api.metric_latency(period=PERIOD, statistic=s, label=s) for s in ("p50", "p95")],
                ),
            ]
        dashboard.add_widgets(*health)
        dashboard.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24))
        if bridge_alarms:
            dashboard.add_widgets(cw.TextWidget(markdown="## Slurm bridges", width=24, height=1))
            for shown, alarms in bridge_alarms.items():  # one row each: its alarms' metrics and states
                where = "any cluster" if shown is None else shown
                dashboard.add_widgets(
                    *(
                        cw.AlarmWidget(title=f"{title} — {where}", alarm=alarm, width=BRIDGE_WIDTH, height=6)
                        for title, alarm in alarms
                    )
                )
        if config.clusters != "all":
            for cluster in config.clusters:
                dashboard.add_widgets(
                    cw.TextWidget(markdown=f"## Cluster `{cluster}`", width=24, height=1),
                )
                dashboard.add_widgets(*self._node_widgets(cluster))
        self.dashboard = dashboard

    def _bridge_silent_alarm(self, cluster: str, action: cw.IAlarmAction) -> cw.Alarm:
        """No occupancy report from ``cluster``'s Slurm bridge in ``BRIDGE_SILENT_PERIODS`` periods (module doc)."""
        reports = controller_metric(BRIDGE_REPORTS_METRIC, cluster=cluster, label="occupancy reports")
        alarm = cw.Alarm(
            self,
            f"SlurmBridgeSilent-{cluster}",  # the name as it is: a capitalized id could collide (a-b, a--b)
            alarm_name=alarm_name(self, f"slurm-bridge-silent-{cluster}"),
            alarm_description=described(
                f"The Slurm bridge of cluster {cluster} pulled no state and sent no occupancy report for "
                f"{BRIDGE_SILENT_PERIODS * int(PERIOD.to_minutes())} minutes (it reports every sync, 60 s). Nodes "
                "stay drained or take jobs before their check until it is back: look at `journalctl -u "
                "hpdhc-slurm-bridge` on the cluster's Slurm controller node (a 403 means its role is not the one "
                "named for the cluster in hyperpod-dhc:slurm-bridges, or lacks SlurmBridgePolicy).",
                "slurm-bridge-silent",
            ),
            metric=reports,
            threshold=1,
            comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=BRIDGE_SILENT_PERIODS,
            datapoints_to_alarm=BRIDGE_SILENT_PERIODS,
            treat_missing_data=cw.TreatMissingData.BREACHING,  # silence is what this alarm is about
        )
        alarm.add_alarm_action(action)
        return alarm

    def _bridge_status_alarms(self, cluster: str | None, action: cw.IAlarmAction) -> list[tuple[str, cw.Alarm]]:
        """``BRIDGE_STATUS_ALARMS`` on ``cluster``'s metrics (None: the stack-wide ones): (title, alarm) each, and
        each in ``self.alarms`` by its name."""
        out = []
        for spec in BRIDGE_STATUS_ALARMS:
            what = spec.what if cluster is None else f"{spec.what}-{cluster}"
            where = (
                'a cluster (any bridge under "*" in hyperpod-dhc:slurm-bridges; the metric per cluster says which)'
                if cluster is None
                else f"cluster {cluster}"
            )
            alarm = cw.Alarm(
                self,
                what,  # the name as it is: a capitalized id could collide (a-b, a--b)
                alarm_name=alarm_name(self, what),
                alarm_description=described(spec.says.format(where=where), spec.what),
                metric=controller_metric(spec.metric, cluster=cluster, statistic="Maximum", label=spec.metric),
                threshold=spec.threshold,
                comparison_operator=spec.comparison,
                evaluation_periods=1,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,  # a silent bridge: the silent alarm's
            )
            alarm.add_alarm_action(action)
            self.alarms[what] = alarm
            out.append((spec.title, alarm))
        return out

    def _bridge_silence_alarm(self, action: cw.IAlarmAction) -> cw.Alarm:
        """Stack-wide, for a ``"*"`` entry: Reconcile saw a fence holder silent for ``SILENT_S`` (module doc)."""
        alarm = cw.Alarm(
            self,
            "SlurmBridgeSilentAnyCluster",
            alarm_name=alarm_name(self, "slurm-bridge-silent"),
            alarm_description=described(
                f"The Slurm bridge holding the fence of a cluster has not pulled for {SILENT_S // 60} minutes "
                f'(metric {SILENT_METRIC} per cluster says which; a bridge under "*" in hyperpod-dhc:slurm-bridges '
                "has no per-cluster alarm). Nodes stay drained or take jobs before their check until it is back: "
                f"look at {_JOURNAL}. A bridge stopped on purpose keeps it in alarm until another pulls for the "
                "cluster (taking the fence) or the cluster is deleted.",
                "slurm-bridge-silent",
            ),
            metric=controller_metric(SILENT_METRIC, statistic="Maximum", label=SILENT_METRIC),
            threshold=1,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,  # Reconcile emits it every run
        )
        alarm.add_alarm_action(action)
        return alarm

    @staticmethod
    def _node_widgets(cluster: str | None) -> list[cw.IWidget]:
        """One row: nodes checked, verdicts, ready-to-verdict time, recovery (and, per cluster, quarantines)."""
        suffix = f" — {cluster}" if cluster is not None else ""
        recovery = [controller_metric(name, cluster=cluster) for name in RECOVERY_METRICS]
        if cluster is not None:  # the stack-wide row has a quarantines widget of its own
            recovery.append(controller_metric("NodesQuarantined", cluster=cluster))
        return [
            graph(f"Nodes checked{suffix}", [controller_metric("NodesChecked", cluster=cluster)], width=6),
            graph(
                f"Verdicts{suffix}",
                [
                    *(controller_metric(f"Verdict_{v}", cluster=cluster, label=v) for v in VERDICTS),
                    # A pass taken back when a failure line arrived after it (late CloudWatch ingestion).
                    controller_metric("VerdictsReversed", cluster=cluster, label="reversed"),
                ],
                stacked=True,
                width=6,
            ),
            graph(
                f"Time from ready to verdict (s){suffix}",
                [
                    controller_metric("ReadyToVerdictSeconds", cluster=cluster, statistic=s, label=s)
                    for s in ("p50", "p95")
                ],
                width=6,
            ),
            graph(f"Recovery actions{suffix}", recovery, width=6),
        ]

    @staticmethod
    def _rounds_widget(state_machine: sfn.StateMachine) -> cw.GraphWidget:
        started = state_machine.metric_started(period=PERIOD, statistic="Sum", label="ExecutionsStarted")
        succeeded = state_machine.metric_succeeded(period=PERIOD, statistic="Sum", label="ExecutionsSucceeded")
        failed = state_machine.metric_failed(period=PERIOD, statistic="Sum", label="ExecutionsFailed")
        aborted = state_machine.metric_aborted(period=PERIOD, statistic="Sum")
        timed_out = state_machine.metric_timed_out(period=PERIOD, statistic="Sum")
        # Step Functions publishes no per-machine count of running executions: started minus finished,
        # summed from the left edge of the graph, approximates it (rounds already running there are missed).
        in_progress = cw.MathExpression(
            expression="RUNNING_SUM(FILL(s, 0) - FILL(ok, 0) - FILL(f, 0) - FILL(a, 0) - FILL(t, 0))",
            using_metrics={"s": started, "ok": succeeded, "f": failed, "a": aborted, "t": timed_out},
            label="~ in progress (started - finished since the left edge of the graph)",
            period=PERIOD,
        )
        return cw.GraphWidget(
            title="Rounds",
            left=[started, succeeded, failed],
            right=[in_progress],
            width=WIDTH,
            height=6,
        )
