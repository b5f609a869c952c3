"""`hpdhc readings classify` from the installed wheel on the oldest Python the wheel supports (tests/bridge runs in
.venv-py310: the wheel, boto3 and google-re2, no pydantic): the controller's evidence code judges every captured check
of the corpus (tests/corpus/checks) as the file says, and an operator's pattern is applied and checked there too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parents[1] / "corpus" / "checks"
FILES = sorted(CHECKS.glob("*.json"))


def classify(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperpod_dhc.hpdhc", "readings", "classify", *argv],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_evidence_code_needs_no_pydantic():
    imports = "hyperpod_dhc.deephealth.evidence.capture, hyperpod_dhc.hpdhc.classify"
    code = f"import sys, {imports}; print('pydantic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_captured_check_is_judged_as_it_says(path):
    done = classify(str(path), "--json")
    assert done.returncode == 0, done.stderr
    judged, expect = json.loads(done.stdout), json.loads(path.read_text())["expect"]
    assert (judged["verdict"], judged["hint"]) == (expect["verdict"], expect["hint"])


def test_a_pattern_is_tried_before_it_is_deployed_and_a_bad_one_refused(tmp_path):
    unknown = str(CHECKS / "agent-unknown-outcome-line.json")
    taught = tmp_path / "patterns.json"
    taught.write_text(json.dumps({"neutral": [r"^GPU burn-in \d+/\d+ complete \(gpu_burn \d+ s\)$"]}))
    assert json.loads(classify(unknown, "--json").stdout)["verdict"] == "inconclusive"
    assert json.loads(classify(unknown, "--policy", str(taught), "--json").stdout)["verdict"] == "passed"
    taught.write_text(json.dumps({"neutral": [r"^(a)\1$"]}))
    refused = classify(unknown, "--policy", str(taught))
    assert refused.returncode == 2 and "not an RE2 pattern" in refused.stderr
