"""A real Slurm (Debian's 22.05 packages) for the Slurm bridge's tests: munged, a slurmctld and three slurmd on
loopback, everything (config, keys, sockets, state, logs) in one temporary directory, found through $SLURM_CONF.

Nodes carry HyperPod's names (`ip-10-0-0-N`, the short private DNS name); partition `dev` stands for instance group
`p5-workers`, partition `cpu` for `cpu-workers` (PROVISIONING_PARAMETERS, the lifecycle file's shape). Without the
binaries (or root: SlurmUser=root) the tests skip, unless HPDHC_REQUIRE_SLURM=1 (CI), where they fail.

Every daemon dies with the test session: SIGTERM then SIGKILL at teardown, PR_SET_PDEATHSIG if the session itself
is killed, and any process still naming the temporary directory (a job's `sleep`) is killed at the end. A session
killed outright (no teardown) leaves its jobs' processes and directory behind: the next session reaps them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hyperpod_dhc.hpdhc.scontrol import Scontrol, SlurmNode, parse_reservations

NODES = {"ip-10-0-0-1": "dev", "ip-10-0-0-2": "dev", "ip-10-0-0-3": "cpu"}  # node -> partition
FEATURES = {"ip-10-0-0-1": "gpu,efa", "ip-10-0-0-2": "gpu,efa", "ip-10-0-0-3": ""}  # as slurm.conf sets them
PROVISIONING_PARAMETERS = {
    "controller_group": "controller-machine",
    "worker_groups": [
        {"instance_group_name": "p5-workers", "partition_name": "dev"},
        {"instance_group_name": "cpu-workers", "partition_name": "cpu"},
    ],
}
BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "scancel")
REQUIRE = "HPDHC_REQUIRE_SLURM"
TMP, PREFIX = "/tmp", "hpdhc-slurm-"
STARTUP_TIMEOUT_S = 30.0
# A job that may run, waited for until it does: slurmctld's main scheduler runs at least every sched_interval (60 s
# by default) and backfill every bf_interval (30 s), and the pass a submit triggers can come before slurmctld has
# taken a RESUME or a reservation change made just before (a CI run timed out once at 30 s).
JOB_START_TIMEOUT_S = 90.0
ATTEMPTS = 3  # a port picked free can be taken before slurmctld binds it: start again on fresh ports

SLURM_CONF = """\
ClusterName=hpdhc-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=2
RebootProgram=/bin/true
{nodes}
{partitions}
"""


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    slurmd: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)  # node -> its running slurmd

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str) -> str:
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode:
            raise AssertionError(f"{' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
        """Slurm's state as the bridge reads it."""
        return Scontrol().nodes(names, lock)

    def line(self, node: str) -> str:
        """The node's raw `scontrol -o show node` line."""
        return self.run("scontrol", "-o", "show", "node", node).strip()

    def sbatch(self, node: str, seconds: int = 300) -> str:
        """A job pinned to `node`, once it runs: its id."""
        job = self.run(
            "sbatch", "--parsable", "-w", node, "-p", NODES[node], "-o", "/dev/null", "--wrap", f"sleep {seconds}"
        )
        job = job.strip().split(";")[0]
        self.wait_running(job, f"job {job} running on {node}")
        return job

    def wait_running(self, job: str, what: str) -> None:
        """Wait for a job that may run to run, as long as slurmctld's schedulers may take (JOB_START_TIMEOUT_S)."""
        wait_for(lambda: self.job_state(job) == "RUNNING", what, self.logs, timeout_s=JOB_START_TIMEOUT_S)

    def job_state(self, job: str) -> str:
        return self.run("squeue", "-h", "-j", job, "-o", "%T").strip()

    def stop_slurmd(self, name: str) -> None:
        """The node's slurmd stops (a node not up yet, or gone): slurmctld has not noticed until SlurmdTimeout."""
        process = self.slurmd.pop(name)
        _terminate(process)
        self.processes.remove(process)

    def start_slurmd(self, name: str, rebooted: bool = False) -> None:
        """The node's slurmd starts and registers (what a lifecycle script does last); `rebooted`: it says the node
        just rebooted (`slurmd -b`), what ends a `scontrol reboot` (RebootProgram is /bin/true here)."""
        extra = ["-b"] if rebooted else []
        self.slurmd[name] = _spawn(self, "slurmd", "-D", *extra, "-N", name, "-f", str(self.conf))

    def reset(self) -> None:
        """Back to the state slurm.conf gives: no jobs, no reservations, every slurmd up, every node IDLE with its
        configured features."""
        self.run("scancel", "--quiet", "--user=root")
        for reservation in parse_reservations(self.run("scontrol", "-o", "show", "reservation")):
            self.run("scontrol", "delete", f"ReservationName={reservation.name}")
        wait_for(lambda: not self.run("squeue", "-h", "-o", "%i").strip(), "no jobs left")
        for name in NODES:
            if name not in self.slurmd or self.slurmd[name].poll() is not None:
                self.slurmd.pop(name, None)
                self.start_slurmd(name)
        for name, node in self.nodes().items():
            if node.drained or {"DOWN", "FAIL"} & set(node.states):
                # A slurmd just started may register (ReturnToService=2 lifts its DOWN) before this runs, and
                # Slurm then refuses the resume: wait_idle below says whether the node came back.
                with contextlib.suppress(AssertionError):
                    self.run("scontrol", "update", f"NodeName={name}", "State=RESUME")
            if ",".join(node.available or ()) != FEATURES[name]:
                features = FEATURES[name]
                self.run(
                    "scontrol",
                    "update",
                    f"NodeName={name}",
                    f"AvailableFeatures={features}",
                    f"ActiveFeatures={features}",
                )
        self.wait_idle()

    def wait_idle(self) -> None:
        """Until every node is plain IDLE: a just-resumed node reads IDLE+NOT_RESPONDING until slurmctld pinged it."""
        wait_for(self.idle, f"nodes {', '.join(NODES)} IDLE", self.logs)

    def idle(self) -> bool:
        return all(_state(self.line(n)) == "IDLE" for n in NODES)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((self.root / "log").glob("*")))


