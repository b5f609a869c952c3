"""The Slurm bridge's two routes: each node's desired Slurm state, and which nodes run jobs (or are held by
someone else in Slurm).

The bridge (an agent on the cluster's Slurm controller node, `functions/hyperpod_dhc/hpdhc/bridge.py`) pulls the state,
applies it with `scontrol`, and reports each node's occupancy, so that a round waits for a busy node instead of letting
HyperPod skip it. Both read the stored records (rounds and Reconcile keep them fresh), never a HyperPod listing.

One name, one record: a Slurm name is the short hostname of the live records whose current instance has it
(`domain.slurm.slurm_names`); a name two live records claim is ambiguous and listed drained, with no key, so an
occupancy report never lands on either. The document says whether it covers the whole cluster (`complete`: a
whole listing was recorded) and carries a `generation` that only grows with the records, so the bridge neither
drains a node a partial document does not list nor applies an older document over a newer one.

One writer per cluster: every answer carries the cluster's fencing token (`fence`) and whether the asking bridge
holds it (`holder`), decided by `domain.bridge_fence` on the registry item and written conditionally; the
holder's status (how slurmctld answered, how far behind Slurm is) becomes the metrics the stack alarms on.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hyperpod_dhc.deephealth.adapters.node_table import SAVE_MARGIN_S, Registration
from hyperpod_dhc.deephealth.domain.bridge_fence import (
    BEHIND_METRIC,
    ERRORS_METRIC,
    REFUSED_METRIC,
    SILENT_METRIC,
    SILENT_S,
    UNREACHABLE_METRIC,
    BridgeLease,
    BridgeStatus,
    behind_s,
    decide_fence,
    silent_for,
)
from hyperpod_dhc.deephealth.domain.errors import ClusterNotFound
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, short_hostname
from hyperpod_dhc.deephealth.domain.slurm import (
    MAX_UNKNOWN_ECHOED,
    SYNC_INTERVAL_S,
    Desired,
    NodeOccupancy,
    ambiguous,
    desired_state,
    slurm_names,
    with_occupancy,
)
from hyperpod_dhc.deephealth.observability import MetricUnit, bridge_metric, logger
from hyperpod_dhc.deephealth.usecases.context import Context
from hyperpod_dhc.deephealth.usecases.decisions import notify, save_and_announce

# An unchanged answer is given for at most this long after the bridge's last whole document: then it gets one again.
FULL_REFRESH_S = 3600


def slurm_state(
    ctx: Context,
    cluster: str,
    limit: int,
    after: str | None,
    since: float | None = None,
    digest: str | None = None,
    status: BridgeStatus | None = None,
) -> dict[str, Any]:
    """One page of Slurm names with a desired state, ordered by name; `after` is the last name of the previous page.
    The bridge asks for pages as large as the route allows, so a pass loads the cluster's records once.

    With `since` and `digest` (the `as_of` and `digest` of the bridge's last whole document): when no node record
    was saved since then and the groups' settings are the same, an answer `unchanged: true` with no nodes, read
    from the table's index (one key at most), not from every record: an idle cluster costs the same at 10 and at
    10,000 nodes.

    `status` is what the bridge says of itself (every page): every answer carries the cluster's `fence` and whether
    this bridge holds it (`holder`); a pass's first page counts the holder's status as metrics."""
    registration = ctx.table.registration(cluster)
    ctx.known_cluster(cluster, registration)
    now = ctx.clock()
    status = status or BridgeStatus()
    fence, holder = _fence(ctx, cluster, registration.lease, status, now)
    if after is None and (holder or status.bridge is None):  # a bridge that is not the holder applies nothing
        _count_status(cluster, status, now)
    fencing = {"fence": fence, "holder": holder}
    complete = registration.recorded_at is not None
    if since is not None and digest is not None and after is None and now - since < FULL_REFRESH_S:
        unchanged = _unchanged(ctx, cluster, since, digest, complete)
        if unchanged is not None:
            return unchanged | fencing
    view = ctx.shown(cluster)
    isolating, adopting = _settings(view.groups)
    names = slurm_names(view.records.values())
    entries: list[dict[str, Any]] = []
    next_token = None
    for name in sorted(names):
        if after is not None and name <= after:
            continue
        entry = _entry(name, names[name], isolating, adopting)
        if entry is None:
            continue
        if len(entries) == limit:  # one more than the page holds: there is a next page
            next_token = entries[-1]["node"]
            break
        entries.append(entry)
    return {
        "cluster": cluster,
        "sync_interval_s": SYNC_INTERVAL_S,
        "isolating_groups": sorted(isolating),
        # Every node HyperPod listed at the last whole look is recorded: a Slurm node not listed here is new.
        "complete": complete,
        "generation": max((r.updated_at for r in view.records.values()), default=0.0),
        "as_of": now,
        "digest": _digest(view.info.cluster_id, isolating, adopting, complete),
        "nodes": entries,
        "next_token": next_token,
        **fencing,
    }


def _fence(ctx: Context, cluster: str, lease: BridgeLease, status: BridgeStatus, now: float) -> tuple[int, bool]:
    """(the cluster's fence, whether the asking bridge holds it), written first when that changes or is due a
    refresh (`domain.bridge_fence.decide_fence`). A write another pull beat: not the holder, and the fence as
    that pull left it."""
    decision = decide_fence(lease, status.bridge, status.take_over, now)
    if decision.write is None:
        return decision.fence, decision.holder
    if not ctx.table.write_bridge_lease(cluster, lease, decision.write):
        fence = ctx.table.registration(cluster).lease.fence
        logger.info("slurm bridge fence changed concurrently", extra={"cluster": cluster, "bridge": status.bridge})
        return fence, False
    if decision.why is not None:
        _taken_over(ctx, cluster, lease, decision.write, decision.why)
    return decision.fence, decision.holder


def _taken_over(ctx: Context, cluster: str, old: BridgeLease, new: BridgeLease, why: str) -> None:
    """One audit line per take-over, and a `bridge-take-over` notification when it took the fence from a holder."""
    detail = {"old_holder": old.holder, "new_holder": new.holder, "fence": new.fence, "why": why}
    logger.info("slurm bridge take-over", extra={"cluster": cluster, **detail})
    if old.holder is None:
        return  # the cluster's first bridge (or the first since its registry item went): nobody lost anything
    note = (
        f"{old.holder} no longer holds the fence: it only adds drains from now on. If it still runs, stop it: "
        "`systemctl stop hpdhc-slurm-bridge` on that host (`journalctl -u hpdhc-slurm-bridge` says what it did)."
    )
    subject = f"hyperpod-dhc: the Slurm bridge of {cluster} was taken over"
    notify(ctx, "bridge-take-over", cluster, "", subject, {**detail, "note": note})


def _count_status(cluster: str, status: BridgeStatus, now: float) -> None:
    """The bridge's last pass as metrics (per cluster and stack-wide): what the stack's bridge alarms read."""
    if status.slurmctld is not None:
        bridge_metric(UNREACHABLE_METRIC, cluster, int(status.slurmctld == "unreachable"))
        bridge_metric(REFUSED_METRIC, cluster, int(status.slurmctld == "refused"))
    behind = behind_s(status, now)
    if behind is not None:
        bridge_metric(BEHIND_METRIC, cluster, behind, MetricUnit.Seconds)
    if status.errors is not None:
        bridge_metric(ERRORS_METRIC, cluster, status.errors)


def bridge_silence(ctx: Context, cluster: str, registration: Registration | None = None) -> float | None:
    """Reconcile's look at a cluster's bridge: `SlurmBridgeSilent` 1 when the bridge holding the fence has not
    pulled for SILENT_S, else 0 (per cluster and stack-wide: a bridge under `"*"` has no per-cluster alarm on its
    pulls). A cluster no bridge ever identified itself for gets nothing. Returns the silence, in seconds.
    `registration`: the cluster's registry item as Reconcile's pass read it (else it is read here)."""
    silent = silent_for((registration or ctx.table.registration(cluster)).lease, ctx.clock())
    if silent is not None:
        bridge_metric(SILENT_METRIC, cluster, int(silent > SILENT_S))
    return silent


def _settings(groups: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(the isolating groups, the groups whose adopted nodes stay in service until their check)."""
    isolating = {name for name, group in groups.items() if group.isolating}
    adopting = {name for name, group in groups.items() if group.policy.adopt == "check-when-idle"}
    return isolating, adopting


def _digest(cluster_id: str, isolating: set[str], adopting: set[str], complete: bool) -> str:
    """What the document depends on besides the records: a change here is a new document."""
    text = json.dumps([cluster_id, sorted(isolating), sorted(adopting), complete])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _unchanged(ctx: Context, cluster: str, since: float, digest: str, complete: bool) -> dict[str, Any] | None:
    """The answer that the bridge's document still holds, or None when it may not."""
    try:  # the groups' settings, not what the cluster was seen to do: the document depends on nothing else
        info = ctx.describe(cluster)
    except ClusterNotFound:
        return None  # what the cluster left: the whole document says it
    isolating, adopting = _settings(ctx.groups(cluster, info))
    if _digest(info.cluster_id, isolating, adopting, complete) != digest:
        return None
    if ctx.table.changed_since(cluster, since - SAVE_MARGIN_S):
        return None
    return {
        "cluster": cluster,
        "sync_interval_s": SYNC_INTERVAL_S,
        "isolating_groups": sorted(isolating),
        "complete": complete,
        "unchanged": True,
        "as_of": since,  # the bridge's cursor stays where its document was read
        "digest": digest,
        "nodes": [],
        "next_token": None,
    }


def _entry(name: str, records: list[NodeRecord], isolating: set[str], adopting: set[str]) -> dict[str, Any] | None:
    desired: Desired | None
    if len(records) > 1:
        desired, record = ambiguous(name, records), None
    else:
        record = records[0]
        kept_in_service = record.adopted and record.group in adopting
        desired = desired_state(record, record.group in isolating and not kept_in_service)
    if desired is None:
        return None
    return {
        "node": name,
        "key": record.key if record else None,
        "logical_id": record.logical_id if record else None,
        "instance_id": record.instance_id if record else None,
        "group": record.group if record else None,
        "state": record.state.value if record else "ambiguous",
        "reason": desired.reason,
        "feature": desired.feature.value,
    }


def report_occupancy(ctx: Context, cluster: str, nodes: list[NodeOccupancy], now: float) -> dict[str, Any]:
    """Record which nodes run jobs and which someone else holds in Slurm. A report names each node's key (from the
    document), so only those records are read; one whose record no longer has that name (replaced, reused) is
    unknown. Only changes and due refreshes are written (`domain.slurm.with_occupancy`); a write that loses a race
    is skipped (the next report writes it). A waiting node the bridge now reports idle starts a round."""
    ctx.known_cluster(cluster)
    if any(n.key for n in nodes):  # a node reported without a key (an ambiguous name) is unknown
        loaded = ctx.table.load_nodes(cluster, {n.key for n in nodes if n.key})
        by_name = {n.node: r for n in nodes if (r := loaded.get(n.key or "")) and _names(r, n.node)}
    else:  # a bridge older than the keys: the whole cluster, by name
        by_name = {
            name: rs[0] for name, rs in slurm_names(ctx.table.load_cluster(cluster).values()).items() if len(rs) == 1
        }
    unknown = [n.node for n in nodes if n.node not in by_name]
    changes = [u for n in nodes if n.node in by_name and (u := with_occupancy(by_name[n.node], n.busy, n.held, now))]
    saved = save_and_announce(ctx, changes)
    busy_before = {r.key for r in by_name.values() if r.slurm_busy}
    freed = [r.key for r in saved if r.key in busy_before and not r.slurm_busy]
    if freed:
        ctx.start_round(cluster)
    logger.info(
        "slurm occupancy",
        extra={
            "cluster": cluster,
            "reported": len(nodes),
            "updated": len(saved),
            "freed": freed[:20],
            "held": sum(1 for n in nodes if n.held),
        },
    )
    return {"updated": len(saved), "unknown": unknown[:MAX_UNKNOWN_ECHOED], "unknown_count": len(unknown)}


def _names(record: NodeRecord, name: str) -> bool:
    return short_hostname(record.hostname) == name
