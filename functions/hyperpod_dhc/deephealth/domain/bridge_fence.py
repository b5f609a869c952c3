"""One writer per cluster, and how the Slurm bridge is doing from Slurm's side (pure).

Two bridges of one cluster (an old controller node still up after a replacement, a second install) would each
apply their document to Slurm. A bridge says who it is (`bridge`, `<hostname>:<uuid>`) on every pull of the state,
and the cluster's registry item keeps a fencing token: `fence`, a number that grows by one at each take-over,
`bridge_holder`, the identity holding it, and `bridge_seen_at`, the holder's last pull. The holder gets
`holder: true`; any other bridge `holder: false` and the current fence, and it only adds drains (never releases).
Another bridge takes the fence when nobody holds it, when the holder has been silent for `LEASE_S`, or when its
operator started it with `--take-over`. The write is conditional on the fence and holder read, so of two pulls
racing for it one wins and the other is answered `holder: false`.

The same pull says how the bridge's last pass went (`BridgeStatus`): when Slurm last matched what it had to apply
(`synced_at`), whether slurmctld answered (`slurmctld`), and how many errors it met; the Api counts them as metrics
the stack alarms on (`infra/hyperpod_dhc/infra/operations_dashboard.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from hyperpod_dhc.deephealth.domain.slurm import SYNC_INTERVAL_S

LEASE_S = 3 * SYNC_INTERVAL_S  # a holder silent this long loses the fence to the next bridge that asks
# The holder's `bridge_seen_at` is written again when it is at least this old: once per pass (pages of one pass
# come seconds apart), so it lags a live holder by about one sync interval, well within LEASE_S.
SEEN_REFRESH_S = SYNC_INTERVAL_S / 2
# Reconcile says a cluster's bridge is silent (metric `SlurmBridgeSilent`) when the bridge that holds the fence has
# not pulled for this long: 15 missed syncs, the named clusters' `slurm-bridge-silent-<cluster>` alarm's 15 minutes.
SILENT_S = 15 * 60
BRIDGE_ID_PATTERN = r"^[!-~]{1,200}$"  # printable ASCII, no space: `<hostname>:<uuid>`
SlurmctldAnswer = Literal["ok", "unreachable", "refused"]
MAX_ERRORS = 1_000_000
# The metrics of a bridge's status (`observability.bridge_metric`: per cluster and stack-wide), which the stack's
# alarms read (infra/hyperpod_dhc/infra/operations_dashboard.py): one name per concept, in metric, alarm and docs.
UNREACHABLE_METRIC = "SlurmctldUnreachable"  # 1: slurmctld did not answer the bridge's last pass, else 0
REFUSED_METRIC = "SlurmBridgeUpdatesRefused"  # 1: slurmctld refused every update of the last pass, else 0
BEHIND_METRIC = "SlurmBridgeBehindSeconds"  # since Slurm last matched what the bridge had to apply
ERRORS_METRIC = "SlurmBridgeErrors"  # errors in the bridge's last pass
SILENT_METRIC = "SlurmBridgeSilent"  # Reconcile's: 1 when the fence holder has not pulled for SILENT_S, else 0


@dataclass(frozen=True)
class BridgeLease:
    """The fencing token of one cluster, as its registry item keeps it (no bridge ever identified itself: all
    unset, fence 0)."""

    holder: str | None = None
    fence: int = 0
    seen_at: float | None = None  # the holder's last pull


class FenceDecision(NamedTuple):
    fence: int  # the fence the asking bridge is told
    holder: bool  # it holds the fence
    write: BridgeLease | None  # what to write, conditional on the lease read; None: nothing
    why: str | None  # a take-over's reason (the audit line's); None when nobody takes over


@dataclass(frozen=True)
class BridgeStatus:
    """What a bridge says of itself on a pull (every query parameter optional: an older bridge sends none); the
    route validates each (`BRIDGE_ID_PATTERN`, `MAX_ERRORS`)."""

    bridge: str | None = None
    # When Slurm last matched what the bridge had to apply (every planned change applied, or none due); None: never.
    synced_at: float | None = None
    slurmctld: SlurmctldAnswer | None = None  # how slurmctld answered its last pass ("refused": every update)
    errors: int | None = None  # errors in its last pass
    take_over: bool = False  # its operator started it with --take-over


def decide_fence(lease: BridgeLease, asker: str | None, take_over: bool, now: float) -> FenceDecision:
    """Who holds the cluster's fence after `asker`'s pull, and what to write for it.

    No identity (an older bridge): told the fence, never the holder, nothing written. The holder: holds it, and its
    `seen_at` is refreshed when SEEN_REFRESH_S old. Another identity takes it over (fence + 1) when nobody holds
    it, when the holder has been silent longer than LEASE_S, or when `take_over`; otherwise it is told the fence and
    that it does not hold it."""
    if asker is None:
        return FenceDecision(lease.fence, False, None, None)
    if asker == lease.holder:
        due = lease.seen_at is None or now - lease.seen_at >= SEEN_REFRESH_S
        refreshed = BridgeLease(asker, lease.fence, now) if due else None
        return FenceDecision(lease.fence, True, refreshed, None)
    why = _take_over_reason(lease, take_over, now)
    if why is None:
        return FenceDecision(lease.fence, False, None, None)
    return FenceDecision(lease.fence + 1, True, BridgeLease(asker, lease.fence + 1, now), why)


def _take_over_reason(lease: BridgeLease, take_over: bool, now: float) -> str | None:
    if lease.holder is None:
        return "no bridge held the fence"
    if lease.seen_at is None or now - lease.seen_at > LEASE_S:
        silent = "ever" if lease.seen_at is None else f"{int(now - lease.seen_at)} s"
        return f"the holder was silent for {silent} (lease {LEASE_S} s)"
    if take_over:
        return "started with --take-over"
    return None


def silent_for(lease: BridgeLease, now: float) -> float | None:
    """How long the bridge holding the fence has not pulled; None when no bridge ever identified itself."""
    if lease.holder is None or lease.seen_at is None:
        return None
    return max(0.0, now - lease.seen_at)


def behind_s(status: BridgeStatus, now: float) -> float | None:
    """How long ago Slurm last matched what the bridge had to apply (`SlurmBridgeBehindSeconds`); None: it did not
    say (never, or an older bridge)."""
    return None if status.synced_at is None else max(0.0, now - status.synced_at)
