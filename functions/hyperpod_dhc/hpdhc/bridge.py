"""`hpdhc bridge`: the Slurm bridge, an agent on the cluster's Slurm controller node that makes Slurm do what the
controller decided: every `--interval` seconds one pass (`hyperpod_dhc.hpdhc.sync.sync_once`: desired state from
`GET /clusters/{cluster}/slurm`, Slurm's from `scontrol -o --future show node` and its reservations, the lock's node
list (the reservation `hpdhc-<cluster>`, hyperpod_dhc.hpdhc.lock) written once when it changes, one
`scontrol update NodeName=<nodes> ...` per distinct change, occupancy and claims to
`POST /clusters/{cluster}/slurm/occupancy`). It only ever writes its own reservation, drains, resumes and sets node
features: never `State=DOWN` or `FAIL`, never `scancel`, so a running job is never killed.

The agent around the pass: the partition -> instance group map (HyperPod's provisioning_parameters.json), one
bridge per cluster on a machine (a pid file in `--state-dir`, where the last applied document, the lock as this
bridge left it and its identity are kept too), exit codes
that tell auth, API, Slurm and configuration apart, journald priorities, `--dry-run`. A brand-new node is drained
before its slurmd starts by `hpdhc gate node-boot` (hyperpod_dhc.hpdhc.gate); only the bridge holding the cluster's
fence (`--take-over` takes it) releases a node from the lock. Standard library and boto3/botocore only (through
`hyperpod_dhc.hpdhc.client`); Python 3.10 (Ubuntu 22.04's python3) and newer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hyperpod_dhc.hpdhc.apply import quoted
from hyperpod_dhc.hpdhc.client import ApiError, OperatorClient, add_api_options
from hyperpod_dhc.hpdhc.document import Memory
from hyperpod_dhc.hpdhc.outcome import (
    EXIT_API,
    EXIT_AUTH,
    EXIT_CONFIG,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_SLURM,
)
from hyperpod_dhc.hpdhc.scontrol import Scontrol, Slurm
from hyperpod_dhc.hpdhc.sync import ApiController, Controller, sync_once

PROVISIONING_PARAMETERS = "/opt/ml/config/provisioning_parameters.json"
STATE_DIR = "/var/lib/hpdhc-bridge"
DEFAULT_INTERVAL_S = 60.0
INTERVAL_BOUNDS_S = (10.0, 600.0)  # a controller-suggested interval is kept within these
AUTH_FAILURES_TO_EXIT = 3  # a daemon whose every call is refused this many passes running exits (systemd shows it)
__all__ = ["EXIT_API", "EXIT_AUTH", "EXIT_CONFIG", "EXIT_LOCKED", "EXIT_OK", "EXIT_PARTIAL", "EXIT_SLURM"]

log = logging.getLogger("hpdhc.bridge")


# ---------------------------------------------------------------------- the agent


class ConfigError(RuntimeError):
    """The bridge's own configuration is missing or unreadable."""


def load_partitions(path: Path) -> dict[str, str]:
    """Slurm partition -> HyperPod instance group, from the lifecycle's provisioning_parameters.json."""
    try:
        parameters = json.loads(path.read_text())
        return {g["partition_name"]: g["instance_group_name"] for g in parameters.get("worker_groups") or []}
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: pass --provisioning-parameters (partition -> instance group)") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise ConfigError(f"{path} unreadable ({err!r:.200})") from None


@contextlib.contextmanager
def single_instance(state_dir: Path, cluster: str) -> Iterator[None]:
    """One bridge per cluster on this machine: a second one exits (EXIT_LOCKED) instead of double-applying."""
    import fcntl  # POSIX only, like the bridge

    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / f"{cluster}.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            raise _Locked(f"another bridge for {cluster} runs here (pid {lock.read().strip() or '?'})") from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        yield


class _Locked(RuntimeError):
    pass


def run(
    cluster: str,
    controller: Controller,
    slurm: Slurm,
    partitions_to_groups: Mapping[str, str],
    interval_s: float | None = None,
    once: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    memory: Memory | None = None,
    dry_run: bool = False,
    marker_dir: Path | None = None,
) -> int:
    """Sync every interval (`interval_s`, else the controller's suggestion, else 60 s) until stopped; with `once`
    (or `dry_run`), one pass whose exit code says what went wrong. A daemon whose calls are refused
    AUTH_FAILURES_TO_EXIT passes running exits EXIT_AUTH, so systemd shows it failed."""
    memory = memory if memory is not None else Memory()
    refused = 0
    while True:
        started = time.monotonic()
        marked = markers(marker_dir)
        result = sync_once(cluster, controller, slurm, partitions_to_groups, memory, dry_run, marked)
        if memory.document is not None and not dry_run:
            clear_markers(marker_dir, marked & memory.document.wanted.keys())
        if dry_run:
            for command in result.commands:
                print(" ".join(quoted(a) for a in command))
            for name, claim in sorted(result.held.items()):
                print(f"# {name}: held by someone else ({claim}): left as it is")
            print(f"# {len(result.applied)} node(s) would change in {len(result.commands)} scontrol update(s)")
        level = logging.INFO if result.applied or result.errors else logging.DEBUG
        log.log(
            level,
            "synced %s: %d node(s) updated in %d call(s), %d held by others, %d reported, %d error(s)",
            cluster,
            len(result.applied),
            len(result.commands),
            len(result.held),
            len(result.reported),
            len(result.errors),
        )
        if once or dry_run:
            return result.failure or (EXIT_PARTIAL if result.errors else EXIT_OK)
        refused = refused + 1 if result.failure == EXIT_AUTH else 0
        if refused >= AUTH_FAILURES_TO_EXIT:
            log.critical("the controller refused %d passes in a row: exiting (check the role and its policy)", refused)
            return EXIT_AUTH
        period = interval_s or min(
            max(result.interval_s or DEFAULT_INTERVAL_S, INTERVAL_BOUNDS_S[0]), INTERVAL_BOUNDS_S[1]
        )
        sleep(max(0.0, period - (time.monotonic() - started)))


