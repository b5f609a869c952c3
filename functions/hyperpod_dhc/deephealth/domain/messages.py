"""How a notification reads: one SNS message per protocol (published with ``MessageStructure=json``); its words
(first line, evidence, commands) are `domain.message_words`.

- ``email``: plain text. The first line says what happened, to which node (host name and
  instance id) and where (``cluster/group``); then the evidence, quoted (``> ``); then the ``hpdhc`` command to
  look further (``hpdhc history <cluster> <node>`` for a node: there is no web console); then the link to the
  kind's runbook (docs/RUNBOOKS.md, ``hyperpod_dhc.deephealth.domain.runbooks``); then the machine-readable JSON.
- ``https``: an AWS Chatbot (Amazon Q Developer in chat applications) custom notification, the only payload
  Chatbot posts to Slack or Teams (``version`` 1.0, ``source`` custom, ``content`` in client markdown,
  ``metadata``). A generic HTTPS webhook receives the same JSON as the ``Message`` of the SNS envelope: the
  machine-readable fields are in ``metadata.additionalContext`` (string values, as the schema requires: ``kind``,
  ``cluster``, ``group``, ``runbook``, ``node`` and ``instance_id`` when there is one, and ``detail``, the JSON text
  of the detail); the description ends with the commands and the runbook link.
- ``default``: the machine-readable JSON, as it was published before (kind, cluster, group, runbook and the
  detail): every protocol without a key of its own gets it (SQS, Lambda, HTTP, Firehose, email-json), so queue,
  function and stream subscribers read what they always read, and it is the one full copy the 256 KiB hold.

Rendering never raises on a detail of an unexpected shape: a kind (or shape) it cannot summarise gets a generic
first line that quotes the kind. Limits: SNS takes a message of at most 256 KiB and a subject of at most 100
characters; Chatbot a title of 250, a description of 8,000 and a keyword of 75 characters.
What is longer is cut with an ellipsis; a detail too large for SNS has its long lists cut (``truncated`` names
them, with their full length).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hyperpod_dhc.deephealth.domain.message_words import (
    DESCRIPTION_MAX,
    NODE_KINDS,
    SHOWN_ITEMS,
    SUBJECT_MAX,
    Line,
    body,
    clip,
    commands,
    summary,
)
from hyperpod_dhc.deephealth.domain.runbooks import notification_runbook

TITLE_MAX = 250
KEYWORD_MAX = 75
CONTEXT_DETAIL_MAX = 4000  # characters of the detail's JSON text in additionalContext, before lists are cut
PUBLISH_MAX_BYTES = 256 * 1024
# The message's share of SNS's 256 KiB: the subject and the message attributes count too.
MESSAGE_BUDGET_BYTES = PUBLISH_MAX_BYTES - 4 * 1024


@dataclass(frozen=True)
class Rendered:
    subject: str
    message: str  # the MessageStructure=json document: protocol -> message text


def _cut(text: str, limit: int) -> str:
    """``text`` (line breaks kept) cut to ``limit`` characters with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain_text(first: str, lines: list[Line], cmds: list[str], runbook: str, machine: str) -> str:
    text = [first, *(f"> {line.text}" if line.quoted else line.text for line in lines), *cmds, f"Runbook: {runbook}"]
    return "\n".join(text) + "\n\n" + machine


def chatbot(
    kind: str, cluster: str, group: str, first: str, lines: list[Line], cmds: list[str], detail: Mapping[str, Any]
) -> dict[str, Any]:
    """The AWS Chatbot custom notification (schema version 1.0)."""
    # The commands are in the description (a nextSteps list would repeat them) and always fit: the lines above
    # them stop, whole, where the description would run over.
    runbook = notification_runbook(kind)
    tail = "\n".join([*(f"`{cmd}`" for cmd in cmds), f"Runbook: {runbook}"])
    room = DESCRIPTION_MAX - len(tail) - 2
    parts: list[str] = []
    for line in lines:
        # Verbatim lines in a code block: nothing in a log line is taken for markdown or a mention.
        text = "```" + line.text.replace("```", "'''") + "```" if line.quoted else line.text
        if sum(len(p) + 1 for p in parts) + len(text) > room:
            parts.append("…")
            break
        parts.append(text)
    parts.append(tail)
    context = {"kind": kind, "cluster": cluster, "group": group, "runbook": runbook}
    for key in ("node", "instance_id"):
        if isinstance(detail.get(key), str) and detail[key]:
            context[key] = detail[key]
    context["detail"] = _json(detail, CONTEXT_DETAIL_MAX)
    metadata: dict[str, Any] = {"summary": clip(first, TITLE_MAX), "eventType": kind, "additionalContext": context}
    if (thread := _thread(kind, cluster, group, detail)) is not None:
        metadata["threadId"] = thread
    if isinstance(detail.get("instance_id"), str) and detail["instance_id"]:
        metadata["relatedResources"] = [detail["instance_id"]]
    return {
        "version": "1.0",
        "source": "custom",
        "content": {
            "textType": "client-markdown",
            "title": clip(first, TITLE_MAX),
            "description": _cut("\n".join(p for p in parts if p) or first, DESCRIPTION_MAX),
            "keywords": [clip(k, KEYWORD_MAX) for k in (kind, cluster, group) if k],
        },
        "metadata": metadata,
    }


