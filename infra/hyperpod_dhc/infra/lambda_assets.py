"""What the controller's Lambdas run: the runtime they are built for, the code asset (the ``deephealth`` package
as infra imports it, a checkout's ``functions/hyperpod_dhc/deephealth`` or the installed wheel's, nothing else) and
``DependenciesLayer``, the ``lambda`` extra of ``pyproject.toml`` installed by a local ``pip install`` (no Docker).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

import hyperpod_dhc.deephealth
from hyperpod_dhc.infra.controller_config import ASSET_EXCLUDE, REPO_ROOT

RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
PYTHON_VERSION = "3.13"  # must match RUNTIME: the layer holds cp313 wheels (pydantic-core)
PIP_PLATFORM = "manylinux2014_aarch64"  # must match ARCHITECTURE
# Also manylinux_2_28 wheels (google-re2 ships no older): the Python 3.13 runtime's Amazon Linux 2023 has glibc 2.34.
NEWER_MANYLINUX = "manylinux_2_28_"
PYPROJECT = REPO_ROOT / "pyproject.toml"
DISTRIBUTION = "hyperpod-dhc"
LAMBDA_EXTRA = "lambda"  # the layer's pins
LAMBDA_PACKAGE = "hyperpod_dhc.deephealth"  # the code asset: this package alone
_EXTRA_MARKER = re.compile(rf'\s*;\s*extra\s*==\s*"{LAMBDA_EXTRA}"\s*$')


def lambda_requirements() -> list[str]:
    """The layer's pins, the ``lambda`` extra: in a checkout pyproject.toml's, the one place they are written;
    installed, the distribution's metadata (a wheel carries its extras), so both read the same list."""
    project = tomllib.loads(PYPROJECT.read_text()).get("project", {}) if PYPROJECT.is_file() else {}
    if project.get("name") == DISTRIBUTION:
        return list(project["optional-dependencies"][LAMBDA_EXTRA])
    requires = importlib.metadata.requires(DISTRIBUTION) or []
    return [_EXTRA_MARKER.sub("", requirement) for requirement in requires if _EXTRA_MARKER.search(requirement)]


@functools.cache  # one copy per process; removed at exit, once synth has staged it into the cloud assembly
def _lambda_code_copy() -> tempfile.TemporaryDirectory[str]:
    copy = tempfile.TemporaryDirectory(prefix="hyperpod-dhc-lambda-code-")
    source = Path(hyperpod_dhc.deephealth.__file__).resolve().parent
    # hyperpod_dhc/ without an __init__, as in the wheel: the handlers import hyperpod_dhc.deephealth.*
    shutil.copytree(source, Path(copy.name, *LAMBDA_PACKAGE.split(".")), ignore=shutil.ignore_patterns(*ASSET_EXCLUDE))
    return copy


def lambda_code_dir() -> Path:
    """A directory holding exactly the ``hyperpod_dhc.deephealth`` package infra imports, without bytecode: the code
    asset (``hyperpod_dhc/deephealth/...``).

    A copy, because where the package lives holds more: a checkout's ``functions/`` the operator CLI, an installed
    wheel's site-packages everything else. The asset hash is a hash of relative paths and contents, so a copy hashes
    as ``functions/`` did with ``ASSET_EXCLUDE`` (an asset staged in place, ``aws:cdk:disable-asset-staging``, would
    point at the copy, which is gone when the app exits).
    """
    return Path(_lambda_code_copy().name)


@functools.cache  # asked once per process: every synth builds the layer construct
def runtime_python() -> str | None:
    """A CPython of the Lambda runtime's minor version on this machine (PATH, then pyenv), or None.

    Lambda's /opt is read-only, so a layer without bytecode is compiled from source on every cold start (about
    twice the import time, docs/BENCHMARKS.md). Bytecode is specific to the minor version, so only a 3.13
    interpreter can write what the 3.13 runtime reads.
    """
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates: list[str | None] = [
        str(d / "bin" / f"python{PYTHON_VERSION}") for d in sorted(pyenv.glob(f"{PYTHON_VERSION}.*"))
    ]
    candidates.append(shutil.which(f"python{PYTHON_VERSION}"))  # may be a pyenv shim: asked below, like the rest
    for candidate in filter(None, candidates):
        try:
            answer = subprocess.run(
                [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
        except OSError:
            continue
        if answer.returncode == 0 and answer.stdout.strip() == PYTHON_VERSION:
            return candidate
    return None


def compile_bytecode(python: str, directory: Path) -> None:
    """Write `python`'s bytecode for every module under `directory`, valid without checking the sources.

    unchecked-hash: valid whatever the files' mtimes in the zip; the layer never changes in place. A file that
    does not compile (none today) is compiled at import instead, as without this step.
    """
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", str(directory)],
        capture_output=True,
        check=False,
    )


@jsii.implements(ILocalBundling)
class PipInstall:
    """Local bundling: ``pip install`` Linux ARM64 CPython 3.13 wheels into ``<output>/python``, then, when a
    3.13 interpreter is at hand, compile them to bytecode the runtime reads without checking sources.

    Raises instead of returning False, so CDK never falls back to Docker (there is none here).
    """

    def __init__(self, requirements: Sequence[str], compiler: str | None = None, platform: str = PIP_PLATFORM) -> None:
        self.requirements = list(requirements)
        self.compiler = compiler
        self.platform = platform  # another platform only for measuring here (tests/bench/coldstart.py)

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_: Any) -> bool:
        command = [
            sys.executable, "-m", "pip", "install",
            "--quiet", "--disable-pip-version-check", "--no-compile",
            "--target", str(Path(output_dir) / "python"),
            "--platform", self.platform,
            "--platform", self.platform.replace("manylinux2014_", NEWER_MANYLINUX),
            "--only-binary=:all:",
            "--python-version", PYTHON_VERSION,
            "--implementation", "cp",
            *self.requirements,
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building the dependency layer failed (pip exit {result.returncode}):\n{result.stderr}")
        if self.compiler:
            compile_bytecode(self.compiler, Path(output_dir) / "python")
        return True


class DependenciesLayer(lambda_.LayerVersion):
    """The ``lambda`` extra of pyproject.toml (boto3, powertools[parser], pydantic)."""

    def __init__(self, scope: Construct, id: str, *, requirements: Sequence[str] | None = None) -> None:
        requirements = list(lambda_requirements() if requirements is None else requirements)
        compiler = runtime_python()
        # The pinned requirement list, the target platform and whether bytecode is included fully determine the
        # bundle, so they are its hash: no fingerprinting of the source directory, and an unchanged layer is not
        # rebuilt.
        bundle = [requirements, PIP_PLATFORM, PYTHON_VERSION, "bytecode" if compiler else "source"]
        asset_hash = hashlib.sha256(json.dumps(bundle).encode()).hexdigest()
        super().__init__(
            scope,
            id,
            code=lambda_.Code.from_asset(
                str(Path(__file__).resolve().parent),  # unused by the local bundler (it reads no source files)
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=asset_hash,
                bundling=BundlingOptions(
                    image=RUNTIME.bundling_image,  # required by the API; never used
                    local=PipInstall(requirements, compiler),
                ),
            ),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=f"hyperpod-dhc runtime dependencies: {', '.join(requirements)}"[:256],
        )
