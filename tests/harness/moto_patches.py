"""The small adapters that let moto's Step Functions interpreter run our real workflow, and inject faults.

(a) Lambda: moto's docker-free backend only echoes the payload, so `invoke` is replaced by a call of the
    handler named in the function's `Handler`, imported from `functions/` with the function's environment.
    Exceptions come back Lambda-shaped (`Unhandled`, `errorType` = class name) so ASL Retry/Catch match on
    our exception names exactly as in AWS.
(b) Time: Wait states and Retry back-off call `on_wait(seconds)` instead of sleeping, so the simulation
    advances a virtual clock; botocore's own retry back-off (throttling, 5xx) returns at once and is
    recorded, since a handler must not move time while it runs. Retry's FULL jitter draws from a seeded
    stream instead of the unseeded global `random`, so a fixed-seed run backs off the same every time.
(c) API faults: moto's botocore stubber (the `before-send` handler that answers every botocore request) is
    wrapped, so a fault injector may answer a request made *inside a Lambda invocation* with an error
    response before moto sees it. The harness's own reads (outside any invocation) are never faulted.
(d) IAM: the same wrap lets `tests/harness/iam.py` answer a request AWS would refuse with AccessDenied; the ASL
    interpreter's Lambda task invocations are marked as the state machine's (`iam.invoked_by("states")`).
(e) CloudWatch Logs filter patterns: moto matches only a plain term and lets anything else through; FilterLogEvents
    here honours a regular expression between % (what the controller's scan for late failures sends) and `?term`
    alternatives, as CloudWatch documents them, so a scan returns what AWS would return. It also keeps to the
    streams `logStreamNamePrefix` starts and answers an empty `searchedLogStreams`, as AWS does, and reads each
    stream from the query's `startTime` on, not every event of the group a page: `tests/harness/moto_logs.py`.
(f) Speed only: every botocore session shares one loader, so each service model is parsed once a process, not once
    a session (moto gives each mock its own default session and Powertools makes a session per provider: the
    SageMaker model alone took a tenth of an integration test), and the interpreter's Lambda tasks share one client
    a harness instead of building one a task; moto finds a response class's methods once, not once a request, and
    its SNS signs with one key a process, not one a subscription; its SQS reads a queue's retention period alone,
    not every attribute of the queue once per message received (draining the notifications queue was quadratic in
    the notifications). Python's cycle collector runs less often
    (`GC_THRESHOLDS`): a twin run's heap is moto's backends and botocore's models, collected over and over for a
    fourteenth of a fidelity variant. moto's DynamoDB Query and JSON serializer at fleet scale:
    `tests/harness/moto_dynamodb.py`; the request path (no signature, a URL's handler found once, the werkzeug
    request of a JSON call built directly, no regular expression over a JSON answer): `tests/harness/moto_requests.py`;
    the interpreter's definitions and JSONPaths parsed once: `tests/harness/moto_stepfunctions.py`.

They reach into moto's and botocore's internals; `tests/integration/test_moto_patches.py` fails loudly when they move.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import json
import os
import random
import re
import threading
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import botocore.endpoint
import botocore.loaders
import botocore.session
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.core import responses as moto_responses
from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse
from moto.core.utils import unix_time
from moto.logs import models as logs_models
from moto.sns.models import Subscription
from moto.sqs.models import Message, SQSBackend
from moto.stepfunctions.parser.asl.component.common.retry import jitter_strategy_decl, retrier_decl
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function
from moto.stepfunctions.parser.utils import TMP_THREADS

from tests.harness import moto_dynamodb, moto_logs, moto_requests, moto_stepfunctions

BOTOCORE_BACK_OFFS: list[float] = []  # seconds botocore would have slept before a retry
JITTER_SEED = 0  # ASL Retry's JitterStrategy FULL draws from random.Random(JITTER_SEED), anew per `patched`
_ENV_LOCK = threading.Lock()  # os.environ is process-wide; invocations from several executions serialise here
_INVOCATION = threading.local()  # a handler runs on the thread that invoked it: `function` is set meanwhile

Handler = Callable[[dict, Any], Any]
# Wraps one invocation: (function name, handler) -> the handler to run instead (e.g. one that crashes).
InvocationWrapper = Callable[[str, Handler], Handler]
# Answers a request instead of moto: (botocore event name, request) -> (status, headers, body), or None to pass.
RequestFault = Callable[[str, AWSPreparedRequest], tuple[int, dict[str, str], str] | None]


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


def _handler(fn: Any) -> Handler:
    module_name, func = fn.handler.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), func)


def current_function() -> str | None:
    """FunctionName of the Lambda invocation running on this thread; None outside any invocation."""
    return getattr(_INVOCATION, "function", None)


@contextlib.contextmanager
def invocation(function_name: str) -> Iterator[None]:
    """This thread runs `function_name`'s handler meanwhile (what `current_function` reports)."""
    _INVOCATION.function = function_name
    try:
        yield
    finally:
        _INVOCATION.function = None


