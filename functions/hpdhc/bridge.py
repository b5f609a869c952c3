"""`hpdhc bridge`: the Slurm bridge, an agent on the cluster's Slurm controller node that makes Slurm do what the
controller decided.

Every `--interval` seconds it reads each node's desired Slurm state from the controller's API
(`GET /clusters/{cluster}/slurm`), reads Slurm's (`scontrol -o show node`), applies the difference with
`scontrol update NodeName=<node> ...`, and reports which of the listed nodes run a job
(`POST /clusters/{cluster}/slurm/occupancy`). It only ever drains, resumes and sets node features: never
`State=DOWN` or `FAIL`, never `scancel`, so a running job is never killed (a drained node finishes its jobs).
Only drains whose reason we own (`hpdhc: ...`) are resumed or re-worded; anyone else's drain stays as it is.

A Slurm node the controller does not list yet (slurmd registered, the node not recorded) is drained with
`hpdhc: awaiting deep health check` when its partition belongs to an instance group the controller isolates
(partition -> group from HyperPod's provisioning_parameters.json): a brand-new node takes no job before its check.

When the controller is unreachable or answers an error, nothing in Slurm changes; the next interval tries again.
Standard library and boto3/botocore only (through `hpdhc.client`). `sync_once` takes any `Controller` and `Slurm`,
so the digital twin runs the same logic without subprocesses.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from botocore.exceptions import BotoCoreError, ClientError

from hpdhc.client import ApiError, Json, OperatorClient, add_api_options
from hpdhc.scontrol import OWNED_PREFIX, Actual, Scontrol, Slurm, SlurmError, SlurmNode

# The controller's vocabulary (deephealth.domain.slurm holds the same; tests/unit/test_slurm_bridge.py checks).
AWAITING = OWNED_PREFIX + "awaiting deep health check"
FEATURE_KEY = "HealthCheck"

PROVISIONING_PARAMETERS = "/opt/ml/config/provisioning_parameters.json"
DEFAULT_INTERVAL_S = 60.0
INTERVAL_BOUNDS_S = (10.0, 600.0)  # a controller-suggested interval is kept within these

log = logging.getLogger("hpdhc.bridge")


# ---------------------------------------------------------------------- desired vs actual (pure)


@dataclass(frozen=True)
class Desired:
    """A node's desired Slurm state: drained with `reason` (owned), or not drained by us (`reason` None)."""

    reason: str | None
    feature: str  # HealthCheck:InProgress|Passed|Failed|Skipped


def changes(desired: Desired, actual: Actual) -> list[str]:
    """`scontrol update` arguments (after `NodeName=<node>`) that take `actual` to `desired`; [] when it is there.

    Only our own drains are resumed or re-worded; a drain someone else set is never touched (their reason stays),
    and features other than `HealthCheck:*` are kept."""
    out: list[str] = []
    if desired.reason is not None:
        if not actual.drained or (actual.owned and actual.reason != desired.reason):
            out += ["State=DRAIN", f"Reason={desired.reason}"]
    elif actual.drained and actual.owned:
        out.append("State=RESUME")
    available = actual.features if actual.available is None else actual.available
    active = _relabelled(actual.features, desired.feature)
    listed = _relabelled(available, desired.feature)
    # Both in one update: Slurm refuses ActiveFeatures that are not a subset of AvailableFeatures at any moment.
    if set(active) != set(actual.features) or set(listed) != set(available):
        out += [f"AvailableFeatures={','.join(listed)}", f"ActiveFeatures={','.join(active)}"]
    return out


def _relabelled(features: tuple[str, ...], feature: str) -> tuple[str, ...]:
    return (*(f for f in features if not f.startswith(FEATURE_KEY + ":")), feature)


def unknown_node_drain(node: SlurmNode, isolating_partitions: set[str]) -> list[str]:
    """The drain for a node the controller does not list: [] unless a partition of it isolates and it is not
    drained by anyone already."""
    if node.drained or not isolating_partitions.intersection(node.partitions):
        return []
    return ["State=DRAIN", f"Reason={AWAITING}"]


