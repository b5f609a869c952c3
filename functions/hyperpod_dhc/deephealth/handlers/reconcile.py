"""Reconcile: scheduled level-triggered pass, so a lost event never loses a node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hyperpod_dhc.deephealth import settings
from hyperpod_dhc.deephealth.observability import logger, metrics
from hyperpod_dhc.deephealth.usecases.reconcile import reconcile
from hyperpod_dhc.deephealth.wiring import build_context

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

SETTINGS = settings.load(settings.ReconcileSettings)
CONTEXT = build_context(SETTINGS)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, dict[str, str]]:
    results = reconcile(CONTEXT)
    logger.info("reconciled", extra={"clusters": results})
    return {"clusters": results}
