"""The controller's desired Slurm state as the bridge reads it (`read_document`), keeps it between passes (`Memory`)
and asks whether it still holds (`still_holds`). Pure but for `Memory`'s file: every rule of what an answer may say
is here, so a node entry off the contract is left as it is and a document off it is never applied (`Malformed`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeGuard

from hpdhc.client import Json
from hpdhc.scontrol import OWNED_PREFIX

# The controller's vocabulary (deephealth.domain.slurm holds the same; tests/unit/test_slurm_contract.py checks).
FEATURE_KEY = "HealthCheck"
FEATURES = ("HealthCheck:InProgress", "HealthCheck:Passed", "HealthCheck:Failed", "HealthCheck:Skipped")

log = logging.getLogger("hpdhc.bridge")


@dataclass(frozen=True)
class Desired:
    """A node's desired Slurm state: drained with `reason` (owned), or not drained by us (`reason` None)."""

    reason: str | None
    feature: str  # one of FEATURES


@dataclass(frozen=True)
class Document:
    """The controller's desired state, as the bridge reads it. `complete`: every node HyperPod lists is recorded,
    so a Slurm node the document does not list is new. `generation` only grows with the controller's data.
    `keys` (name -> the record's key) and `pending` (names waiting for a check) say whose occupancy to report;
    `as_of` and `digest` let the next pass ask "changed since?" and get `unchanged` instead of every node."""

    wanted: dict[str, Desired | None]  # None: an entry off the contract, left as it is
    isolating_groups: frozenset[str]
    complete: bool
    generation: float
    interval_s: float | None = None
    keys: Mapping[str, str] = field(default_factory=dict)
    pending: frozenset[str] = frozenset()
    as_of: float | None = None
    digest: str | None = None

    def cursor(self) -> tuple[float, str] | None:
        """(as_of, digest) to ask the controller whether this document still holds; None: a whole one is asked."""
        return None if self.as_of is None or self.digest is None else (self.as_of, self.digest)

    def to_json(self) -> Json:
        return {
            "wanted": {n: None if d is None else [d.reason, d.feature] for n, d in sorted(self.wanted.items())},
            "isolating_groups": sorted(self.isolating_groups),
            "complete": self.complete,
            "generation": self.generation,
            "keys": dict(sorted(self.keys.items())),
            "pending": sorted(self.pending),
            "as_of": self.as_of,
            "digest": self.digest,
        }

    @classmethod
    def from_json(cls, data: Json) -> Document:
        wanted = {str(n): None if d is None else Desired(d[0], str(d[1])) for n, d in data["wanted"].items()}
        as_of, digest = data.get("as_of"), data.get("digest")
        return cls(
            wanted,
            frozenset(data["isolating_groups"]),
            bool(data["complete"]),
            float(data["generation"]),
            keys={str(n): str(k) for n, k in (data.get("keys") or {}).items()},
            pending=frozenset(str(n) for n in data.get("pending") or []),
            as_of=float(as_of) if _number(as_of) else None,
            digest=digest if isinstance(digest, str) else None,
        )


class Malformed(ValueError):
    """The controller's answer is not the desired state of this cluster."""


def read_document(cluster: str, document: object, errors: list[str]) -> Document:
    """The document's desired state per node. A node entry off the contract is an error and its node, when named,
    maps to None (left as it is); a document off it raises `Malformed`."""
    if not isinstance(document, dict) or document.get("cluster") != cluster:
        raise Malformed(f"not the desired Slurm state of cluster {cluster}")
    nodes, generation = document.get("nodes"), document.get("generation")
    if not isinstance(nodes, list) or not _number(generation):
        raise Malformed("no node list or generation: a controller older than this bridge?")
    wanted: dict[str, Desired | None] = {}
    keys: dict[str, str] = {}
    pending: set[str] = set()
    for entry in nodes:
        desired = _desired(entry)
        if isinstance(desired, str):
            errors.append(f"controller: skipped a node entry: {desired}: {entry!r:.200}")
        if isinstance(entry, dict) and isinstance(entry.get("node"), str):
            name = entry["node"]
            # One name, one entry: a name listed twice is not ours to guess about.
            twice = name in wanted
            wanted[name] = None if isinstance(desired, str) or twice else desired
            key = entry.get("key", "")  # absent: a controller older than keys, which reads reports by name
            if isinstance(key, str) and not twice:
                keys[name] = key
            else:
                keys.pop(name, None)  # no record of its own (an ambiguous name), or two entries: not reported
            if entry.get("state") == "pending":
                pending.add(name)
    isolating = frozenset(g for g in document.get("isolating_groups") or [] if isinstance(g, str))
    interval = document.get("sync_interval_s")
    suggested = float(interval) if isinstance(interval, (int, float)) and _number(interval) else None
    as_of, digest = document.get("as_of"), document.get("digest")
    return Document(
        wanted,
        isolating,
        document.get("complete") is True,
        float(generation),
        suggested,
        keys=keys,
        pending=frozenset(pending),
        as_of=float(as_of) if _number(as_of) else None,
        digest=digest if isinstance(digest, str) else None,
    )


def still_holds(cluster: str, answer: object, kept: Document | None) -> Document | None:
    """The kept document, when the controller answered that it still holds (`unchanged`, the same digest and
    cursor); None for any other answer (a whole document, read with `read_document`)."""
    if not isinstance(answer, dict) or answer.get("unchanged") is not True or answer.get("cluster") != cluster:
        return None
    if kept is None or kept.cursor() is None or answer.get("digest") != kept.digest:
        raise Malformed("an unchanged answer for a document this bridge does not hold")
    interval = answer.get("sync_interval_s")
    return replace(kept, interval_s=float(interval) if _number(interval) else kept.interval_s)


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _desired(entry: object) -> Desired | str:
    """A node entry's desired state, or why it is off the contract."""
    if not isinstance(entry, dict) or not isinstance(entry.get("node"), str) or not entry["node"]:
        return "no node name"
    reason, feature = entry.get("reason"), entry.get("feature")
    if feature not in FEATURES:
        return f"feature is not one of {', '.join(FEATURES)}"  # any other feature is not ours to set
    if reason is not None and not (
        isinstance(reason, str) and reason.startswith(OWNED_PREFIX) and reason.isprintable() and len(reason) <= 400
    ):
        return f"reason is not printable text starting with {OWNED_PREFIX!r}"  # a drain we can recognise later
    return Desired(reason, str(feature))


@dataclass
class Memory:
    """What the bridge keeps between passes (and, with a state dir, across restarts): the last document applied.
    `held`: the claims last reported (None: nothing reported yet, so the next report names every node)."""

    document: Document | None = None
    path: Path | None = None
    held: dict[str, str | None] | None = None

    @classmethod
    def load(cls, path: Path | None) -> Memory:
        if path is None or not path.exists():
            return cls(path=path)
        try:
            return cls(Document.from_json(json.loads(path.read_text())), path)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
            log.warning("%s unreadable (%s): starting without the last document", path, err)
            return cls(path=path)

    def keep(self, document: Document) -> None:
        self.document = document
        if self.path is not None:
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(document.to_json()))
            temporary.replace(self.path)  # atomic: a crash leaves the old or the new, never half of one