def wait_for(
    condition: Callable[[], object],
    what: str,
    details: Callable[[], str] | None = None,
    timeout_s: float = STARTUP_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(AssertionError, OSError, subprocess.SubprocessError):
            if condition():
                return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}" + (f"\n{details()}" if details else ""))


def _state(line: str) -> str:
    return next((f.split("=", 1)[1] for f in line.split() if f.startswith("State=")), "")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One running Slurm per test session (per xdist worker); $SLURM_CONF points at it while it runs."""
    _require_slurm()
    _reap_stale()
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=TMP))  # short: socket paths are capped at 108 bytes
    root.chmod(0o755)  # munged refuses a socket directory others cannot traverse
    (root / "owner").write_text(str(os.getpid()))
    previous = os.environ.get("SLURM_CONF")
    cluster = SlurmCluster(root, root / "slurm.conf")
    try:
        _start(cluster)
        os.environ["SLURM_CONF"] = str(cluster.conf)
        yield cluster
    finally:
        _stop(cluster)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The session's Slurm, reset for this test."""
    slurm_cluster.reset()
    return slurm_cluster


def _require_slurm() -> None:
    missing = [b for b in BINARIES if not _which(b)]
    why = None
    if missing:
        why = f"Slurm/munge binaries not found: {', '.join(missing)} (`make slurm` installs Debian's as root)"
    elif os.geteuid() != 0:
        why = "a local Slurm with SlurmUser=root needs root"
    if why and os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{why}; {REQUIRE}=1 requires a real Slurm")
    if why:
        pytest.skip(why)


def _which(binary: str) -> str | None:
    return shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin:/bin")


