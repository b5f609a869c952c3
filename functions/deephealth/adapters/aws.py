"""boto3 clients, created lazily once per process (cold start pays only for the clients it uses)."""

from __future__ import annotations

import functools
from typing import Any

import boto3
from botocore.config import Config

# Standard retries with jitter for throttling and 5xx; anything left over surfaces as Throttled /
# TransientError and the workflow's Retry takes over with longer back-off.
_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=30)


@functools.cache
def client(service: str) -> Any:
    return boto3.client(service, config=_CONFIG)


@functools.cache
def table(name: str) -> Any:
    return boto3.resource("dynamodb", config=_CONFIG).Table(name)


def reset() -> None:
    """Forget cached clients (tests switch mocks between cases)."""
    client.cache_clear()
    table.cache_clear()
