"""Composition root: builds a Lambda's use-case Context from its settings (adapters are created lazily)."""

from __future__ import annotations

from hyperpod_dhc.deephealth.adapters import clock
from hyperpod_dhc.deephealth.adapters.config_store import load_config
from hyperpod_dhc.deephealth.adapters.hyperpod import HyperPod
from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
from hyperpod_dhc.deephealth.adapters.notifications import Notifier
from hyperpod_dhc.deephealth.adapters.round_starter import RoundStarter
from hyperpod_dhc.deephealth.settings import _Settings
from hyperpod_dhc.deephealth.usecases.context import Context


def build_context(settings: _Settings) -> Context:
    table = NodeTable(settings.TABLE_NAME)
    # Only the settings of the Lambdas that start rounds have the state machine's ARN.
    arn: str | None = getattr(settings, "ROUND_STATE_MACHINE_ARN", None)
    return Context(
        table=table,
        hyperpod=HyperPod(),
        config=lambda: load_config(settings.CONFIG_PARAMETER_NAME),
        clock=lambda: clock.now(),  # looked up per call so the twin can run on virtual time
        starter=RoundStarter(table, arn) if arn else None,
        notifier=Notifier(settings.NOTIFICATIONS_TOPIC_ARN),
    )
