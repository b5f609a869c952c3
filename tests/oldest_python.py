"""The Slurm bridge's tests (tests/bridge) on the oldest Python the wheel supports, run in the background.

That run is two minutes of mostly waiting on Slurm's daemons (a quarter of a core). Run as a test of its own it
held one of `make test`'s two workers for all of it; started when the session starts (tests/conftest.py), it
shares the cores with the workers, and tests/integration/test_oldest_python.py, collected last, collects its
result. Plain on purpose (the standard library): tests/conftest.py imports it, and the oldest-Python venv loads
that too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-py310"
TEST_FILE = ROOT / "tests" / "integration" / "test_oldest_python.py"
RUN_ENV = "HPDHC_OLDEST_PYTHON_RUN"  # the run directory, for the session's workers (they inherit it)
COMMAND = ("-m", "pytest", "tests/bridge", "-q", "-p", "no:cacheprovider")
STOP_GRACE_S = 30
# The wrapper writes the exit status once the run has ended (`rc` appears whole, by a rename).
_WRAPPER = '"$@" > "$0/output" 2>&1; echo $? > "$0/rc.part" && mv "$0/rc.part" "$0/rc"'


def installed() -> bool:
    return (VENV / ".installed").exists()


def start() -> Path:
    """Start the run; returns its directory (its output, its pid, and its exit status once it ends)."""
    run = Path(tempfile.mkdtemp(prefix="hpdhc-oldest-python-"))
    # Not the session's xdist identity nor its own run directory: the inner pytest is a session of its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST", RUN_ENV))}
    process = subprocess.Popen(
        ["sh", "-c", _WRAPPER, str(run), str(VENV / "bin" / "python"), *COMMAND],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: stopped whole (`stop`), and no terminal's Ctrl-C reaches it
    )
    (run / "pid").write_text(str(process.pid))
    (run / "started").write_text(repr(time.time()))
    return run


def result(run: Path, timeout_s: float) -> tuple[int | None, str]:
    """(exit status, output) once the run ends; (None, the output so far) if `timeout_s` after its start it has not."""
    deadline = float((run / "started").read_text()) + timeout_s
    while not (run / "rc").exists() and time.time() < deadline:
        time.sleep(0.5)
    output = (run / "output").read_text(errors="replace") if (run / "output").exists() else ""
    if not (run / "rc").exists():
        return None, output
    return int((run / "rc").read_text()), output


def stop(run: Path) -> None:
    """End a run that has not ended (a session interrupted, or one that deselected the test) and remove it. SIGINT
    first: pytest's session teardown stops the Slurm daemons it started."""
    if not (run / "rc").exists() and (run / "pid").exists():
        group = int((run / "pid").read_text())
        for sig, wait_s in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 5)):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while not (run / "rc").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            if (run / "rc").exists():
                break
    shutil.rmtree(run, ignore_errors=True)


def selected(args: list[str], invoked_in: Path, filtering: bool) -> bool:
    """Whether a session with these path arguments (relative to `invoked_in`) runs the test, as far as the paths
    tell: never with -k, -m or the like (`filtering`)."""
    if filtering:
        return False
    for arg in args:
        path = (invoked_in / arg.split("::")[0]).resolve()
        if path == TEST_FILE or path in TEST_FILE.parents:
            return True
    return False
