"""Shared test setup: fake AWS credentials and region, Powertools test settings, event fixtures."""

import json
import os
from pathlib import Path

import pytest

EVENTS = Path(__file__).parent / "events"

os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_SECURITY_TOKEN="testing",
    AWS_SESSION_TOKEN="testing",
    AWS_DEFAULT_REGION="us-east-1",
    AWS_REGION="us-east-1",
    POWERTOOLS_SERVICE_NAME="hyperpod-dhc",
    POWERTOOLS_METRICS_NAMESPACE="HyperPodDHC",
    POWERTOOLS_LOG_LEVEL="WARNING",
    JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
)


def load_event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def event():
    return load_event
