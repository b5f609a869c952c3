"""The Slurm bridge's tests (tests/bridge) on the oldest Python the wheel supports: 3.10, HyperPod's Ubuntu 22.04
python3. `make install` builds .venv-py310 (the Makefile's oldest-python); while it exists the main interpreter's
pytest leaves tests/bridge to this test (tests/conftest.py), so their real-Slurm tests never run twice at once.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLDEST_PYTHON_VENV = ROOT / ".venv-py310"  # tests/conftest.py's
OLDEST_PYTHON = (3, 10)
TIMEOUT_S = 1800
TAIL_LINES = 80

pytestmark = [pytest.mark.xdist_group("oldest_python"), pytest.mark.heavy(150)]


def test_the_bridge_tests_pass_on_the_oldest_supported_python():
    python = OLDEST_PYTHON_VENV / "bin" / "python"
    if not (OLDEST_PYTHON_VENV / ".installed").exists():
        message = f"no {OLDEST_PYTHON_VENV.name} (`make install` builds it from a Python 3.10): tests/bridge runs here"
        if os.environ.get("HPDHC_REQUIRE_SLURM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    version = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True, check=True
    )
    assert tuple(map(int, version.stdout.split())) == OLDEST_PYTHON, version.stdout
    # This worker's xdist identity is not the inner run's.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
    command = [str(python), "-m", "pytest", "tests/bridge", "-q", "-p", "no:cacheprovider"]
    try:
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout.decode(errors="replace") if isinstance(timeout.stdout, bytes) else timeout.stdout or ""
        pytest.fail(f"{' '.join(command[1:])}: over {TIMEOUT_S} s\n{tail(output)}")
    assert done.returncode == 0, f"{' '.join(command[1:])} on {python}: rc {done.returncode}\n{tail(done.stdout)}"


def tail(output: str) -> str:
    """The child's failures section (its tracebacks), then its last lines: a logging error printed after the
    failure must not push the failure itself out of sight."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("=") and " FAILURES " in line), None)
    failures = lines[start : start + 4 * TAIL_LINES] if start is not None else []
    return "\n".join([*failures, *(["..."] if failures else []), *lines[-TAIL_LINES:]])
