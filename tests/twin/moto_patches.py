"""The two small adapters that let moto's Step Functions interpreter run our real workflow.

(a) Lambda: moto's docker-free backend only echoes the payload, so `invoke` is replaced by a call of the
    handler named in the function's `Handler`, imported from `functions/` with the function's environment.
    Exceptions come back Lambda-shaped (`Unhandled`, `errorType` = class name) so ASL Retry/Catch match on
    our exception names exactly as in AWS.
(b) Time: Wait states and Retry back-off call `on_wait(seconds)` instead of sleeping, so the simulation
    advances a virtual clock; botocore's own retry back-off (throttling, 5xx) returns at once and is
    recorded, since a handler must not move time while it runs.

Both reach into moto internals; `tests/integration/test_moto_patches.py` fails loudly when they move.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import botocore.endpoint
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function
from moto.stepfunctions.parser.utils import TMP_THREADS

BOTOCORE_BACK_OFFS: list[float] = []  # seconds botocore would have slept before a retry
_ENV_LOCK = threading.Lock()  # os.environ is process-wide; invocations from several executions serialise here


class LambdaContext:
    """The attributes Powertools reads from a Lambda context."""

    def __init__(self, fn: Any) -> None:
        self.function_name = fn.function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = fn.function_arn
        self.memory_limit_in_mb = int(getattr(fn, "memory_size", 128) or 128)
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{fn.function_name}"
        self.log_stream_name = "inproc"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


def _handler(fn: Any) -> Callable[[dict, Any], Any]:
    module_name, func = fn.handler.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), func)


def _invoke(
    self: LambdaSimpleBackend, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any
) -> bytes:
    fn = self.get_function(function_name, qualifier)
    event = json.loads(body) if body else {}
    with _ENV_LOCK, mock.patch.dict(os.environ, fn.environment_vars or {}):
        try:
            result = _handler(fn)(event, LambdaContext(fn))
        except Exception as err:  # Lambda reports any handler exception as an Unhandled function error
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorMessage": str(err), "errorType": type(err).__name__, "stackTrace": []}).encode()
    return json.dumps(result).encode()


def interpreter_threads() -> list[threading.Thread]:
    """The threads moto's ASL interpreter started (executions and their tasks) that are still alive."""
    return [t for t in TMP_THREADS if t.is_alive()]


@contextlib.contextmanager
def patched(on_wait: Callable[[float], None], on_retry: Callable[[float], None] | None = None) -> Iterator[None]:
    """Run Lambda tasks in-process; Wait states call `on_wait(seconds)`, Retry back-off `on_retry(seconds)`."""
    on_retry = on_retry or on_wait

    def wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
        on_wait(float(wait_seconds))

    with (
        mock.patch.object(botocore.endpoint, "time", types.SimpleNamespace(sleep=BOTOCORE_BACK_OFFS.append)),
        mock.patch.object(LambdaSimpleBackend, "invoke", _invoke),
        mock.patch.object(wait_function.WaitFunction, "_wait_interval", wait_interval),
        mock.patch.object(retrier_decl, "time", types.SimpleNamespace(sleep=lambda s: on_retry(float(s)))),
    ):
        yield
