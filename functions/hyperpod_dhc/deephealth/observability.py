"""The only Logger and Metrics of the controller (Powertools; JSON logs, EMF metrics).

No Powertools Tracer: importing aws_xray_sdk costs ~370 ms of cold start, and Lambda's active tracing
already records each invocation.
"""

import os

from aws_lambda_powertools import Logger, Metrics, single_metric
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger()
metrics = Metrics()


def node_metric(name: str, cluster: str, value: float = 1, unit: MetricUnit = MetricUnit.Count) -> None:
    """A node metric, stack-wide (`service`) and per cluster (`service`, `cluster`) for the dashboard's rows."""
    metrics.add_metric(name=name, unit=unit, value=value)
    service = os.environ.get("POWERTOOLS_SERVICE_NAME", "hyperpod-dhc")
    with single_metric(name=name, unit=unit, value=value, default_dimensions={"service": service, "cluster": cluster}):
        pass


def bridge_reported(cluster: str) -> None:
    """One state pull or occupancy report accepted from ``cluster``'s Slurm bridge: metric ``SlurmBridgeReports`` per
    cluster (``service``, ``cluster``), which the stack alarms on when a bridge named for the cluster goes silent."""
    service = os.environ.get("POWERTOOLS_SERVICE_NAME", "hyperpod-dhc")
    dimensions = {"service": service, "cluster": cluster}
    with single_metric(name="SlurmBridgeReports", unit=MetricUnit.Count, value=1, default_dimensions=dimensions):
        pass


def bridge_metric(name: str, cluster: str, value: float, unit: MetricUnit = MetricUnit.Count) -> None:
    """How ``cluster``'s Slurm bridge is doing (``SlurmctldUnreachable``, ``SlurmBridgeUpdatesRefused``,
    ``SlurmBridgeBehindSeconds``, ``SlurmBridgeErrors``, ``SlurmBridgeSilent``), flushed at once: per cluster
    (``service``, ``cluster``) for the alarms of a cluster named in ``hyperpod-dhc:slurm-bridges``, and stack-wide
    (``service``) for those of a ``"*"`` entry, which cannot name its clusters."""
    service = os.environ.get("POWERTOOLS_SERVICE_NAME", "hyperpod-dhc")
    for dimensions in ({"service": service, "cluster": cluster}, {"service": service}):
        with single_metric(name=name, unit=unit, value=value, default_dimensions=dimensions):
            pass


__all__ = ["MetricUnit", "bridge_metric", "bridge_reported", "logger", "metrics", "node_metric"]
