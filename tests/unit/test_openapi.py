import os
from pathlib import Path
from unittest import mock

REPO_ROOT = Path(__file__).resolve().parents[2]

ENV = {
    "TABLE_NAME": "-",
    "CONFIG_PARAMETER_NAME": "-",
    "ROUND_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:-",
}


def test_committed_openapi_document_matches_the_routes():
    with mock.patch.dict(os.environ, ENV):
        from hyperpod_dhc.deephealth.handlers.api import openapi_json

        generated = openapi_json()
    assert (REPO_ROOT / "infra" / "hyperpod_dhc" / "infra" / "openapi.json").read_text() == generated, (
        "run `make openapi`"
    )
