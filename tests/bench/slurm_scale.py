"""`make bench-slurm`: the Slurm bridge against a real slurmctld of 10,000 nodes (Debian's 22.05, as
tests/bridge/slurm_cluster.py starts it): a labelling pass, an idle pass, and a pass while slurmctld is gone.

The nodes (`ip-10-2-[0-39]-[1-250]`, one partition) have no slurmd: Slurm holds them UNKNOWN+NOT_RESPONDING, a
claim the bridge leaves alone. So the bench reads Slurm through `Registered`, which drops those two words, as if
each node's slurmd had registered; every update still goes to the real slurmctld. The controller is an in-process
document (the API's side is measured by tests/integration/test_slurm_routes.py's read counts).

    python -m tests.bench.slurm_scale [--nodes 10000] [--json]

Prints wall seconds per pass, scontrol calls, and nodes changed. Needs root and the Slurm packages (`make slurm`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from hyperpod_dhc.hpdhc.document import FEATURES, Memory
from hyperpod_dhc.hpdhc.scontrol import Scontrol, SlurmNode
from hyperpod_dhc.hpdhc.sync import sync_once
from tests.bridge import slurm_cluster as sc

WAIT = "hpdhc:wait deep health check not passed yet, i-0; hpdhc history bench n"
UNREGISTERED = frozenset({"UNKNOWN", "NOT_RESPONDING", "DOWN"})


class Registered(Scontrol):
    """The real scontrol, each node read as if its slurmd had registered (see the module doc); counts calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
        self.calls += 1
        out = {}
        for name, node in super().nodes(names, lock).items():
            states = tuple(w for w in node.states if w not in UNREGISTERED) or ("IDLE",)
            reason = None if node.reason == "Not responding" else node.reason
            out[name] = replace(node, states=states, reason=reason)
        return out

    def update(self, nodes: Any, args: list[str]) -> None:
        self.calls += 1
        super().update(nodes, args)


class Document:
    def __init__(self, names: list[str], reason: str | None, feature: str) -> None:
        entries = [{"node": n, "key": n, "reason": reason, "feature": feature} for n in names]
        self.document = {"cluster": "bench", "isolating_groups": ["p5"], "complete": True, "generation": 1.0,
                         "nodes": entries, "next_token": None}  # fmt: skip

    def desired(self, cluster: str, since: tuple[float, str] | None = None, status: Any = None) -> dict[str, Any]:
        return self.document

    def report(self, cluster: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
        return {"updated": 0, "unknown": [], "unknown_count": 0}


def conf(root: Path, port: int, names: list[str]) -> str:
    nodes = "\n".join(
        f"NodeName=ip-10-2-{i}-[1-250] NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 Feature=gpu"
        for i in range(len(names) // 250)
    )
    partitions = "PartitionName=dev Nodes=ALL MaxTime=INFINITE State=UP"
    return sc.SLURM_CONF.format(root=root, ctld_port=port, nodes=nodes, partitions=partitions)


def timed(fn: Any) -> tuple[float, Any]:
    started = time.monotonic()
    out = fn()
    return time.monotonic() - started, out


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--nodes", type=int, default=10_000, help="a multiple of 250")
    args.add_argument("--json", action="store_true")
    opts = args.parse_args(argv)
    names = [f"ip-10-2-{i // 250}-{i % 250 + 1}" for i in range(opts.nodes - opts.nodes % 250)]
    root = Path(tempfile.mkdtemp(prefix=sc.PREFIX, dir=sc.TMP))
    root.chmod(0o755)
    cluster = sc.SlurmCluster(root, root / "slurm.conf")
    for sub in ("munge", "state", "run", "log", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = root / "munge" / "munge.socket"
    figures: dict[str, Any] = {"nodes": len(names)}
    try:
        sc._spawn(cluster, "munged", "--foreground", f"--socket={socket_path}", f"--key-file={key}",
                  f"--pid-file={root}/run/munged.pid", f"--seed-file={root}/munge/seed",
                  f"--log-file={root}/log/munged.log")  # fmt: skip
        sc.wait_for(socket_path.exists, "munged's socket", cluster.logs)
        (port,) = sc._free_ports(1)
        cluster.conf.write_text(conf(root, port, names))
        os.environ["SLURM_CONF"] = str(cluster.conf)
        ctld = sc._spawn(cluster, "slurmctld", "-D", "-i", "-f", str(cluster.conf))
        sc.wait_for(lambda: len(Scontrol().nodes()) == len(names), f"{len(names)} nodes", cluster.logs, 120)
        figures["read_s"] = round(timed(lambda: Scontrol().nodes())[0], 3)
        slurm, memory = Registered(), Memory()
        wanted = Document(names, WAIT, FEATURES[0])
        for label in ("labelling", "idle"):
            slurm.calls = 0
            seconds, result = timed(lambda: sync_once("bench", wanted, slurm, {"dev": "p5"}, memory))
            figures[f"{label}_pass"] = {"seconds": round(seconds, 2), "scontrol_calls": slurm.calls,
                                        "nodes_changed": len(result.applied), "errors": len(result.errors)}  # fmt: skip
        # slurmctld gone after the read: the first update fails and the pass stops.
        nodes = slurm.nodes()
        sc._terminate(ctld)
        cluster.processes.remove(ctld)

        class Gone(Registered):
            def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
                return nodes

        gone, back = Gone(), Document(names, WAIT, FEATURES[0])
        seconds, result = timed(lambda: sync_once("bench", back, gone, {"dev": "p5"}, Memory()))
        figures["slurmctld_gone_pass"] = {"seconds": round(seconds, 2), "scontrol_calls": gone.calls,
                                          "errors": len(result.errors)}  # fmt: skip
    finally:
        for process in reversed(cluster.processes):
            sc._terminate(process)
        sc._kill_leftovers(root)
        shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if opts.json:
        print(json.dumps(figures, indent=2))
    else:
        for name, value in figures.items():
            print(f"{name:22} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
