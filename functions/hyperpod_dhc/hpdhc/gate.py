"""`hpdhc gate`: what keeps a new node from taking a job in the seconds between its slurmd registering and the
bridge's next pass (Slurm starts a pending job within about 2 s of a node registering; polling cannot close that).

`hpdhc gate node-boot --cluster C --node NAME` is what a node's lifecycle script runs before it starts slurmd. It
reads its own node only (`scontrol -o --future show node NAME`: a node Slurm holds as `FUTURE` or `CLOUD` is seen),
puts it in the controller's lock (the reservation `hpdhc-<cluster>`, hyperpod_dhc.hpdhc.lock) and drains it with our
reason (`hpdhc:wait`), so it registers locked; the bridge releases it once the controller says it passed (or its group
does not isolate new nodes). It needs no API: without an answer, the lock is the safe side. With the API options it asks
the controller whether the node's group isolates new nodes and does nothing for one that does not (an operator's
opt-out). It never touches a node someone else holds (an admin's DOWN or DRAIN, HyperPod's `Action:*`, another
reservation): only Slurm's own marks of a node that is not up yet are no claim.

It never fails a launch: it exits 0 whatever Slurm says. When slurmctld does not answer, or does not know the node
within `--wait`, it leaves a marker (`--marker-dir`/NAME, a line of JSON) and logs why. The bridge locks every
node Slurm knows and the controller has not passed, registered or not, so a node slurmctld knew before its boot is
locked by the bridge's previous pass; a bridge started with the same `--marker-dir` (shared storage, such as the
cluster's FSx) also locks a marked node at registration before the controller has recorded it.

`hpdhc gate slurm-conf` prints the slurm.conf lines the gate needs: none, so it prints nothing; it exists so an
admin's automation has one place to ask.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hyperpod_dhc.hpdhc import bridge
from hyperpod_dhc.hpdhc.client import ApiError, OperatorClient, add_api_options
from hyperpod_dhc.hpdhc.document import isolating
from hyperpod_dhc.hpdhc.scontrol import OWNED_PREFIX, Scontrol, Slurm, SlurmError, SlurmNode, lock_name

BOOT_REASON = OWNED_PREFIX + "wait booting, deep health check not passed yet"
DEFAULT_WAIT_S = 60.0
GATE_SCONTROL_TIMEOUT_S = 10.0  # per scontrol call: a slow slurmctld costs the launch at most --wait, never more
MARKER_DIR = "/var/lib/hpdhc-gate"

log = logging.getLogger("hpdhc.gate")


def boot_changes(node: SlurmNode, isolates: bool | None) -> list[str] | str:
    """The label node-boot puts on the node, [] for none, or (a str) why the node is left as it is."""
    if isolates is False:
        return "its group does not isolate new nodes"
    if node.drained and node.owned:
        return []  # already ours: the bridge decides
    if not node.lockable:
        return f"held by someone else ({node.claim})"
    return ["State=DRAIN", f"Reason={BOOT_REASON}"]


def node_boot(
    name: str,
    slurm: Slurm,
    isolates: Callable[[SlurmNode], bool | None],
    cluster: str | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    marker_dir: Path | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Lock and label this node if it is ours to; always EXIT_OK (a marker and a log line say what was not done)."""
    lock = lock_name(cluster) if cluster else None
    deadline = time.monotonic() + wait_s
    while True:
        try:
            node = slurm.nodes([name], lock=lock).get(name)
        except SlurmError as err:
            node, problem = None, str(err)
        else:
            problem = f"slurmctld does not know node {name} yet"
        if node is not None:
            break
        if time.monotonic() >= deadline:
            _mark(marker_dir, name, cluster, f"{problem} after {wait_s:g} s")
            return bridge.EXIT_OK
        sleep(min(5.0, max(0.0, deadline - time.monotonic())))
    change = boot_changes(node, isolates(node))
    if isinstance(change, str):
        log.warning("node %s left as it is: %s", name, change)
        return bridge.EXIT_OK
    try:
        if lock is not None and not node.locked:
            current = slurm.lock(lock)
            slurm.set_lock(lock, sorted({*(current.nodes if current else ()), name}), current)
            log.info("node %s locked in %s until its deep health check passes", name, lock)
        if change and "FUTURE" in node.states:
            # Measured on 22.05: a FUTURE node registers DRAIN with its reason gone, a drain no one could call ours.
            log.info("node %s is FUTURE: locked, not labelled (the bridge labels it once it registered)", name)
        elif change:
            slurm.update([name], change)
            log.info("node %s drained until its deep health check passes: %s", name, BOOT_REASON)
    except SlurmError as err:
        _mark(marker_dir, name, cluster, str(err))
    if lock is None:
        log.warning("no --cluster: node %s is drained but not locked (a RESUME would lift it)", name)
    return bridge.EXIT_OK


