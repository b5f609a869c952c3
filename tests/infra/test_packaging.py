"""What ships where: functions/ holds the Lambda code (deephealth, the CDK asset) and the operator CLI (hpdhc,
the wheel), nothing else; the asset leaves the CLI out; the CLI imports nothing of the Lambda code or the
checkout. The wheel itself, installed in a fresh venv, is tested in tests/simulation/test_operator_cli.py."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import aws_cdk as cdk

from infra.controller_config import ASSET_EXCLUDE, FUNCTIONS_DIR
from infra.stack import HyperPodDhcStack

# hpdhc speaks the API's JSON with boto3's SigV4 and the standard library, and reaches the twin of a checkout
# only from inside `simulate` (a lazy import: outside a checkout it says so and exits 2).
CLI_IMPORTS = {"boto3", "botocore", "hpdhc"}
CLI_LAZY_IMPORTS = {("cli.py", "simulate"): {"tests"}}


def test_functions_holds_exactly_the_lambda_code_and_the_operator_cli() -> None:
    """A third package must choose: the Lambda asset (and its cold start), the wheel, or neither."""
    entries = {p.name for p in FUNCTIONS_DIR.iterdir() if p.name != "__pycache__"}
    assert entries == {"deephealth", "hpdhc"}
    assert all((FUNCTIONS_DIR / name / "__init__.py").is_file() for name in entries)
    assert "hpdhc" in ASSET_EXCLUDE


def test_the_lambda_asset_is_deephealth_without_the_cli_or_bytecode(stack: HyperPodDhcStack) -> None:
    outdir = Path(cdk.Stage.of(stack).asset_outdir)
    (asset,) = [p for p in outdir.glob("asset.*") if (p / "deephealth").is_dir()]
    assert {p.name for p in asset.iterdir()} == {"deephealth"}
    shipped = {p.relative_to(asset) for p in asset.rglob("*")}
    assert not [p for p in shipped if "hpdhc" in p.parts or "__pycache__" in p.parts or p.suffix == ".pyc"]
    assert Path("deephealth/handlers/api.py") in shipped


def _imports(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node, node.module.split(".")[0]))
    return found


def test_the_cli_imports_nothing_of_the_lambda_code_or_the_checkout() -> None:
    allowed = CLI_IMPORTS | set(sys.stdlib_module_names)
    for path in sorted((FUNCTIONS_DIR / "hpdhc").glob("*.py")):
        tree = ast.parse(path.read_text())
        lazy = {
            (node, module)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef)
            for node, module in _imports(function)
            if module in CLI_LAZY_IMPORTS.get((path.name, function.name), set())
        }
        strays = [module for node, module in _imports(tree) if module not in allowed and (node, module) not in lazy]
        assert not strays, f"{path.name} imports {strays}"