# ---------------------------------------------------------------------- the controller


class Controller(Protocol):
    """What the bridge needs of the controller: the desired state document (every page), and who hears occupancy."""

    def desired(self, cluster: str) -> Json: ...

    def report(self, cluster: str, nodes: list[Json]) -> Json: ...


class ApiController(Controller):
    """The controller's REST API, SigV4-signed with the instance role's credentials."""

    def __init__(self, client: OperatorClient) -> None:
        self.client = client

    def desired(self, cluster: str) -> Json:
        return self.client.slurm_state(cluster)

    def report(self, cluster: str, nodes: list[Json]) -> Json:
        return self.client.report_occupancy(cluster, nodes)


# ---------------------------------------------------------------------- one pass


@dataclass
class SyncResult:
    """What one pass did: the updates applied (node -> arguments), the occupancy reported, what went wrong."""

    applied: dict[str, list[str]] = field(default_factory=dict)
    reported: list[Json] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    interval_s: float | None = None  # the controller's suggested sync_interval_s


class _Malformed(ValueError):
    pass


def sync_once(
    cluster: str, controller: Controller, slurm: Slurm, partitions_to_groups: Mapping[str, str]
) -> SyncResult:
    """Read the desired state, apply the difference, report occupancy. Slurm is only touched once the controller
    answered a whole, well-formed document and Slurm's own state was read."""
    result = SyncResult()
    try:
        document = controller.desired(cluster)
        wanted, isolating, result.interval_s = _read_document(cluster, document, result.errors)
    except Exception as err:  # whatever failed (network, HTTP, JSON, shape): change nothing, try next interval
        return _failed(result, f"controller: {err}")
    for error in result.errors:  # node entries skipped
        log.warning("%s", error)
    try:
        actual = slurm.nodes()
    except SlurmError as err:
        return _failed(result, str(err))

    isolating_partitions = {p for p, group in partitions_to_groups.items() if group in isolating}
    # A listed node whose entry is off the contract (None) is left as it is: listed, so not unknown either.
    plan = {name: changes(d, actual[name]) for name, d in sorted(wanted.items()) if d and name in actual}
    plan |= {
        name: unknown_node_drain(node, isolating_partitions)
        for name, node in sorted(actual.items())
        if name not in wanted
    }
    for name, args in plan.items():
        if not args:
            continue
        try:
            slurm.update(name, args)
        except SlurmError as err:  # one node's refusal does not hold back the others
            result.errors.append(str(err))
            log.warning("%s", err)
            continue
        result.applied[name] = args
        log.info("scontrol update NodeName=%s %s", name, " ".join(args))

    occupancy = [{"node": name, "busy": actual[name].busy} for name in sorted(wanted) if name in actual]
    try:
        controller.report(cluster, occupancy)
        result.reported = occupancy
    except Exception as err:  # Slurm is already right; the controller hears about occupancy next time
        result.errors.append(f"occupancy report: {err}")
        log.warning("occupancy report: %s", err)
    return result


def _read_document(
    cluster: str, document: Json, errors: list[str]
) -> tuple[dict[str, Desired | None], set[str], float | None]:
    """The desired state per node, the isolating groups and the suggested interval. A node entry off the contract
    is an error and its node, when named, maps to None (left as it is); a document off it raises `_Malformed`."""
    if (
        not isinstance(document, dict)
        or document.get("cluster") != cluster
        or not isinstance(document.get("nodes"), list)
    ):
        raise _Malformed(f"not the desired Slurm state of cluster {cluster}")
    wanted: dict[str, Desired | None] = {}
    for entry in document["nodes"]:
        desired = _desired(entry)
        if isinstance(desired, str):
            errors.append(f"controller: skipped a node entry: {desired}: {entry!r:.200}")
        if isinstance(entry, dict) and isinstance(entry.get("node"), str):
            wanted[entry["node"]] = None if isinstance(desired, str) else desired
    isolating = {g for g in document.get("isolating_groups") or [] if isinstance(g, str)}
    interval = document.get("sync_interval_s")
    return wanted, isolating, float(interval) if isinstance(interval, int | float) else None


