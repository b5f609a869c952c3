"""What ships where: functions/ holds the Lambda code (deephealth, the CDK asset) and the operator CLI (hpdhc),
nothing else; the asset is deephealth alone; the CLI imports nothing of the Lambda code or the checkout. The wheel
carries the CLI, the construct (infra) and the Lambda code it deploys, with what infra reads of a checkout; without
the `cdk` extra it needs boto3 alone. The CLI installed from the wheel in a fresh venv is tested in
tests/simulation/test_operator_cli.py."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
import zipfile
from pathlib import Path

import aws_cdk as cdk
import pytest

from hyperpod_dhc.infra.controller_config import ASSET_EXCLUDE, FUNCTIONS_DIR, INFRA_DIR, REPO_ROOT
from hyperpod_dhc.infra.lambda_assets import LAMBDA_EXTRA, PYPROJECT, lambda_requirements
from hyperpod_dhc.infra.operator_api import OPENAPI_DOCUMENT
from tests.harness.wheel import build_wheel

# hpdhc speaks the API's JSON with boto3's SigV4 and the standard library, and reaches the twin of a checkout
# only from inside `simulate` (a lazy import: outside a checkout it says so and exits 2).
CLI_IMPORTS = {"boto3", "botocore", "hyperpod_dhc.hpdhc"}
CLI_LAZY_IMPORTS = {("cli.py", "simulate"): {"tests"}}
# Of the Lambda code, the CLI imports only the evidence package (`readings classify` judges offline with it), which
# itself imports the standard library and, where operators' patterns are compiled, google-re2.
EVIDENCE = "hyperpod_dhc.deephealth.evidence"
EVIDENCE_LAZY_IMPORTS = {("rules.py", "re2_compile"): {"re2"}}
PROJECT = tomllib.loads(PYPROJECT.read_text())


def dependency_group(name: str) -> list[str]:
    """A PEP 735 group's requirements, ``include-group`` entries expanded."""
    out: list[str] = []
    for entry in PROJECT["dependency-groups"][name]:
        out += dependency_group(entry["include-group"]) if isinstance(entry, dict) else [entry]
    return out


BYTECODE = re.compile(r"(^|/)__pycache__/|\.pyc$")


def test_functions_holds_exactly_the_lambda_code_and_the_operator_cli() -> None:
    """A third package must choose: the Lambda asset (and its cold start), the wheel, or neither."""
    assert {p.name for p in FUNCTIONS_DIR.parent.iterdir()} == {"hyperpod_dhc"}  # one namespace, no __init__
    entries = {p.name for p in FUNCTIONS_DIR.iterdir() if p.name != "__pycache__"}
    assert entries == {"deephealth", "hpdhc"}
    assert all((FUNCTIONS_DIR / name / "__init__.py").is_file() for name in entries)
    assert "hpdhc" in ASSET_EXCLUDE


def test_the_namespace_has_no_init_and_pyproject_lists_every_package() -> None:
    """setuptools maps a package to one root, so pyproject lists the packages: a new sub-package must be added there
    or the wheel (and so the Lambda code an installed construct deploys) would lack it."""
    portions = [FUNCTIONS_DIR, INFRA_DIR.parent]
    assert not [p for p in portions if (p / "__init__.py").exists()]
    on_disk = {
        "hyperpod_dhc." + ".".join(init.parent.relative_to(portion).parts)
        for portion in portions
        for init in portion.rglob("__init__.py")
    }
    assert set(PROJECT["tool"]["setuptools"]["packages"]) == on_disk


def test_the_lambda_asset_is_deephealth_without_the_cli_or_bytecode(stack: cdk.Stack) -> None:
    outdir = Path(cdk.Stage.of(stack).asset_outdir)
    (asset,) = [p for p in outdir.glob("asset.*") if (p / "hyperpod_dhc" / "deephealth").is_dir()]
    assert {p.name for p in asset.iterdir()} == {"hyperpod_dhc"}
    assert {p.name for p in (asset / "hyperpod_dhc").iterdir()} == {"deephealth"}  # a namespace: no __init__
    shipped = {p.relative_to(asset) for p in asset.rglob("*")}
    assert not [p for p in shipped if "hpdhc" in p.parts or "__pycache__" in p.parts or p.suffix == ".pyc"]
    assert Path("hyperpod_dhc/deephealth/handlers/api.py") in shipped


def test_a_checkout_reads_the_pins_and_routes_where_they_are_written() -> None:
    assert OPENAPI_DOCUMENT == INFRA_DIR / "openapi.json"
    assert lambda_requirements() == PROJECT["project"]["optional-dependencies"][LAMBDA_EXTRA]


def _requirements(entries: list[str]) -> dict[str, str]:
    """name -> version specifier of requirements without markers or extras."""
    found = [re.fullmatch(r"([A-Za-z0-9_.-]+)\s*([<>=!~][^;\[]*)", entry) for entry in entries]
    return {m[1].lower(): m[2].replace(" ", "") for m in found if m}


