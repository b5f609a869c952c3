"""Composition root: builds the Controller from a Lambda's settings (adapters are created lazily)."""

from __future__ import annotations

from deephealth.adapters import clock
from deephealth.adapters.config_store import load_config
from deephealth.adapters.hyperpod import HyperPod
from deephealth.adapters.node_table import NodeTable
from deephealth.adapters.notifications import Notifier
from deephealth.adapters.round_starter import RoundStarter
from deephealth.controller import Controller


def build_controller(settings) -> Controller:
    table = NodeTable(settings.TABLE_NAME)
    arn = getattr(settings, "ROUND_STATE_MACHINE_ARN", None)
    return Controller(
        table=table,
        hyperpod=HyperPod(),
        config=lambda: load_config(settings.CONFIG_PARAMETER_NAME),
        clock=lambda: clock.now(),  # looked up per call so the twin can run on virtual time
        starter=RoundStarter(table, arn) if arn else None,
        notifier=Notifier(settings.NOTIFICATIONS_TOPIC_ARN),
    )