def _invoke_with(
    wrap: InvocationWrapper | None, lock: contextlib.AbstractContextManager | None
) -> Callable[..., bytes]:
    def invoke(
        self: LambdaSimpleBackend,
        function_name: str,
        qualifier: str | None,
        body: Any,
        headers: Any,
        response_headers: Any,
    ) -> bytes:
        fn = self.get_function(function_name, qualifier)
        event = json.loads(body) if body else {}
        with (
            lock if lock is not None else contextlib.nullcontext(),
            _ENV_LOCK,
            mock.patch.dict(os.environ, fn.environment_vars or {}),
            invocation(fn.function_name),
        ):
            try:
                handler = _handler(fn)  # inside the try: an import (cold start) error is a function error too
                result = (wrap(fn.function_name, handler) if wrap else handler)(event, LambdaContext(fn))
            except Exception as err:  # Lambda reports any handler exception as an Unhandled function error
                response_headers["x-amz-function-error"] = "Unhandled"
                error = {"errorMessage": str(err), "errorType": type(err).__name__, "stackTrace": []}
                return json.dumps(error).encode()
        return json.dumps(result).encode()

    return invoke


def cold_start_lock() -> threading.Lock:
    """Held while a handler runs: take it to swap handler modules (a redeploy) between invocations."""
    return _ENV_LOCK


@contextlib.contextmanager
def faulted_requests(fault: RequestFault) -> Iterator[None]:
    """Let `fault` answer any botocore request made inside a Lambda invocation, before moto does."""
    original = BotocoreStubber.__call__

    def call(self: BotocoreStubber, event_name: str, request: AWSPreparedRequest, **kwargs: Any) -> Any:
        if self.enabled and current_function() is not None and (response := fault(event_name, request)):
            status, headers, body = response
            return AWSResponse(request.url, status, headers, MockRawResponse(body))  # as moto builds its own
        return original(self, event_name, request, **kwargs)

    with mock.patch.object(BotocoreStubber, "__call__", call):
        yield


@contextlib.contextmanager
def authorized_requests(check: RequestFault) -> Iterator[None]:
    """Let `check` answer any botocore request (inside a Lambda invocation or not) before moto does; the Lambda
    invocations of the state machine's Task states are made as the state machine (`iam.invoked_by`)."""
    from tests.harness import iam

    original = BotocoreStubber.__call__
    integration = lambda_eval_utils.execute_lambda_function_integration

    def call(self: BotocoreStubber, event_name: str, request: AWSPreparedRequest, **kwargs: Any) -> Any:
        if self.enabled and (response := check(event_name, request)):
            status, headers, body = response
            return AWSResponse(request.url, status, headers, MockRawResponse(body))
        return original(self, event_name, request, **kwargs)

    def task_invocation(*args: Any, **kwargs: Any) -> Any:
        with iam.invoked_by("states"):
            return integration(*args, **kwargs)

    with (
        mock.patch.object(BotocoreStubber, "__call__", call),
        mock.patch.object(lambda_eval_utils, "execute_lambda_function_integration", task_invocation),
    ):
        yield


def interpreter_threads() -> list[threading.Thread]:
    """The threads moto's ASL interpreter started (executions and their tasks) that are still alive."""
    return [t for t in TMP_THREADS if t.is_alive()]


class CloudWatchFilter:
    """A FilterLogEvents filter pattern as CloudWatch Logs matches unstructured events: "" everything; `%regex%` a
    regular expression found anywhere (CloudWatch's subset is Python's too); terms, each found as written (case
    sensitive), all of them, or any of the `?term` ones; a quoted term is one phrase."""

    def __init__(self, pattern: str | None) -> None:
        self.pattern = (pattern or "").strip()

    def matches(self, message: str) -> bool:
        return _filter_matches(self.pattern, message)


