"""jsii and the CDK CLI run on Node.js 22 LTS (make install's, in the venv: tests/harness/node.py), and a synth says
nothing about the node it runs on: no end-of-life warning, and nothing silencing one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.node import NODE_MAJOR, VENV_BIN

REPO = Path(__file__).resolve().parents[2]
CDK = REPO / ".venv" / "cdk-cli" / "node_modules" / ".bin" / "cdk"
# What jsii's runtime prints about the node it starts on (end-of-life, deprecated, untested, known broken), each
# with the variable that would silence it.
NODE_WARNING = re.compile(r"end-of-life|not been tested with node|known compatibility issues|SILENCE_WARNING", re.I)


def jsii_node() -> str:
    """The node jsii's kernel spawns: JSII_NODE, else `node` from PATH (jsii/_kernel/providers/process.py)."""
    node = shutil.which(os.environ.get("JSII_NODE", "node"))
    assert node, f"no node on PATH: `make install` links Node.js {NODE_MAJOR} LTS into {VENV_BIN}"
    return node


def test_jsii_runs_on_node_22_lts() -> None:
    node = jsii_node()
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith(f"v{NODE_MAJOR}."), (
        f"jsii would run on {node} {version}, not Node.js {NODE_MAJOR} LTS: `make install` links it into {VENV_BIN}"
    )


def test_the_cdk_cli_runs_on_the_same_node() -> None:
    if not CDK.exists():
        pytest.skip("no CDK CLI: `make install` npm-installs it")
    # The CLI's script asks PATH for node, as jsii does: the venv's, first on PATH under make and in the tests.
    assert CDK.read_text().splitlines()[0] == "#!/usr/bin/env node"
    assert shutil.which("node") == jsii_node()


def test_nothing_silences_node_warnings() -> None:
    assert not [name for name in os.environ if name.startswith("JSII_SILENCE_WARNING")]
    sources = [REPO / "Makefile", REPO / "cdk.json", REPO / ".ci" / "run"]
    sources += [p for tree in ("infra", "functions", "tests") for p in (REPO / tree).rglob("*.py")]
    here = Path(__file__).resolve()
    silencing = [str(p.relative_to(REPO)) for p in sources if p != here and "JSII_SILENCE" in p.read_text()]
    assert not silencing


def test_a_synth_prints_no_node_warning(tmp_path: Path) -> None:
    # A fresh interpreter: jsii warns once, as its runtime starts (the session's synth started it long before).
    synth = "import sys, aws_cdk as cdk; app = cdk.App(outdir=sys.argv[1]); cdk.Stack(app, 'S'); app.synth()"
    result = subprocess.run(
        [sys.executable, "-c", synth, str(tmp_path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "S.template.json").exists()
    assert not NODE_WARNING.search(result.stdout + result.stderr), result.stderr
