"""Reconcile: scheduled level-triggered pass, so a lost event never loses a node."""

from deephealth import settings
from deephealth.observability import logger, metrics
from deephealth.wiring import build_controller

SETTINGS = settings.load(settings.ReconcileSettings)
CONTROLLER = build_controller(SETTINGS)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict, context: object) -> dict:
    results = CONTROLLER.reconcile()
    logger.info("reconciled", extra={"clusters": results})
    return {"clusters": results}
