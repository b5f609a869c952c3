"""The controller configuration, read from its SSM parameter (cached, so a policy change applies within
a minute without a redeploy)."""

from __future__ import annotations

from hyperpod_dhc.deephealth.adapters import aws
from hyperpod_dhc.deephealth.domain.policy import ControllerConfig, parse_config

CACHE_S = 60


def load_config(parameter_name: str) -> ControllerConfig:
    # Imported on first use: Powertools' parameters utility imports boto3 (~300 ms of cold start).
    from aws_lambda_powertools.utilities import parameters

    try:
        raw = parameters.get_parameter(parameter_name, transform="json", max_age=CACHE_S)
    except parameters.exceptions.GetParameterError as err:
        # Powertools wraps the botocore error (as the exception's context): throttling and 5xx still have to
        # reach the workflow's Retry as Throttled / TransientError.
        wrapped = err.__cause__ or err.__context__
        mapped = aws.transient(wrapped) if wrapped is not None else None
        if mapped is not None:
            raise mapped from err
        raise
    return parse_config(raw)