def _start(cluster: SlurmCluster) -> None:
    root = cluster.root
    for sub in ("munge", "state", "run", "log", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    socket_path = root / "munge" / "munge.socket"
    files = {
        "socket": socket_path,
        "key-file": key,
        "pid-file": root / "run/munged.pid",
        "seed-file": root / "munge/seed",
        "log-file": root / "log/munged.log",
    }
    _spawn(cluster, "munged", "--foreground", *(f"--{option}={path}" for option, path in files.items()))
    wait_for(socket_path.exists, "munged's socket", cluster.logs)
    for _ in range(ATTEMPTS):
        ctld_port, *node_ports = _free_ports(1 + len(NODES))
        cluster.conf.write_text(_conf(root, ctld_port, node_ports))
        daemons = [_spawn(cluster, "slurmctld", "-D", "-i", "-f", str(cluster.conf))]
        cluster.slurmd = {name: _spawn(cluster, "slurmd", "-D", "-N", name, "-f", str(cluster.conf)) for name in NODES}
        daemons += cluster.slurmd.values()
        if _up(cluster, daemons, deadline=time.monotonic() + STARTUP_TIMEOUT_S / ATTEMPTS):
            return
        for daemon in daemons:
            _terminate(daemon)
            cluster.processes.remove(daemon)
    raise AssertionError(f"Slurm did not come up in {ATTEMPTS} attempts\n{cluster.logs()}")


def _up(cluster: SlurmCluster, daemons: list[subprocess.Popen[bytes]], deadline: float) -> bool:
    """Every node IDLE before the deadline; False at once when a daemon exits (its port was taken)."""
    while time.monotonic() < deadline and all(d.poll() is None for d in daemons):
        with contextlib.suppress(AssertionError, subprocess.SubprocessError):
            if cluster.idle():
                return True
        time.sleep(0.1)
    return False


def _conf(root: Path, ctld_port: int, node_ports: list[int]) -> str:
    nodes = "\n".join(
        f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=100"
        + (f" Feature={FEATURES[name]}" if FEATURES[name] else "")
        for name, port in zip(NODES, node_ports, strict=True)
    )
    partitions = "\n".join(
        f"PartitionName={p} Nodes={','.join(n for n, q in NODES.items() if q == p)} MaxTime=INFINITE State=UP"
        for p in dict.fromkeys(NODES.values())
    )
    return SLURM_CONF.format(root=root, ctld_port=ctld_port, nodes=nodes, partitions=partitions)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _spawn(cluster: SlurmCluster, binary: str, *args: str) -> subprocess.Popen[bytes]:
    with open(cluster.root / "log" / f"{binary}-{len(cluster.processes)}.out", "wb") as out:
        process = subprocess.Popen(
            [_which(binary) or binary, *args],
            env=cluster.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed as one at teardown
            preexec_fn=_die_with_parent,
        )
    cluster.processes.append(process)
    return process


def _terminate(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _stop(cluster: SlurmCluster) -> None:
    if any(p.poll() is None for p in cluster.processes[1:]):  # jobs first: their steps outlive slurmd otherwise
        with contextlib.suppress(AssertionError, OSError, subprocess.SubprocessError):
            cluster.run("scancel", "--quiet", "--user=root")
            wait_for(lambda: not cluster.run("squeue", "-h", "-o", "%i").strip(), "no jobs left", timeout_s=5)
    for process in reversed(cluster.processes):  # slurmd, slurmctld, then munged
        _terminate(process)
    _kill_leftovers(cluster.root)


def _reap_stale() -> None:
    """Processes and directories of sessions that died without their teardown (a live session's stay)."""
    for root in Path(TMP).glob(PREFIX + "*"):
        try:
            owner = int((root / "owner").read_text())
        except (OSError, ValueError):
            continue  # no owner written yet: a session starting
        if not _alive(owner):
            _kill_leftovers(root)
            shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive
    return True


def _kill_leftovers(root: Path) -> None:
    """SIGKILL whatever still names our directory (a job's process: its environment holds $SLURM_CONF)."""
    marker = f"{root}/".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (proc / "cmdline").read_bytes() or marker in (proc / "environ").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
