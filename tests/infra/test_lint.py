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


# IAM actions of APIs newer than cfn-lint's action list (W3037 "not one of"): botocore 1.44.8 has them.
NEWER_THAN_CFN_LINT = ("sagemaker:ListClusterOperations",)


def test_cfn_lint_reports_no_problems(template_json: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "HyperPodDhc.template.json"
    path.write_text(json.dumps(template_json, indent=1))
    # W3005 (DependsOn already enforced by a GetAtt) is how CDK renders every Lambda role dependency.
    result = subprocess.run(
        [tool("cfn-lint"), "-i", "W3005", "--format", "parseable", "--", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    newer = tuple(f":W3037:'{a.split(':', 1)[1].lower()}' is not one of" for a in NEWER_THAN_CFN_LINT)
    problems = [line for line in result.stdout.splitlines() if line.strip() and not any(n in line for n in newer)]
    assert not problems and not result.stderr.strip(), result.stdout + result.stderr


def test_statelint_accepts_the_resolved_definition(resolved_definition: str, tmp_path: Path) -> None:
    path = tmp_path / "check_round.asl.json"
    path.write_text(resolved_definition)
    # FLOAT: statelint insists BackoffRate is written as a float even where 2 means 2.0.
    result = subprocess.run(
        [tool("statelint"), "--ignore=FLOAT", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
