"""The wheel as `pip wheel` builds it from a checkout, for the tests that inspect or install it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# What the wheel's build reads: the two portions of the namespace and pyproject.toml (and the licence it names).
BUILD_SOURCES = ("functions", "infra", "pyproject.toml")
PIP = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]


def clean_env() -> dict[str, str]:
    """This process's environment without what would put a checkout or this venv on a child's path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def build_wheel(tmp: Path) -> Path:
    """`pip wheel` of a copy of the sources (setuptools writes build/ and *.egg-info beside them); setuptools comes
    from pip's configured index, as in `make install`."""
    source, dist = tmp / "source", tmp / "dist"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for part in (*BUILD_SOURCES, *(p.name for p in REPO_ROOT.glob("LICENSE*"))):
        if (REPO_ROOT / part).is_dir():
            shutil.copytree(REPO_ROOT / part, source / part, ignore=ignore)
        else:
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO_ROOT / part, source / part)
    subprocess.run([*PIP, "wheel", "--no-deps", "-w", str(dist), str(source)], env=clean_env(), check=True)
    (built,) = dist.glob("hyperpod_dhc-*.whl")
    return built


def fresh_venv(path: Path, python: str | Path = sys.executable) -> Path:
    """A venv without pip of its own (ensurepip alone takes ~8 s): this venv's pip installs into it. Its python."""
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(path)], env=clean_env(), check=True)
    return path / "bin" / "python"


def purelib(python: Path) -> Path:
    """Where `python` installs pure-Python packages."""
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(subprocess.check_output([str(python), "-c", code], text=True, env=clean_env()).strip())
