"""Faults the twin injects into the controller's own calls: AWS API errors and Lambda crashes.

`ApiFaults` answers a request made inside a Lambda invocation with the error the service would send, in the
service's own protocol, before moto sees it; botocore then parses and retries it exactly as in AWS (its
back-off returns at once, see `moto_patches`), and whatever is left reaches the controller's error mapping.
JSON-protocol services (DynamoDB, Step Functions, CloudWatch Logs, SSM, SageMaker) get `{"__type", "message"}`
bodies; query-protocol services (SNS) get the `<ErrorResponse>` XML document. REST protocols (Lambda, API
Gateway) are never faulted: no handler calls them.

`CrashPlan` kills the next invocation(s) of one function after a number of successful node writes, the way
a timeout or an out-of-memory kill ends a step: what was written stays written, the rest never happens.
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSPreparedRequest

# What each protocol calls throttling (all are in botocore's standard-mode throttling list).
JSON_THROTTLING = "ThrottlingException"
DYNAMODB_THROTTLING = "ProvisionedThroughputExceededException"
QUERY_THROTTLING = "Throttling"


class SimulatedCrash(Exception):
    """A Lambda invocation that died mid-way (timeout, out of memory); ASL sees this error name."""


@dataclass
class ApiFaults:
    """Throttling or HTTP 500 on a fraction of the AWS calls the controller's Lambdas make."""

    throttle_rate: float
    server_error_rate: float
    rng: random.Random  # its own stream: a fault never shifts any other draw of the scenario
    counts: Counter[str] = field(default_factory=Counter)  # injected faults per service id

    @property
    def enabled(self) -> bool:
        return self.throttle_rate + self.server_error_rate > 0

    def __call__(self, event_name: str, request: AWSPreparedRequest) -> tuple[int, dict[str, str], str] | None:
        """(status, headers, body) of an injected error for this request, or None to let it through."""
        if not self.enabled:
            return None
        service = event_name.split(".")[1]  # before-send.<service id>.<operation>
        protocol = _protocol(request)
        if protocol is None:
            return None
        u = self.rng.random()
        if u < self.throttle_rate:
            status = 400
            code = {"json": DYNAMODB_THROTTLING if service == "dynamodb" else JSON_THROTTLING}.get(
                protocol, QUERY_THROTTLING
            )
            message = "Rate exceeded (simulated)"
        elif u < self.throttle_rate + self.server_error_rate:
            status, code, message = 500, "InternalServerError", "Internal error (simulated)"
        else:
            return None
        self.counts[service] += 1
        request_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        if protocol == "json":
            content_type = request.headers.get("Content-Type", "application/x-amz-json-1.0")
            headers = {"Content-Type": str(content_type), "x-amzn-RequestId": request_id}
            return status, headers, json.dumps({"__type": code, "message": message})
        fault = "Sender" if status < 500 else "Receiver"
        body = (
            '<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">'
            f"<Error><Type>{fault}</Type><Code>{code}</Code><Message>{message}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return status, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, body


def _protocol(request: AWSPreparedRequest) -> str | None:
    """ "json" (X-Amz-Target header), "query" (form-encoded Action=...) or None for REST protocols."""
    if request.headers.get("X-Amz-Target"):
        return "json"
    body = request.body or b""
    if isinstance(body, str):
        body = body.encode()
    content_type = str(request.headers.get("Content-Type", ""))
    if "x-www-form-urlencoded" in content_type and b"Action=" in bytes(body):
        return "query"
    return None


@dataclass
class CrashPlan:
    """The next `times` invocations of `function`, once armed, die after `after_writes` node writes.

    An invocation that ends before writing that much dies as it returns: its writes stand, its result is lost.
    A dead invocation writes nothing more, whatever its own error handling would have done.
    """

    function: str  # FunctionName, i.e. the construct id
    after_writes: int
    times: int
    armed: bool = False
    crashes: list[tuple[float, int]] = field(default_factory=list)  # (virtual time, node writes done) per crash
    _writes: int | None = None  # node writes of the doomed invocation running now; None when none runs
    _dead: bool = False

    def wrap(self, handler: Callable[[dict, Any], Any], now: Callable[[], float]) -> Callable[[dict, Any], Any]:
        if not self.armed or len(self.crashes) >= self.times:
            return handler

        def doomed(event: dict, context: Any) -> Any:
            self._writes, self._dead = 0, False
            try:
                handler(event, context)
            finally:
                writes, dead = self._writes or 0, self._dead
                self._writes, self._dead = None, False
                if dead:
                    raise SimulatedCrash(f"{self.function} died after {writes} node write(s) (simulated)")
            self.crashes.append((now(), writes))
            raise SimulatedCrash(f"{self.function} died after its {writes} write(s), before returning (simulated)")

        return doomed

    def before_write(self, now: float) -> None:
        """Called before each node write of `function`: raises once the doomed invocation used its budget."""
        if self._writes is None:
            return
        if not self._dead and self._writes >= self.after_writes:
            self._dead = True
            self.crashes.append((now, self._writes))
        if self._dead:
            raise SimulatedCrash(f"{self.function} died after {self.after_writes} node write(s) (simulated)")
        self._writes += 1
