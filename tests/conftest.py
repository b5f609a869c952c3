"""Shared test setup: fake AWS credentials and region, Powertools test settings, event fixtures.

Plain on purpose (the standard library and pytest): the oldest-Python venv runs tests/bridge under it too.
"""

import json
import os
import sys
from pathlib import Path

import pytest

from tests import oldest_python
from tests.harness.node import venv_node_first

EVENTS = Path(__file__).parent / "events"

# With the oldest-Python venv built (`make install`), tests/bridge is its to run (tests/integration/
# test_oldest_python.py runs it there): any other interpreter leaves it alone, so that two runs of its real-Slurm
# tests never overlap. A path named on the command line inside tests/bridge is still collected.
BRIDGE_LEFT_TO_OLDEST_PYTHON = oldest_python.installed() and Path(sys.prefix).resolve() != oldest_python.VENV.resolve()
if BRIDGE_LEFT_TO_OLDEST_PYTHON:
    collect_ignore = ["bridge"]

os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_SECURITY_TOKEN="testing",
    AWS_SESSION_TOKEN="testing",
    AWS_DEFAULT_REGION="us-east-1",
    AWS_REGION="us-east-1",
    POWERTOOLS_SERVICE_NAME="hyperpod-dhc",
    POWERTOOLS_METRICS_NAMESPACE="HyperPodDHC",
    POWERTOOLS_LOG_LEVEL="WARNING",
)
# jsii and the CDK CLI on make install's Node.js 22 LTS, with or without make (tests/harness/node.py).
venv_node_first()


def load_event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def event():
    return load_event


@pytest.hookimpl(tryfirst=True)  # before xdist starts the workers: they inherit the run's directory
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not BRIDGE_LEFT_TO_OLDEST_PYTHON:
        return
    filtering = any(config.getoption(o, None) for o in ("keyword", "markexpr", "deselect", "lf", "collectonly"))
    if oldest_python.selected(config.args, config.invocation_params.dir, filtering):
        os.environ[oldest_python.RUN_ENV] = str(oldest_python.start())


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput") and (run := os.environ.pop(oldest_python.RUN_ENV, None)):
        oldest_python.stop(Path(run))


# A worker under `--dist loadgroup` names each grouped test `<id>@<group>`: that suffix is all the scheduler groups
# by. pytest 9.2 silently lost it (pytest-dev/pytest-xdist#1386) and each group spread over both workers, so the
# fixtures a group shares (the infra synth, a module's twin) were built on both. Such a test fails, saying why (a
# worker's collection error would reach the terminal only as an INTERNALERROR without its message).
GROUP_LOST = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The heaviest tests first (`heavy`, a stable sort: the rest keep their order): under xdist a worker that
    # starts a 3-minute test near the end leaves the other idle for those minutes. `make test` keeps this order
    # (--no-loadscope-reorder): by default xdist sends every group of several tests out first. A `last` test
    # collects what ran beside the session (tests/oldest_python.py): the later, the less it waits.
    items.sort(key=lambda item: (bool(item.get_closest_marker("last")), -_heavy_seconds(item)))
    if hasattr(config, "workerinput") and config.getvalue("loadgroup"):
        for item in items:
            # xdist's own rule for a suffix: an @ after any parametrize id's closing bracket.
            suffixed = item.nodeid.rfind("@") > item.nodeid.rfind("]")
            item.stash[GROUP_LOST] = bool(item.get_closest_marker("xdist_group")) and not suffixed


def _heavy_seconds(item: pytest.Item) -> float:
    mark = item.get_closest_marker("heavy")
    return 0.0 if mark is None else float(mark.kwargs.get("seconds", mark.args[0] if mark.args else 0))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.stash.get(GROUP_LOST, False):
        pytest.fail("--dist loadgroup lost this test's xdist_group: pytest and pytest-xdist disagree on node ids")
