"""`hpdhc gate`: what keeps a new node from taking a job in the seconds between its slurmd registering and the
bridge's next pass (Slurm starts a pending job within about 2 s of a node registering; polling cannot close that).

`hpdhc gate node-boot --node NAME` is what a node's lifecycle script runs before it starts slurmd: it drains the
node with our reason (`hpdhc:wait`), so the node registers drained; the bridge resumes it once the controller says
it passed (or its group does not isolate new nodes). It needs no API: without an answer the drain is the safe
side. With the API options, it asks the controller whether the node's group isolates new nodes and does nothing for
one that does not (an operator's opt-out). It never touches a node someone else holds (an admin's DOWN or DRAIN,
HyperPod's `Action:*`): only Slurm's own marks of a node that is not up yet (no reason or `Not responding`, states
DOWN / UNKNOWN / NOT_RESPONDING / IDLE) are replaced. A node slurmctld does not know yet is retried until
`--wait` runs out, then the command fails (exit 5), so a lifecycle script under `set -e` stops before slurmd.

`hpdhc gate slurm-conf` prints the slurm.conf lines the gate needs: none (the drain at boot is enough), so it
prints nothing; it exists so an admin's automation has one place to ask.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hpdhc import bridge
from hpdhc.client import ApiError, OperatorClient, add_api_options
from hpdhc.scontrol import DRAIN_WORDS, FREE_STATE_WORDS, OWNED_PREFIX, Scontrol, Slurm, SlurmError, SlurmNode

BOOT_REASON = OWNED_PREFIX + "wait booting, deep health check not passed yet"
# What Slurm itself says of a node whose slurmd is not up: the only claim node-boot replaces.
_NOT_UP_WORDS = frozenset({"DOWN", "UNKNOWN", "NOT_RESPONDING"})
_NOT_UP_REASONS = frozenset({None, "Not responding"})
DEFAULT_WAIT_S = 120.0

log = logging.getLogger("hpdhc.gate")


def boot_changes(node: SlurmNode, isolating: bool | None) -> list[str] | str:
    """The update node-boot makes, [] for none, or (a str) why the node is left as it is."""
    if isolating is False:
        return "its group does not isolate new nodes"
    if node.drained and node.owned:
        return []  # already ours: the bridge decides
    foreign = [w for w in node.states if w not in FREE_STATE_WORDS | DRAIN_WORDS | _NOT_UP_WORDS]
    if foreign or node.drained or (node.reason not in _NOT_UP_REASONS and not node.owned):
        return f"held by someone else ({node.claim})"
    return ["State=DRAIN", f"Reason={BOOT_REASON}"]


def node_boot(
    name: str,
    slurm: Slurm,
    isolating: Callable[[SlurmNode], bool | None],
    wait_s: float = DEFAULT_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            node = slurm.nodes().get(name)
        except SlurmError as err:
            node, problem = None, str(err)
        else:
            problem = f"slurmctld does not know node {name} yet"
        if node is not None:
            break
        if time.monotonic() >= deadline:
            log.error("%s after %g s: not drained, do not start slurmd", problem, wait_s)
            return bridge.EXIT_SLURM
        sleep(5.0)
    change = boot_changes(node, isolating(node))
    if isinstance(change, str):
        log.warning("node %s left as it is: %s", name, change)
        return bridge.EXIT_OK
    if change:
        try:
            slurm.update([name], change)
        except SlurmError as err:
            log.error("%s: not drained, do not start slurmd", err)
            return bridge.EXIT_SLURM
        log.info("node %s drained until its deep health check passes: %s", name, BOOT_REASON)
    return bridge.EXIT_OK


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
    boot.add_argument("--wait", type=float, default=DEFAULT_WAIT_S, metavar="SECONDS")
    return p


def main(argv: list[str] | None = None, prog: str = "hpdhc gate") -> int:
    args = parser(prog).parse_args(argv)
    bridge.configure_logging("INFO")
    if args.what == "slurm-conf":
        return bridge.EXIT_OK  # nothing: the drain at boot needs no slurm.conf line
    return node_boot(args.node, Scontrol(args.scontrol), _isolating(args), args.wait)


def _isolating(args: argparse.Namespace) -> Callable[[SlurmNode], bool | None]:
    """Whether the node's group isolates, as the controller says; None (so: drain) when it cannot be asked."""

    def ask(node: SlurmNode) -> bool | None:
        if not (args.cluster and args.endpoint):
            return None
        try:
            partitions = bridge.load_partitions(args.provisioning_parameters)
            document = OperatorClient(args.endpoint, args.profile, args.region, args.stack).slurm_state(args.cluster)
            isolating = frozenset(document["isolating_groups"])
        except (bridge.ConfigError, ApiError, KeyError, TypeError, ValueError) as err:
            log.warning("cannot ask the controller (%s): draining", err)
            return None
        groups = [partitions.get(p) for p in node.partitions]
        if not groups or not all(groups):
            return None
        return any(g in isolating for g in groups)

    return ask


if __name__ == "__main__":
    sys.exit(main())