def _mark(marker_dir: Path | None, name: str, cluster: str | None, why: str) -> None:
    """What the gate could not do, left for the bridge (and an admin): one line of JSON, `<marker_dir>/<node>`."""
    log.warning("node %s not locked by the gate: %s; the bridge locks it (the launch goes on)", name, why)
    if marker_dir is None:
        return
    try:
        marker_dir.mkdir(parents=True, exist_ok=True)
        line = {"node": name, "cluster": cluster, "at": time.time(), "why": why[:500]}
        (marker_dir / name).write_text(json.dumps(line) + "\n")
    except OSError as err:
        log.warning("marker %s/%s not written: %s", marker_dir, name, err)


def parser(prog: str = "hpdhc gate") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    conf = sub.add_parser("slurm-conf", help="print the slurm.conf lines the gate needs (none)")
    boot = sub.add_parser("node-boot", help="drain this node before its slurmd starts (lifecycle script)")
    for each in (conf, boot):
        each.add_argument("--cluster", help="the HyperPod cluster's name (with the API options: ask for opt-outs)")
        add_api_options(each)
        each.add_argument("--provisioning-parameters", type=Path, default=Path(bridge.PROVISIONING_PARAMETERS))
        each.add_argument("--scontrol", default="scontrol", metavar="PATH")
    boot.add_argument("--node", required=True, help="this node's Slurm name (its short hostname)")
    boot.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for slurmctld to know the node (default {DEFAULT_WAIT_S:g})",
    )
    boot.add_argument(
        "--marker-dir",
        type=Path,
        default=Path(MARKER_DIR),
        metavar="DIR",
        help=f"where a node the gate could not lock is marked (default {MARKER_DIR})",
    )
    return p


def main(argv: list[str] | None = None, prog: str = "hpdhc gate") -> int:
    args = parser(prog).parse_args(argv)
    bridge.configure_logging("INFO")
    if args.what == "slurm-conf":
        return bridge.EXIT_OK  # nothing: the drain at boot needs no slurm.conf line
    slurm = Scontrol(args.scontrol, timeout_s=GATE_SCONTROL_TIMEOUT_S)
    return node_boot(args.node, slurm, _isolating(args), args.cluster, args.wait, args.marker_dir)


def _isolating(args: argparse.Namespace) -> Callable[[SlurmNode], bool | None]:
    """Whether the node's group isolates, as the controller says; None (so: drain) when it cannot be asked."""

    def ask(node: SlurmNode) -> bool | None:
        if not (args.cluster and args.endpoint):
            return None
        try:
            partitions = bridge.load_partitions(args.provisioning_parameters)
            document = OperatorClient(args.endpoint, args.profile, args.region, args.stack).slurm_state(args.cluster)
            isolating_groups = frozenset(document["isolating_groups"])
        except (bridge.ConfigError, ApiError, KeyError, TypeError, ValueError) as err:
            log.warning("cannot ask the controller (%s): draining", err)
            return None
        return isolating(node.partitions, partitions, isolating_groups)

    return ask


if __name__ == "__main__":
    sys.exit(main())
