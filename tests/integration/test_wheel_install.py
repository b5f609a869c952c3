"""The wheel in a fresh venv beside an app that owns an `infra` package, as `pip install hyperpod-dhc[cdk]` gives it
to a platform team: both packages import (ours is `hyperpod_dhc.*`, nothing generic), the construct synthesizes
with the Lambda code from site-packages, and `hpdhc --help` runs, on Python 3.10 too (HyperPod's Ubuntu 22.04).
The CLI alone, installed with its dependencies: tests/simulation/test_operator_cli.py."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.harness.wheel import PIP, REPO_ROOT, build_wheel, clean_env, fresh_venv, purelib

OLDEST_PYTHON = REPO_ROOT / ".venv-py310" / "bin" / "python"  # `make install` (tests/integration/test_oldest_python.py)

APP = """
import sys
from pathlib import Path

import aws_cdk as cdk

import infra  # the app's own
from hyperpod_dhc.deephealth.domain.policy import parse_config
from hyperpod_dhc.infra import HyperPodDhc, HyperPodDhcProps

app = cdk.App(outdir=sys.argv[1], context={"aws:cdk:bundling-stacks": []})  # the layer's pip install: not here
stack = cdk.Stack(app, "Platform")
HyperPodDhc(stack, "Health", props=HyperPodDhcProps(config=parse_config({"clusters": ["prod"]})))
app.synth()
print(infra.NAME, Path(sys.modules["hyperpod_dhc.infra.construct"].__file__).parent)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_construct_synthesizes_beside_an_app_that_owns_an_infra_package(wheel: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    subprocess.run([*PIP, "--python", str(python), "install", "--no-deps", str(wheel)], env=clean_env(), check=True)
    site = purelib(python)
    # The `cdk` extra's stack from this venv (a fresh download is ~100 MB), as a plain directory after the venv's own
    # site-packages: its .pth files, which put this checkout on the path, are not read from there.
    (site / "zz-cdk-extra.pth").write_text(sysconfig.get_path("purelib") + "\n")
    app = tmp_path / "app"
    (app / "infra").mkdir(parents=True)
    (app / "infra" / "__init__.py").write_text('NAME = "the app\'s own infra"\n')
    (app / "app.py").write_text(APP)
    out = tmp_path / "cdk.out"
    done = subprocess.run(
        [str(python), "app.py", str(out)], cwd=app, env=clean_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    name, construct_dir = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert name == "the app's own infra"
    assert Path(construct_dir) == site / "hyperpod_dhc" / "infra"  # the wheel's, not a checkout's
    assert {p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth"))} == {"hyperpod_dhc"}

    template = json.loads((out / "Platform.template.json").read_text())
    assert "ApiEndpoint" in template["Outputs"]  # under the construct id "Health": what `hpdhc --stack` reads
    handlers = {
        r["Properties"]["Handler"] for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"
    }
    assert "hyperpod_dhc.deephealth.handlers.intake.lambda_handler" in handlers
    code = [p for p in out.glob("asset.*") if (p / "hyperpod_dhc" / "deephealth" / "handlers" / "intake.py").is_file()]
    assert len(code) == 1 and {p.name for p in code[0].iterdir()} == {"hyperpod_dhc"}


def test_hpdhc_help_runs_from_the_wheel_on_python_3_10(wheel: Path, tmp_path: Path) -> None:
    if not OLDEST_PYTHON.exists():
        message = "no .venv-py310 (`make install` builds it from a Python 3.10)"
        if os.environ.get("HPDHC_REQUIRE_SLURM") == "1":  # .ci/run: the oldest Python is required
            pytest.fail(message)
        pytest.skip(message)
    base = subprocess.check_output([str(OLDEST_PYTHON), "-c", "import sys; print(sys._base_executable)"], text=True)
    python = fresh_venv(tmp_path / "venv310", base.strip())
    subprocess.run([*PIP, "--python", str(python), "install", str(wheel)], env=clean_env(), check=True)
    shown = subprocess.run(
        [str(python.parent / "hpdhc"), "--help"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert all(command in shown.stdout for command in ("status", "nodes", "bridge", "readings"))
    version = subprocess.check_output([str(python), "-c", "import sys; print(*sys.version_info[:2])"], text=True)
    assert version.split() == ["3", "10"]