def _desired(entry: object) -> Desired | str:
    """A node entry's desired state, or why it is off the contract."""
    if not isinstance(entry, dict) or not isinstance(entry.get("node"), str) or not entry["node"]:
        return "no node name"
    reason, feature = entry.get("reason"), entry.get("feature")
    if not isinstance(feature, str) or not feature.startswith(FEATURE_KEY + ":"):
        return f"feature is not {FEATURE_KEY}:*"  # any other feature is not ours to set
    if reason is not None and not (isinstance(reason, str) and reason.startswith(OWNED_PREFIX)):
        return f"reason does not start with {OWNED_PREFIX!r}"  # a drain we set must be one we can recognise later
    return Desired(reason, feature)


def _failed(result: SyncResult, error: str) -> SyncResult:
    result.errors.append(error)
    log.error("%s; nothing changed in Slurm", error)
    return result


# ---------------------------------------------------------------------- the agent


def load_partitions(path: Path) -> dict[str, str]:
    """Slurm partition -> HyperPod instance group, from the lifecycle's provisioning_parameters.json."""
    try:
        parameters = json.loads(path.read_text())
        return {g["partition_name"]: g["instance_group_name"] for g in parameters.get("worker_groups") or []}
    except FileNotFoundError:
        log.warning("%s not found: nodes the controller does not list yet are not drained", path)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        log.error("%s unreadable (%s): nodes the controller does not list yet are not drained", path, err)
    return {}


def run(
    cluster: str,
    controller: Controller,
    slurm: Slurm,
    partitions_to_groups: Mapping[str, str],
    interval_s: float | None = None,
    once: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Sync every interval (`interval_s`, else the controller's suggestion, else 60 s) until stopped; with `once`,
    one pass whose exit code says whether anything went wrong."""
    while True:
        started = time.monotonic()
        result = sync_once(cluster, controller, slurm, partitions_to_groups)
        log.info(
            "synced %s: %d node(s) updated, %d reported, %d error(s)",
            cluster,
            len(result.applied),
            len(result.reported),
            len(result.errors),
        )
        if once:
            return 1 if result.errors else 0
        period = interval_s or min(
            max(result.interval_s or DEFAULT_INTERVAL_S, INTERVAL_BOUNDS_S[0]), INTERVAL_BOUNDS_S[1]
        )
        sleep(max(0.0, period - (time.monotonic() - started)))


def parser(prog: str = "hpdhc bridge") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="The Slurm bridge: every interval, drain, resume and label this cluster's Slurm nodes as the "
        "controller's API says, and report which of them run jobs. Runs on the Slurm controller node.",
    )
    p.add_argument("--cluster", required=True, help="the HyperPod cluster's name")
    add_api_options(p)
    p.add_argument(
        "--interval",
        type=_seconds,
        metavar="SECONDS",
        help="seconds between passes (default: the controller's, else 60)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit (1 if anything went wrong)")
    p.add_argument(
        "--provisioning-parameters",
        type=Path,
        default=Path(PROVISIONING_PARAMETERS),
        metavar="PATH",
        help=f"HyperPod's lifecycle parameters: partition -> instance group (default {PROVISIONING_PARAMETERS})",
    )
    p.add_argument("--scontrol", default="scontrol", metavar="PATH", help="the scontrol binary")
    return p


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text}")
    return seconds


def main(argv: list[str] | None = None, prog: str = "hpdhc bridge") -> int:
    args = parser(prog).parse_args(argv)
    # To stderr, which the systemd unit hands to journald: it timestamps each line itself.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        client = OperatorClient(args.endpoint, args.profile, args.region, args.stack)
    except (ApiError, BotoCoreError, ClientError) as err:
        log.error("cannot set up the controller's API client: %s", err)
        return 2
    partitions = load_partitions(args.provisioning_parameters)
    log.info("bridge for %s: API %s, partitions %s", args.cluster, client.endpoint, partitions or "-")
    try:
        return run(args.cluster, ApiController(client), Scontrol(args.scontrol), partitions, args.interval, args.once)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
