"""boto3 clients, created lazily once per process (cold start pays only for the clients it uses).

boto3 and botocore are imported on first use, not at import: a handler module loads without them
(~300 ms of cold start), and the first client built pays for them. botocore's exception classes are
attributes of this module (``aws.ClientError``, ``aws.BotoCoreError``), loaded on first access, so an
``except (aws.ClientError, aws.BotoCoreError)`` clause imports nothing until an exception reaches it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from hyperpod_dhc.deephealth.domain.errors import Throttled, TransientError

# boto3 and botocore ship no type information, and boto3-stubs is not a dependency: to mypy they are untyped on
# purpose. Each of their modules is imported in one place below, so the rest of the controller sees clients,
# tables, conditions and botocore's exceptions as `Any` (the adapters hold them as `Any` deliberately).
if TYPE_CHECKING:
    from botocore.exceptions import BotoCoreError, ClientError

__all__ = ["BotoCoreError", "ClientError", "client", "reset", "table", "transient", "translated"]
_EXCEPTIONS = frozenset({"BotoCoreError", "ClientError"})

# Every service's name for "slow down" (botocore's standard-mode throttling list, DynamoDB's included).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "BandwidthLimitExceeded",
        "SlowDown",
        "EC2ThrottledException",
    }
)
SERVER_CODES = frozenset(
    {"InternalFailure", "InternalError", "InternalServerError", "InternalServerException", "ServiceUnavailable"}
)
P = ParamSpec("P")
R = TypeVar("R")


def _boto3() -> Any:
    import boto3

    return boto3


def _botocore_exceptions() -> Any:
    from botocore import exceptions

    return exceptions


def _botocore_config(**options: Any) -> Any:
    from botocore.config import Config

    return Config(**options)


def conditions() -> Any:
    """boto3's DynamoDB conditions module (``Key``, ``Attr``), imported on first use."""
    from boto3.dynamodb import conditions

    return conditions


@functools.cache
def _config() -> Any:
    # Standard retries with jitter for throttling and 5xx; anything left over surfaces as Throttled /
    # TransientError and the workflow's Retry takes over with longer back-off.
    return _botocore_config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30)


@functools.cache
def client(service: str) -> Any:
    return _boto3().client(service, config=_config())


@functools.cache
def table(name: str) -> Any:
    return _boto3().resource("dynamodb", config=_config()).Table(name)


def client_without_retries(service: str) -> Any:
    """A client that sends each request once: for calls that are not idempotent (a reboot or replacement that
    HyperPod carried out but answered 5xx must not be sent again by botocore)."""
    return _single_shot(service)


@functools.cache
def _single_shot(service: str) -> Any:
    # total_max_attempts counts the first request (botocore's max_attempts counts only retries).
    single = _botocore_config(retries={"mode": "standard", "total_max_attempts": 1})
    return _boto3().client(service, config=_config().merge(single))


def transient(err: BaseException) -> Throttled | TransientError | None:
    """The workflow's name for an AWS error that a later attempt may not meet (what the ASL Retry matches):
    throttling -> Throttled, 5xx or a network failure -> TransientError; None for anything else."""
    exceptions = _botocore_exceptions()
    if isinstance(err, exceptions.ClientError):
        code = err.response.get("Error", {}).get("Code", "")
        message = err.response.get("Error", {}).get("Message", "")
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in THROTTLING_CODES:
            return Throttled(f"{code}: {message}")
        if code in SERVER_CODES or status >= 500:
            return TransientError(f"{code or status}: {message}")
        return None
    if isinstance(err, exceptions.ParamValidationError | exceptions.NoCredentialsError):
        return None  # a bug or a configuration error: retrying cannot help
    if isinstance(err, exceptions.BotoCoreError):
        return TransientError(f"{type(err).__name__}: {err}")
    return None


def translated(call: Callable[P, R]) -> Callable[P, R]:
    """Raise Throttled / TransientError for what `transient` maps (after botocore's own retries), so the ASL
    Retry of the round's steps and Lambda's async retries see them; every other error passes unchanged."""

    @functools.wraps(call)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        except (Throttled, TransientError):
            raise
        except Exception as err:
            mapped = transient(err)
            if mapped is None:
                raise
            _count(mapped)
            raise mapped from err

    return wrapper


def _count(err: Exception) -> None:
    if isinstance(err, Throttled):  # the dashboard's Throttled metric: what is left after botocore's retries
        from hyperpod_dhc.deephealth.observability import MetricUnit, metrics

        metrics.add_metric(name="Throttled", unit=MetricUnit.Count, value=1)


def reset() -> None:
    """Forget cached clients (tests switch mocks between cases)."""
    client.cache_clear()
    table.cache_clear()
    _single_shot.cache_clear()


def __getattr__(name: str) -> Any:
    """``ClientError`` and ``BotoCoreError`` from botocore.exceptions, imported on first access (PEP 562)."""
    if name in _EXCEPTIONS:
        value = globals()[name] = getattr(_botocore_exceptions(), name)  # later lookups do not come back here
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
