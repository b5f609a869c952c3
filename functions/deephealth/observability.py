"""The only Logger and Metrics of the controller (Powertools; JSON logs, EMF metrics).

No Powertools Tracer: importing aws_xray_sdk costs ~370 ms of cold start, and Lambda's active tracing
already records each invocation.
"""

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger()
metrics = Metrics()

__all__ = ["MetricUnit", "logger", "metrics"]
