"""One version, written once: pyproject.toml's. `hpdhc --version` prints it (the installed metadata) and the
changelog's newest release is it."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import pytest

from hyperpod_dhc.hpdhc import version as version_module
from hyperpod_dhc.hpdhc.cli import main
from tests.harness.synth import REPO_ROOT

PYPROJECT_VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_hpdhc_version_prints_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"hpdhc {importlib.metadata.version('hyperpod-dhc')}\n"


def test_the_installed_version_is_pyprojects() -> None:
    """`make install` reinstalls when pyproject.toml changes, so the venv's metadata follows the file."""
    assert version_module.version() == PYPROJECT_VERSION


def test_a_checkout_not_installed_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert version_module.version() == version_module.UNKNOWN


def test_the_changelog_releases_pyprojects_version() -> None:
    """Keep a Changelog: an [Unreleased] section, then the newest release, which is the version being built."""
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", changelog, re.M)
    assert headings[0] == ("Unreleased", "")
    assert headings[1][0] == PYPROJECT_VERSION and headings[1][1], headings[1]