def _thread(kind: str, cluster: str, group: str, detail: Mapping[str, Any]) -> str | None:
    """One chat thread per node (its failure, quarantine and recovery), per breaker and per capacity hold."""
    node = detail.get("node")
    if kind in NODE_KINDS and isinstance(node, str) and node:
        return f"hyperpod-dhc/{cluster}/{node}"
    if kind == "breaker-tripped" or (kind == "breaker-reset" and detail.get("scope") == "breaker"):
        return f"hyperpod-dhc/{cluster}/breaker"
    if kind == "capacity-hold" or kind == "breaker-reset":
        return f"hyperpod-dhc/{cluster}/{group}/capacity-hold"
    return None


def _json(value: Mapping[str, Any], limit: int | None = None) -> str:
    text = json.dumps(value, default=str)
    if limit is None or len(text) <= limit:
        return text
    for items in (SHOWN_ITEMS, 1, 0):
        text = json.dumps(shrunk(value, items), default=str)
        if len(text) <= limit:
            return text
    return json.dumps({"truncated": True})


def shrunk(detail: Mapping[str, Any], items: int, chars: int = 1000) -> dict[str, Any]:
    """``detail`` with every list and map cut to ``items`` entries and every string to ``chars`` characters;
    ``truncated`` maps each cut key to its full length."""
    before = detail.get("truncated")
    cut: dict[str, Any] = dict(before) if isinstance(before, dict) else {}  # cut already: the full lengths stay
    out: dict[str, Any] = {}
    for key, value in detail.items():
        if key == "truncated" and isinstance(value, dict):
            continue
        if isinstance(value, list | tuple) and len(value) > items:
            out[key], cut[key] = list(value)[:items], cut.get(key, len(value))
        elif isinstance(value, dict) and len(value) > items:
            out[key], cut[key] = dict(list(value.items())[:items]), cut.get(key, len(value))
        elif isinstance(value, str) and len(value) > chars:
            out[key], cut[key] = _cut(value, chars), cut.get(key, len(value))
        else:
            out[key] = value
    if cut:
        out["truncated"] = cut
    return out


def render(kind: str, cluster: str, group: str, subject: str, detail: Mapping[str, Any]) -> Rendered:
    """The subject and the MessageStructure=json document of one notification, within SNS's limits."""
    runbook = notification_runbook(kind)
    machine = {"kind": kind, "cluster": cluster, "group": group, "runbook": runbook, **detail}
    first = summary(kind, cluster, group, subject, detail)
    lines, cmds = body(kind, detail), commands(kind, cluster, group, detail)
    # People read the first SHOWN_ITEMS of a list (the text says how many more); machines get it all, cut only when
    # the one machine copy would not fit.
    for_people = shrunk(machine, SHOWN_ITEMS)
    email = plain_text(first, lines, cmds, runbook, json.dumps(for_people, default=str, indent=2))
    https = json.dumps(chatbot(kind, cluster, group, first, lines, cmds, for_people), default=str)
    message = ""
    for items in (None, 100, SHOWN_ITEMS, 0):
        shown = machine if items is None else shrunk(machine, items)
        message = json.dumps({"default": _json(shown), "email": email, "https": https})
        if len(message.encode()) <= MESSAGE_BUDGET_BYTES:
            break
    return Rendered(subject=clip(subject, SUBJECT_MAX) or clip(first, SUBJECT_MAX), message=message)
