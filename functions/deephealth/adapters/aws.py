"""boto3 clients, created lazily once per process (cold start pays only for the clients it uses).

boto3 and botocore are imported on first use, not at import: a handler module loads without them
(~300 ms of cold start), and the first client built pays for them. botocore's exception classes are
attributes of this module (``aws.ClientError``, ``aws.BotoCoreError``), loaded on first access, so an
``except (aws.ClientError, aws.BotoCoreError)`` clause imports nothing until an exception reaches it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.exceptions import BotoCoreError, ClientError

__all__ = ["BotoCoreError", "ClientError", "client", "reset", "table"]
_EXCEPTIONS = frozenset({"BotoCoreError", "ClientError"})


@functools.cache
def _config() -> Any:
    from botocore.config import Config

    # Standard retries with jitter for throttling and 5xx; anything left over surfaces as Throttled /
    # TransientError and the workflow's Retry takes over with longer back-off.
    return Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30)


@functools.cache
def client(service: str) -> Any:
    import boto3

    return boto3.client(service, config=_config())


@functools.cache
def table(name: str) -> Any:
    import boto3

    return boto3.resource("dynamodb", config=_config()).Table(name)


def reset() -> None:
    """Forget cached clients (tests switch mocks between cases)."""
    client.cache_clear()
    table.cache_clear()


def __getattr__(name: str) -> Any:
    """``ClientError`` and ``BotoCoreError`` from botocore.exceptions, imported on first access (PEP 562)."""
    if name in _EXCEPTIONS:
        from botocore import exceptions

        value = globals()[name] = getattr(exceptions, name)  # later lookups do not come back here
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
