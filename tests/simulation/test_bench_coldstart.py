"""The cold-start benchmark (tests/bench/coldstart.py) runs, and every handler module imports in a fresh
interpreter with only its settings in the environment. Nothing here is timed: the figures live in
docs/BENCHMARKS.md (`make coldstart`)."""

import json
import subprocess
import sys

from tests.bench import coldstart

SAMPLE = """\
import time: self [us] | cumulative | imported package
import time:       100 |        100 | hyperpod_dhc
import time:        50 |        150 |   hyperpod_dhc.deephealth.handlers
import time:      2000 |       2000 |         botocore.exceptions
import time:      1000 |       5000 |       boto3
import time:       300 |       5300 |     hyperpod_dhc.deephealth.adapters.aws
import time:       700 |        700 |       pydantic_core
import time:       900 |       1600 |     pydantic
import time:       400 |       7300 |   hyperpod_dhc.deephealth.wiring
import time:       100 |        100 |         typing_extensions
import time:       600 |        700 |       pydantic.networks
import time:       800 |        800 |       jmespath
import time:       300 |       1800 |     aws_lambda_powertools.utilities.parser
import time:        50 |       1850 |   aws_lambda_powertools
import time:       200 |       9350 | hyperpod_dhc.deephealth.handlers.intake
"""


def test_parse_importtime_counts_each_import_once_by_package() -> None:
    total_us, by_package = coldstart.parse_importtime(SAMPLE, "hyperpod_dhc.deephealth.handlers.intake")
    assert total_us == 9350
    # botocore under boto3 is boto3's; pydantic under Powertools is pydantic's; jmespath stays Powertools'.
    assert by_package == {"boto3": 5000, "pydantic": 1600 + 700, "aws_lambda_powertools": 1850 - 700}


def test_every_handler_imports_cold_and_the_report_has_its_shape() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.bench.coldstart", "--runs", "1", "--no-sizes", "--json"],
        cwd=coldstart.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["version"] == 1 and report["runs"] == 1 and report["bytecode_cache"] is True
    assert report["machine"]["nproc"] >= 1 and report["machine"]["python"]
    assert report["sizes"] is None and report["baseline"] is None
    assert list(report["handlers"]) == list(coldstart.HANDLERS)
    for name, h in report["handlers"].items():
        assert h["module"] == f"hyperpod_dhc.deephealth.handlers.{name}"
        assert h["median_ms"] > 0 and h["min_ms"] == h["median_ms"] and h["runs_ms"] == [h["median_ms"]]
        assert h["import_and_first_use_ms"] > 0 and h["cpu_ms"] > 0
        assert 1 <= len(h["top_imports"]) <= coldstart.TOP_IMPORTS
        assert all(set(t) == {"name", "ms"} and not t["name"].startswith("hyperpod_dhc") for t in h["top_imports"])
        assert isinstance(h["meets_target"], bool)


def test_no_handler_imports_boto3_before_it_builds_a_client() -> None:
    """boto3/botocore cost ~300 ms of cold start: the adapters import them when the first client is built."""
    modules = ", ".join(f"hyperpod_dhc.deephealth.handlers.{h}" for h in coldstart.HANDLERS)
    code = f"import json, sys, {modules}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=coldstart.handler_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Powertools imports the bare `botocore` package (its __init__, < 1 ms) to register its user agent.
    heavy = [m for m in json.loads(result.stdout) if m.split(".")[0] in {"boto3", "s3transfer", "urllib3"}]
    heavy += [m for m in json.loads(result.stdout) if m.startswith("botocore.")]
    assert not heavy


def test_function_asset_size_counts_what_cdk_packages() -> None:
    size = coldstart.function_asset_size()
    assert size["bytes"] > 0 and size["files"] > 0
    # The asset is deephealth/ without bytecode: the operator CLI beside it (functions/hyperpod_dhc/hpdhc) is left out.
    deephealth = coldstart.FUNCTIONS_DIR / "hyperpod_dhc" / "deephealth"
    assert size["files"] == sum(1 for p in deephealth.rglob("*") if p.is_file() and p.suffix != ".pyc")
