"""The controller's desired Slurm state as the bridge reads it (`read_document`), keeps it between passes (`Memory`)
and asks whether it still holds (`still_holds`). Pure but for `Memory`'s file: every rule of what an answer may say
is here, so a node entry off the contract is left as it is and a document off it is never applied (`Malformed`).
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeGuard

from hyperpod_dhc.hpdhc.client import Json
from hyperpod_dhc.hpdhc.scontrol import OWNED_PREFIX

# The controller's vocabulary (hyperpod_dhc.deephealth.domain.slurm holds the same; tests/unit/test_slurm_contract.py
# checks).
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
    `as_of` and `digest` let the next pass ask "changed since?" and get `unchanged` instead of every node.
    `fence` and `holder`: the cluster's fencing token and whether this bridge holds it (a controller older than
    fencing sends neither: then `holder`); only the holder releases a node."""

    wanted: dict[str, Desired | None]  # None: an entry off the contract, left as it is
    isolating_groups: frozenset[str]
    complete: bool
    generation: float
    interval_s: float | None = None
    keys: Mapping[str, str] = field(default_factory=dict)
    pending: frozenset[str] = frozenset()
    as_of: float | None = None
    digest: str | None = None
    fence: int = 0
    holder: bool = True

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
            "fence": self.fence,
            "holder": self.holder,
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
            fence=int(data.get("fence") or 0),
            holder=data.get("holder", True) is True,
        )


def isolating(
    partitions: tuple[str, ...], partitions_to_groups: Mapping[str, str], isolating_groups: frozenset[str]
) -> bool | None:
    """Whether a node of these partitions is isolated while new: True if any partition's group isolates, False if
    every partition maps to a group that does not, None when a partition's group is unknown (the bridge and the
    boot gate both ask this)."""
    groups = [partitions_to_groups.get(p) for p in partitions]
    if any(g in isolating_groups for g in groups if g):
        return True
    if groups and all(groups):
        return False
    return None


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
    isolating_groups = frozenset(g for g in document.get("isolating_groups") or [] if isinstance(g, str))
    interval = document.get("sync_interval_s")
    suggested = float(interval) if isinstance(interval, (int, float)) and _number(interval) else None
    as_of, digest = document.get("as_of"), document.get("digest")
    fence, holder = _fence(document)
    return Document(
        wanted,
        isolating_groups,
        document.get("complete") is True,
        float(generation),
        suggested,
        keys=keys,
        pending=frozenset(pending),
        as_of=float(as_of) if _number(as_of) else None,
        digest=digest if isinstance(digest, str) else None,
        fence=fence,
        holder=holder,
    )


def _fence(answer: Mapping[str, object]) -> tuple[int, bool]:
    """(fence, holder) of an answer. A controller older than fencing sends no `fence`: this bridge holds it. With a
    `fence`, only `holder: true` is holding (anything else, a bridge that only adds to the lock)."""
    fence = answer.get("fence")
    if fence is None:
        return 0, True
    if not _number(fence) or fence < 0:
        raise Malformed(f"fence is not a number: {fence!r:.50}")
    return int(fence), answer.get("holder") is True


def still_holds(cluster: str, answer: object, kept: Document | None) -> Document | None:
    """The kept document, when the controller answered that it still holds (`unchanged`, the same digest and
    cursor); None for any other answer (a whole document, read with `read_document`)."""
    if not isinstance(answer, dict) or answer.get("unchanged") is not True or answer.get("cluster") != cluster:
        return None
    if kept is None or kept.cursor() is None or answer.get("digest") != kept.digest:
        raise Malformed("an unchanged answer for a document this bridge does not hold")
    interval = answer.get("sync_interval_s")
    fence, holder = _fence(answer)
    return replace(
        kept, interval_s=float(interval) if _number(interval) else kept.interval_s, fence=fence, holder=holder
    )


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


_IDENTITY = re.compile(r"[!-~]{1,200}")  # what the controller takes as a bridge's identity


def new_identity() -> str:
    """`<hostname>:<uuid>`: which machine a bridge runs on, and which install of it."""
    host = "".join(c for c in socket.gethostname() if "!" <= c <= "~")[:150] or "host"
    return f"{host}:{uuid.uuid4().hex[:12]}"


@dataclass
class Memory:
    """What the bridge keeps between passes (and, with a state dir, across restarts): the last document applied,
    the lock's nodes as this bridge last left them (`locked`; None: never written), the nodes an admin released from
    the lock by hand (node -> the desired reason then), and the highest fence seen (`fence`: a document below it is
    never applied). `held`: the claims last reported (None: nothing reported yet, so the next report names every
    node). `bridge`: who this bridge is to the controller (`<hostname>:<uuid>`, kept in the state file: a bridge
    with a new state dir is a new bridge). What the last pass said of Slurm: `synced_at` (when Slurm last had
    everything this bridge had to apply, wall clock), `slurmctld` (ok, unreachable, refused), `errors`; sent with
    the next pull (`status`), as is `take_over` until this bridge holds the fence."""

    document: Document | None = None
    path: Path | None = None
    held: dict[str, str | None] | None = None
    locked: frozenset[str] | None = None
    released: dict[str, str] = field(default_factory=dict)
    fence: int = 0
    bridge: str = field(default_factory=lambda: new_identity())
    synced_at: float | None = None
    slurmctld: str | None = None
    errors: int | None = None
    take_over: bool = False

    def status(self) -> dict[str, str]:
        """The query parameters of the next pull: who this bridge is and how its last pass went."""
        out = {"bridge": self.bridge}
        if self.synced_at is not None:
            out["synced_at"] = f"{self.synced_at:.3f}"
        if self.slurmctld is not None:
            out["slurmctld"] = self.slurmctld
        if self.errors is not None:
            out["errors"] = str(min(self.errors, 1_000_000))
        if self.take_over:
            out["take_over"] = "1"
        return out

    @classmethod
    def load(cls, path: Path | None) -> Memory:
        if path is None or not path.exists():
            return cls(path=path)
        try:
            data = json.loads(path.read_text())
            if "wanted" in data:  # a bridge older than the lock kept the document alone
                return cls(Document.from_json(data), path)
            locked = data.get("locked")
            bridge = data.get("bridge")
            return cls(
                Document.from_json(data["document"]) if data.get("document") else None,
                path,
                locked=None if locked is None else frozenset(str(n) for n in locked),
                released={str(n): str(r) for n, r in (data.get("released") or {}).items()},
                fence=int(data.get("fence") or 0),
                bridge=bridge if isinstance(bridge, str) and _IDENTITY.fullmatch(bridge) else new_identity(),
            )
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
            log.warning("%s unreadable (%s): starting without the last document", path, err)
            return cls(path=path)

    def keep(self, document: Document | None = None) -> None:
        """Remember `document` (when given) and the lock's state, on disk too when there is a state dir."""
        if document is not None:
            self.document = document
            self.fence = max(self.fence, document.fence)
            self.take_over = self.take_over and not document.holder
        if self.path is not None:
            data = {
                "bridge": self.bridge,
                "document": None if self.document is None else self.document.to_json(),
                "locked": None if self.locked is None else sorted(self.locked),
                "released": dict(sorted(self.released.items())),
                "fence": self.fence,
            }
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(data))
            temporary.replace(self.path)  # atomic: a crash leaves the old or the new, never half of one
