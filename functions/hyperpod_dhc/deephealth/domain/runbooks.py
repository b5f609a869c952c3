"""Where each alert's runbook is: a section of docs/RUNBOOKS.md, linked from every notification and every alarm.

The one place the repository's URL is written: a fork or a mirror changes ``REPOSITORY`` and nothing else.
A section's anchor is GitHub's slug of its heading, ``### Notification: <kind>`` or ``### Alarm: <alarm>``
(``<alarm>`` without its per-cluster or per-queue suffix); tests/docs/test_runbooks.py holds every link to a
heading.
"""

from __future__ import annotations

REPOSITORY = "https://github.com/hyperpod-dhc/hyperpod-dhc"
RUNBOOKS_URL = f"{REPOSITORY}/blob/main/docs/RUNBOOKS.md"


def notification_runbook(kind: str) -> str:
    """The runbook section of a notification kind (``hyperpod_dhc.deephealth.domain.policy.NotificationKind``)."""
    return f"{RUNBOOKS_URL}#notification-{kind}"


def alarm_runbook(alarm: str) -> str:
    """The runbook section of an alarm, named as ``hyperpod_dhc.infra.notifications.alarm_name`` names it, stack name
    and per-cluster or per-queue suffix left out (``slurm-bridge-silent``, ``dlq``)."""
    return f"{RUNBOOKS_URL}#alarm-{alarm}"
