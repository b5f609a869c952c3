"""Fails loudly when moto's internals that `tests/harness/moto_patches.py` replaces move or change shape."""

import inspect

import pytest
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

from tests.fakes.hyperpod import GroupSpec


def test_lambda_simple_backend_invoke_signature():
    params = list(inspect.signature(LambdaSimpleBackend.invoke).parameters)
    assert params == ["self", "function_name", "qualifier", "body", "headers", "response_headers"]


def test_wait_function_sleeps_through_wait_interval():
    params = list(inspect.signature(wait_function.WaitFunction._wait_interval).parameters)
    assert params == ["self", "env", "wait_seconds"]


def test_interpreter_threads_are_tracked():
    from moto.stepfunctions.parser.backend import execution_worker

    assert "TMP_THREADS.append" in inspect.getsource(execution_worker.ExecutionWorker.start)


def test_botocore_sleeps_through_its_endpoint_module_time():
    import botocore.endpoint

    assert "time.sleep(handler_response)" in inspect.getsource(botocore.endpoint.Endpoint._needs_retry)


def test_botocore_stubber_answers_every_request_through_its_call():
    from botocore.handlers import BUILTIN_HANDLERS
    from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse
    from moto.core.models import botocore_stubber

    assert list(inspect.signature(BotocoreStubber.__call__).parameters) == ["self", "event_name", "request", "kwargs"]
    assert ("before-send", botocore_stubber) in BUILTIN_HANDLERS, "moto answers requests as a before-send handler"
    assert isinstance(botocore_stubber, BotocoreStubber) and hasattr(botocore_stubber, "enabled")
    assert list(MockRawResponse(b"body").stream()) == [b"body"]


def test_retrier_sleeps_through_its_module_time():
    assert "time.sleep(" in inspect.getsource(retrier_decl)


@pytest.mark.controller_config({"clusters": ["demo"], "defaults": {"gather_window_s": 0}})
def test_a_retry_back_off_advances_virtual_time_instead_of_sleeping(harness, fake):
    fake.create_cluster("demo", [GroupSpec("workers", count=2)])
    fake.inject_error("StartClusterHealthCheck", "ThrottlingException", times=4)  # beyond botocore's retries
    harness.reconcile()
    harness.wait_for_executions()
    (execution,) = harness.executions()
    assert execution["status"] == "SUCCEEDED"
    assert harness.retry_back_offs, "the workflow's Retry ran on virtual time"
    errors = [e for e in harness.history(execution["executionArn"]) if e["type"] == "LambdaFunctionFailed"]
    assert errors and errors[0]["lambdaFunctionFailedEventDetails"]["error"] == "Throttled"
