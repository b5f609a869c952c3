"""cfn-lint on the synthesized template, statelint on the resolved round definition."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def tool(name: str) -> str:
    local = Path(sys.executable).with_name(name)
    found = str(local) if local.exists() else shutil.which(name)
    assert found, f"{name} is not installed"
    return found


def test_cfn_lint_reports_no_problems(template_json: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "HyperPodDhc.template.json"
    path.write_text(json.dumps(template_json, indent=1))
    # W3005 (DependsOn already enforced by a GetAtt) is how CDK renders every Lambda role dependency.
    result = subprocess.run(
        [tool("cfn-lint"), "-i", "W3005", "--", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_statelint_accepts_the_resolved_definition(resolved_definition: str, tmp_path: Path) -> None:
    path = tmp_path / "check_round.asl.json"
    path.write_text(resolved_definition)
    # FLOAT: statelint insists BackoffRate is written as a float even where 2 means 2.0.
    result = subprocess.run(
        [tool("statelint"), "--ignore=FLOAT", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
