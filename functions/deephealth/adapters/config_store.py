"""The controller configuration, read from its SSM parameter (cached, so a policy change applies within
a minute without a redeploy)."""

from __future__ import annotations

from deephealth.domain.policy import ControllerConfig, parse_config

CACHE_S = 60


def load_config(parameter_name: str) -> ControllerConfig:
    # Imported on first use: Powertools' parameters utility imports boto3 (~300 ms of cold start).
    from aws_lambda_powertools.utilities import parameters

    return parse_config(parameters.get_parameter(parameter_name, transform="json", max_age=CACHE_S))