@functools.lru_cache(maxsize=1 << 16)
def _filter_matches(pattern: str, message: str) -> bool:
    """CloudWatchFilter.matches, kept per pattern and message: a day's scan meets the same lines on every look."""
    if not pattern:
        return True
    if len(pattern) > 1 and pattern.startswith("%") and pattern.endswith("%"):
        return re.search(pattern[1:-1], message) is not None
    terms = [t.strip('"') for t in re.findall(r'\??"[^"]*"|\S+', pattern)]
    any_of = [t[1:].strip('"') for t in terms if t.startswith("?")]
    all_of = [t for t in terms if not t.startswith("?")]
    return all(t in message for t in all_of) and (not any_of or any(t in message for t in any_of))


class _SearchPaths(list):
    """A loader's search paths, each taken once: every boto3 session appends its data path to the loader it gets,
    and one loader serves every session of the process."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


@functools.cache
def _shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    loader = botocore.loaders.create_loader(search_path_string)
    loader._search_paths = _SearchPaths(loader.search_paths)  # botocore's own list, deduplicated
    return loader


# Python's cycle collector runs every 700 allocations and a full one as the heap grows: a twin run's heap is moto's
# backends and botocore's models, which live as long as the run; collecting less often frees the same cycles.
GC_THRESHOLDS = (50_000, 20, 20)


@contextlib.contextmanager
def _collected_less_often() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


# moto's key of a subscription, made once a process (moto lru_caches it per subscription: one RSA key a harness).
_ONE_KEY = functools.cache(functools.partial(Subscription.private_key.__wrapped__, None))


def _signing_key(subscription: Subscription) -> Any:
    return _ONE_KEY()


def _retained(self: SQSBackend, queue_name: str, message: Message) -> bool:
    """moto's `is_message_valid_based_on_retention_period`, reading the queue's retention period alone: moto built
    every attribute of the queue three times (counting its messages each time) for each message a receive returned,
    so draining the harness's notifications queue took time quadratic in the notifications."""
    queue: Any = self.get_queue(queue_name)  # moto sets a queue's attributes by name
    sent_ms: Any = message.sent_timestamp  # set when the message is sent (moto types it optional)
    return bool(queue.message_retention_period + sent_ms / 1000 > unix_time())


def _one_client_a_service() -> Callable[..., Any]:
    """moto's `boto_client_for`, one client a (region, service): its credentials are moto's own placeholders."""
    build = lambda_eval_utils.boto_client_for

    @functools.cache
    def client(region: str, service: str) -> Any:
        return build(region=region, service=service)

    return lambda region, service, state_credentials=None: client(region, service)


@contextlib.contextmanager
def patched(
    on_wait: Callable[[float], None],
    on_retry: Callable[[float], None] | None = None,
    wrap: InvocationWrapper | None = None,
    lock: contextlib.AbstractContextManager | None = None,
) -> Iterator[None]:
    """Run Lambda tasks in-process (each handler through `wrap`, if given, and holding `lock`, if given, taken
    before the environment lock); Wait states call `on_wait(seconds)`, Retry back-off `on_retry(seconds)`."""
    on_retry = on_retry or on_wait

    def wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
        on_wait(float(wait_seconds))

    with (
        mock.patch.object(botocore.endpoint, "time", types.SimpleNamespace(sleep=BOTOCORE_BACK_OFFS.append)),
        mock.patch.object(LambdaSimpleBackend, "invoke", _invoke_with(wrap, lock)),
        mock.patch.object(wait_function.WaitFunction, "_wait_interval", wait_interval),
        mock.patch.object(retrier_decl, "time", types.SimpleNamespace(sleep=lambda s: on_retry(float(s)))),
        mock.patch.object(jitter_strategy_decl, "random", random.Random(JITTER_SEED)),
        mock.patch.object(logs_models, "EventMessageFilter", CloudWatchFilter),
        mock.patch.object(botocore.session, "create_loader", _shared_loader),
        mock.patch.object(lambda_eval_utils, "boto_client_for", _one_client_a_service()),
        # A response class's methods once a harness (install() has added the fake's operations by then).
        mock.patch.object(
            moto_responses, "method_names_from_class", functools.cache(moto_responses.method_names_from_class)
        ),
        mock.patch.object(Subscription, "private_key", _signing_key),
        mock.patch.object(SQSBackend, "is_message_valid_based_on_retention_period", _retained),
        _collected_less_often(),
        moto_requests.faster_requests(),
        moto_dynamodb.faster_queries(),
        moto_logs.faster_filters(),
        moto_stepfunctions.parsed_once(),
    ):
        yield