def markers(marker_dir: Path | None) -> frozenset[str]:
    """The nodes the boot gate could not lock (`hpdhc gate node-boot --marker-dir`): one file each, named for it."""
    if marker_dir is None:
        return frozenset()
    try:
        return frozenset(p.name for p in marker_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    except OSError:
        return frozenset()


def clear_markers(marker_dir: Path | None, names: Iterable[str]) -> None:
    """The controller lists these nodes now: its document decides, the markers are done."""
    for name in names:
        if marker_dir is not None:
            with contextlib.suppress(OSError):
                (marker_dir / name).unlink()


def parser(prog: str = "hpdhc bridge") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="The Slurm bridge: every interval, drain, resume and label this cluster's Slurm nodes as the "
        "controller's API says, and report which of them run jobs. Runs on the Slurm controller node.",
        epilog="Exit codes: 0 done; 1 some updates refused; 2 usage; 3 refused by the API (403, no credentials); "
        "4 API unreachable or answering errors; 5 slurmctld unreachable; 6 configuration; 7 another bridge runs.",
    )
    p.add_argument("--cluster", required=True, help="the HyperPod cluster's name")
    add_api_options(p)
    p.add_argument(
        "--interval",
        type=_seconds,
        metavar="SECONDS",
        help="seconds between passes (default: the controller's, else 60)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit with a code that says what went wrong")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="one pass that changes nothing: print the scontrol updates a pass would run, and the held nodes",
    )
    p.add_argument(
        "--provisioning-parameters",
        type=Path,
        default=Path(PROVISIONING_PARAMETERS),
        metavar="PATH",
        help=f"HyperPod's lifecycle parameters: partition -> instance group (default {PROVISIONING_PARAMETERS})",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path(STATE_DIR),
        metavar="DIR",
        help=f"the pid file, the last applied document, the lock as last written, this bridge's identity (default "
        f"{STATE_DIR})",
    )
    p.add_argument(
        "--marker-dir",
        type=Path,
        metavar="DIR",
        help="the boot gate's markers (hpdhc gate node-boot --marker-dir on shared storage): a marked node is locked",
    )
    p.add_argument(
        "--take-over",
        action="store_true",
        help="take the cluster's fence from the bridge holding it (a replaced controller node whose old bridge "
        "may still run): only the fence holder releases nodes from the lock",
    )
    p.add_argument("--scontrol", default="scontrol", metavar="PATH", help="the scontrol binary")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text}")
    return seconds


class _Journal(logging.Formatter):
    """`<N>` syslog priority prefixes when stderr goes to journald (JOURNAL_STREAM set): `journalctl -p err` works."""

    PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}

    def format(self, record: logging.LogRecord) -> str:
        return f"<{self.PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    plain = "%(levelname)s %(message)s"  # journald timestamps each line itself
    handler.setFormatter(_Journal(plain) if os.environ.get("JOURNAL_STREAM") else logging.Formatter(plain))
    logging.basicConfig(level=level, handlers=[handler], force=True)


def main(argv: list[str] | None = None, prog: str = "hpdhc bridge") -> int:
    args = parser(prog).parse_args(argv)
    configure_logging(args.log_level)
    signal.signal(signal.SIGTERM, _stop)
    try:
        partitions = load_partitions(args.provisioning_parameters)
        client = OperatorClient(args.endpoint, args.profile, args.region, args.stack)
    except (ConfigError, ApiError, BotoCoreError, ClientError) as err:
        log.error("configuration: %s", err)
        return EXIT_CONFIG
    log.info(
        "bridge for %s: API %s (%s), partitions %s%s",
        args.cluster,
        client.endpoint,
        client.region,
        partitions or "-",
        " (dry run: nothing changes)" if args.dry_run else "",
    )
    controller, slurm = ApiController(client), Scontrol(args.scontrol)
    try:
        if args.dry_run:  # changes nothing, so takes no pid file and writes no state
            memory = Memory.load(args.state_dir / f"{args.cluster}.json")
            memory.path = None
            return run(args.cluster, controller, slurm, partitions, memory=memory, dry_run=True)
        with single_instance(args.state_dir, args.cluster):
            memory = Memory.load(args.state_dir / f"{args.cluster}.json")
            memory.take_over = args.take_over
            log.info("this bridge is %s%s", memory.bridge, " (taking the fence over)" if args.take_over else "")
            return run(
                args.cluster,
                controller,
                slurm,
                partitions,
                args.interval,
                args.once,
                memory=memory,
                marker_dir=args.marker_dir,
            )
    except _Locked as err:
        log.error("%s", err)
        return EXIT_LOCKED
    except OSError as err:
        log.error("state dir %s: %s", args.state_dir, err)
        return EXIT_CONFIG
    except (KeyboardInterrupt, _Stopped):
        log.info("stopped")
        return EXIT_OK


class _Stopped(Exception):
    pass


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped


if __name__ == "__main__":
    sys.exit(main())