def test_the_cdk_extra_needs_at_least_what_the_tests_run() -> None:
    """Floors (an app has its own aws-cdk-lib), each the dev group's pin: the version the template is tested with."""
    extras = PROJECT["project"]["optional-dependencies"]
    extra = _requirements(extras["cdk"] + extras["nag"])
    dev = _requirements(dependency_group("dev") + extras[LAMBDA_EXTRA])
    assert set(_requirements(extras["cdk"])) == {"aws-cdk-lib", "constructs", "pydantic"}  # cdk-nag: `nag` alone
    assert set(_requirements(extras["nag"])) == {"cdk-nag"}
    for name, spec in extra.items():
        floor, ceiling = re.fullmatch(r">=([^,]+),<(\d+)", spec).groups()  # type: ignore[union-attr]
        assert dev[name] == f"=={floor}", f"{name}: the extra's floor {floor} is not the dev pin {dev[name]}"
        assert int(ceiling) == int(floor.split(".")[0]) + 1, f"{name}: below the next major version"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel `pip wheel` builds from a copy of the sources."""
    return zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel")))


def test_the_wheel_carries_the_cli_the_construct_and_the_lambda_code_it_deploys(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    (dist_info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    assert {n.split("/")[0] for n in names} == {"hyperpod_dhc", dist_info}  # nothing generic in site-packages
    assert {n.split("/")[1] for n in names if n.startswith("hyperpod_dhc/")} == {"hpdhc", "infra", "deephealth"}
    assert not [n for n in names if BYTECODE.search(n)]
    for package in ("deephealth", "hpdhc"):  # exactly the checkout's files
        checkout = {
            p.relative_to(FUNCTIONS_DIR.parent).as_posix()
            for p in (FUNCTIONS_DIR / package).rglob("*")
            if p.is_file() and not BYTECODE.search(p.as_posix())
        }
        assert {n for n in names if n.startswith(f"hyperpod_dhc/{package}/")} == checkout
    infra = {"construct.py", "app.py", "statemachines/check_round.asl.json"}
    assert {f"hyperpod_dhc/infra/{name}" for name in infra} <= names


def test_the_wheel_ships_what_infra_reads(wheel: zipfile.ZipFile) -> None:
    """The API's routes (openapi.json) and the example deploy file as package data; the layer's pins as the `lambda`
    extra of its metadata, which an installed infra reads back exactly as a checkout reads pyproject's."""
    assert wheel.read("hyperpod_dhc/infra/openapi.json") == OPENAPI_DOCUMENT.read_bytes()
    assert "hyperpod_dhc/infra/deploy.example.toml" in wheel.namelist()
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = [
        line.removeprefix("Requires-Dist: ").split(";")[0].strip()
        for line in wheel.read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:") and f'extra == "{LAMBDA_EXTRA}"' in line
    ]
    assert requires == lambda_requirements()


def test_the_wheel_needs_boto3_and_re2_alone_without_the_cdk_extra(wheel: zipfile.ZipFile) -> None:
    """The operator CLI installs on the cluster's Python 3.10 with boto3 and google-re2 and nothing else."""
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    lines = wheel.read(metadata).decode().splitlines()
    requires = [line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist:")]
    assert [r for r in requires if "extra ==" not in r] == ["boto3>=1.40", "google-re2>=1.1.20240702"]
    assert "Provides-Extra: cdk" in lines and "Requires-Python: >=3.10" in lines


def test_the_wheel_carries_the_license_text(wheel: zipfile.ZipFile) -> None:
    """PEP 639: the SPDX expression in the metadata and the whole Apache-2.0 text in .dist-info/licenses/."""
    (metadata,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    lines = wheel.read(metadata).decode().splitlines()
    assert "License-Expression: Apache-2.0" in lines and "License-File: LICENSE" in lines
    (license_file,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(license_file) == (REPO_ROOT / "LICENSE").read_bytes()


def _imports(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """(node, module) of every import: the top-level name (ours: `hyperpod_dhc.<package>`), but
    `hyperpod_dhc.deephealth.evidence` for the evidence package."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, _top(alias.name)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node, _top(node.module)))
    return found


def _top(module: str) -> str:
    if module == EVIDENCE or module.startswith(EVIDENCE + "."):
        return EVIDENCE
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "hyperpod_dhc" else parts[0]  # our packages by their second name


def test_the_evidence_package_imports_the_standard_library_alone() -> None:
    """The CLI runs it on the cluster's Python 3.10 without pydantic (tests/bridge/test_classify_offline.py too)."""
    _assert_imports_only(FUNCTIONS_DIR / "deephealth" / "evidence", {EVIDENCE}, EVIDENCE_LAZY_IMPORTS)


def test_the_cli_imports_nothing_of_the_lambda_code_or_the_checkout() -> None:
    _assert_imports_only(FUNCTIONS_DIR / "hpdhc", CLI_IMPORTS | {EVIDENCE}, CLI_LAZY_IMPORTS)


def _assert_imports_only(package: Path, allowed: set[str], lazy_imports: dict) -> None:
    """Every module of `package` imports the standard library and `allowed` alone, but for the imports
    `lazy_imports` lets a named function make inside its body."""
    allowed = allowed | set(sys.stdlib_module_names)
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text())
        lazy = {
            (node, module)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef)
            for node, module in _imports(function)
            if module in lazy_imports.get((path.name, function.name), set())
        }
        strays = [module for node, module in _imports(tree) if module not in allowed and (node, module) not in lazy]
        assert not strays, f"{path.name} imports {strays}"
