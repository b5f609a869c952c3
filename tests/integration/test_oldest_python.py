"""The Slurm bridge's tests (tests/bridge) on the oldest Python the wheel supports: 3.10, HyperPod's Ubuntu 22.04
python3. `make install` builds .venv-py310 (the Makefile's oldest-python); while it exists the main interpreter's
pytest leaves tests/bridge to this test (tests/conftest.py), so their real-Slurm tests never run twice at once. The
run itself starts with the session, beside the other tests (tests/oldest_python.py); this test, collected last,
waits for its end.
"""

import os
import subprocess
from pathlib import Path

import pytest

from tests import oldest_python

OLDEST_PYTHON = (3, 10)
TIMEOUT_S = 1800
TAIL_LINES = 80

pytestmark = [pytest.mark.xdist_group("oldest_python"), pytest.mark.last]


def test_the_bridge_tests_pass_on_the_oldest_supported_python():
    python = oldest_python.VENV / "bin" / "python"
    if not oldest_python.installed():
        message = f"no {oldest_python.VENV.name} (`make install` builds it from a Python 3.10): tests/bridge runs here"
        if os.environ.get("HPDHC_REQUIRE_SLURM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    version = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, check=True
    )
    assert tuple(map(int, version.stdout.split())) == OLDEST_PYTHON, version.stdout
    # Started with the session (tests/conftest.py), unless this session could not tell it would run this test.
    started = os.environ.get(oldest_python.RUN_ENV)
    run = Path(started) if started else oldest_python.start()
    try:
        rc, output = oldest_python.result(run, TIMEOUT_S)
    finally:
        if not started:
            oldest_python.stop(run)
    command = " ".join(oldest_python.COMMAND)
    if rc is None:
        pytest.fail(f"{command}: over {TIMEOUT_S} s\n{tail(output)}")
    assert rc == 0, f"{command} on {python}: rc {rc}\n{tail(output)}"


def tail(output: str) -> str:
    """The child's failures section (its tracebacks), then its last lines: a logging error printed after the
    failure must not push the failure itself out of sight."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("=") and " FAILURES " in line), None)
    failures = lines[start : start + 4 * TAIL_LINES] if start is not None else []
    return "\n".join([*failures, *(["..."] if failures else []), *lines[-TAIL_LINES:]])
