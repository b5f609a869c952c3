"""Cold-start import cost of each Lambda handler module, and the deployed sizes.

For each handler module, N fresh interpreters run ``python -X importtime -c "import
hyperpod_dhc.deephealth.handlers.<m>"`` with ``PYTHONPATH=functions`` and dummy but valid settings: the module builds
its settings and its Controller at import, as in a Lambda's init phase (no AWS call is made). Reported per handler,
median over the runs: - the cumulative import time of the handler module's own line (and its minimum); - "import + first
use": the wall time of the import plus what the first invocation builds before its first AWS call (``FIRST_USE``): a
lazy import moves its cost there, it does not remove it; - the CPU time of that interpreter (start-up, import, first
use); - the three biggest imports: the cumulative time of each import our own modules make, by top-level package, with
the layer's direct dependencies (Powertools, boto3 with botocore, pydantic) counted apart wherever they are imported
(pydantic pulled in by Powertools' parser is pydantic's), so they never overlap. Runs are interleaved (run 1 of every
handler, then run 2, ...), so a burst of load on a shared machine hits every handler alike; with ``--baseline DIR``
another ``functions/`` tree (e.g. from ``git archive HEAD functions``) is measured in the same interleaving, for a
before/after table.

Sizes, unzipped: the function asset as ``infra/hyperpod_dhc/infra/controller_functions.py`` packages it (``functions/``
without what ``hyperpod_dhc.infra.controller_config.ASSET_EXCLUDE`` names: bytecode and the operator CLI), and the
dependency layer: the synthesized asset under ``cdk.out/`` when there is one, otherwise built the way the CDK
app builds it (``PipInstall``: local pip, Linux ARM64, CPython 3.13 wheels) into ``.build/coldstart/`` and
reused from there.

``--no-pyc``: our code and the third-party packages are compiled from source on every run, as a Lambda
without bytecode does (the asset excludes ``*.pyc``, and /var/task and /opt are read-only there, so nothing
compiled is kept); the standard library is read from a bytecode cache compiled once, as the runtime ships it.

``--runtime``: the Lambda runtime's own Python (3.13, found as the CDK app finds it) imports each handler
with the layer built the way the app builds it, once as source only and once with the bytecode the app
compiles into it (``hyperpod_dhc.infra.lambda_assets.PipInstall``). The wheels are the x86_64 ones of the same
pinned versions, because the deployed aarch64 layer cannot be imported on this machine. Our own code is
compiled from source in both, as on Lambda.

    python -m tests.bench.coldstart [--runs 7] [--handler intake ...] [--baseline DIR] [--no-pyc]
                                    [--runtime] [--no-sizes] [--json]
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import fnmatch
import functools
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.node import venv_node_first

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
CDK_OUT = REPO_ROOT / "cdk.out"
LAYER_CACHE = REPO_ROOT / ".build" / "coldstart"
HANDLERS = ("intake", "reconcile", "claim_round", "start_check", "poll_check", "recover_nodes", "finish_round", "api")
TARGET_MS = 300.0
TOP_IMPORTS = 3
# The layer's direct dependencies, by top-level package: each is counted apart wherever it is imported
# (pydantic imported by Powertools' parser is pydantic's cost, not Powertools').
FAMILIES = {
    "aws_lambda_powertools": "aws_lambda_powertools",
    "boto3": "boto3",
    "botocore": "boto3",
    "s3transfer": "boto3",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
}
# After the import, in the same interpreter: what a handler's first invocation builds before its first AWS
# call (the table, the configuration reader's SSM client, SageMaker except for the Api, DynamoDB conditions).
# A lazy import only moves its cost here; "import + first use" is what a cold invocation waits for.
FIRST_USE = """
from hyperpod_dhc.deephealth.adapters import aws
aws.table(os.environ["TABLE_NAME"])
{sagemaker}from aws_lambda_powertools.utilities import parameters
parameters.SSMProvider()
from boto3.dynamodb.conditions import Attr, Key
"""
# What every handler's settings model needs (deephealth/settings.py), dummy but valid, and the common
# environment ControllerFunction gives every deployed function.
HANDLER_ENV = {
    "TABLE_NAME": "t",
    "CONFIG_PARAMETER_NAME": "/p",
    "ROUND_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:x",
    "NOTIFICATIONS_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:n",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "hyperpod-dhc",
    "POWERTOOLS_METRICS_NAMESPACE": "HyperPodDHC",
    "POWERTOOLS_LOG_LEVEL": "INFO",
}


# ---------------------------------------------------------------- -X importtime


@dataclass
class _Node:
    name: str
    depth: int
    cumulative_us: int
    children: list[_Node] = field(default_factory=list)


def parse_importtime(stderr: str, module: str) -> tuple[int, dict[str, int]]:
    """(cumulative µs of `module`'s top-level line, {top-level package: µs of the imports our modules make of
    it}) from ``-X importtime`` output."""
    pending: list[_Node] = []  # post-order: a line's children are the deeper lines just before it
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        node = _Node(name.strip(), depth, int(cumulative))
        while pending and pending[-1].depth > depth:
            node.children.insert(0, pending.pop())
        pending.append(node)
        if depth == 0 and node.name == module:
            return node.cumulative_us, _by_package(node)
    raise ValueError(f"no top-level import line for {module}")


def _by_package(root: _Node) -> dict[str, int]:
    """µs per package: an import our code makes opens a bucket for its top-level package, and so does a
    dependency family (``FAMILIES``) imported by another package; each bucket holds its cumulative time less
    the buckets opened under it, so the buckets never overlap."""
    totals: dict[str, int] = {}

    def walk(node: _Node, bucket: str | None) -> None:
        top = node.name.split(".", 1)[0]
        if top == "hyperpod_dhc":  # our own modules: look at what they import
            for child in node.children:
                walk(child, None)
            return
        family = FAMILIES.get(top, top if bucket is None else None)
        if family is not None and family != bucket:
            totals[family] = totals.get(family, 0) + node.cumulative_us
            if bucket is not None:
                totals[bucket] -= node.cumulative_us
            bucket = family
        for child in node.children:
            walk(child, bucket)

    for child in root.children:
        walk(child, None)
    return totals


# ---------------------------------------------------------------- one cold interpreter


def handler_env(
    functions: Path = FUNCTIONS_DIR, pycache: str | None = None, layer: Path | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "POWERTOOLS_"))}
    env.update(HANDLER_ENV, PYTHONPATH=str(functions) + (f"{os.pathsep}{layer}" if layer else ""))
    if pycache:  # read bytecode only from there, write none
        env.update(PYTHONPYCACHEPREFIX=pycache, PYTHONDONTWRITEBYTECODE="1")
    elif layer:  # read the layer's own bytecode, write none (read-only on Lambda)
        env.update(PYTHONDONTWRITEBYTECODE="1")
    return env


@functools.cache
def stdlib_pycache(python: str = sys.executable) -> str:
    """A bytecode cache holding only the standard library (as the Lambda runtime ships it compiled)."""
    prefix = tempfile.mkdtemp(prefix="coldstart-stdlib-pyc-")
    atexit.register(shutil.rmtree, prefix, True)
    skip = r"[/\\](site-packages|dist-packages|test|tests|idlelib|tkinter|turtledemo|lib2to3|ensurepip)[/\\]"
    stdlib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "0", "-x", skip, stdlib],
        env={**os.environ, "PYTHONPYCACHEPREFIX": prefix},
        capture_output=True,
        check=False,  # a few files in the stdlib do not compile on purpose
    )
    return prefix


@dataclass(frozen=True)
class Runtime:
    """Another interpreter with the dependency layer on its path (``--runtime``)."""

    python: str
    layer: Path  # the layer's python/ directory
    layer_bytecode: bool  # read the layer's bytecode; else compile it from source like our code


@dataclass(frozen=True)
class Sample:
    import_us: int  # the handler module's cumulative line (wall clock, as -X importtime measures)
    by_package: dict[str, int]
    cpu_us: int  # user + system CPU of the whole interpreter: start-up, import and first use
    first_use_us: int  # import + FIRST_USE, wall clock


def import_once(
    handler: str, functions: Path = FUNCTIONS_DIR, no_pyc: bool = False, runtime: Runtime | None = None
) -> Sample:
    """One fresh interpreter imports the handler module, then does what its first invocation does first."""
    module = f"hyperpod_dhc.deephealth.handlers.{handler}"
    first_use = FIRST_USE.format(sagemaker="" if handler == "api" else 'aws.client("sagemaker")\n')
    code = f"import os, time\nt0 = time.perf_counter()\nimport {module}\n{first_use}print(time.perf_counter() - t0)"
    python = runtime.python if runtime else sys.executable
    if runtime:
        pycache = None if runtime.layer_bytecode else stdlib_pycache(python)
        env = handler_env(functions, pycache, runtime.layer)
    else:
        env = handler_env(functions, stdlib_pycache() if no_pyc else None)
    with tempfile.TemporaryDirectory(prefix="coldstart-") as cwd:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = subprocess.run(
            [python, "-X", "importtime", "-c", code],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        tail = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("import time:"))
        raise RuntimeError(f"import {module} from {functions} failed (exit {result.returncode}):\n{tail[-2000:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    import_us, by_package = parse_importtime(result.stderr, module)
    first_use_us = round(float(result.stdout.strip().splitlines()[-1]) * 1e6)
    return Sample(import_us, by_package, cpu_us=round(cpu_s * 1e6), first_use_us=first_use_us)


def summarize(handler: str, samples: list[Sample]) -> dict:
    packages = {p for s in samples for p in s.by_package}
    medians = {p: statistics.median(x.by_package.get(p, 0) for x in samples) for p in packages}
    top = sorted(medians.items(), key=lambda kv: -kv[1])[:TOP_IMPORTS]
    median_ms = round(statistics.median(s.import_us for s in samples) / 1000, 1)
    return {
        "module": f"hyperpod_dhc.deephealth.handlers.{handler}",
        "median_ms": median_ms,
        "min_ms": round(min(s.import_us for s in samples) / 1000, 1),
        "runs_ms": [round(s.import_us / 1000, 1) for s in samples],
        "cpu_ms": round(statistics.median(s.cpu_us for s in samples) / 1000, 1),
        "import_and_first_use_ms": round(statistics.median(s.first_use_us for s in samples) / 1000, 1),
        "top_imports": [{"name": p, "ms": round(us / 1000, 1)} for p, us in top],
        "meets_target": median_ms <= TARGET_MS,
    }


def measure(handlers: list[str], runs: int, trees: dict[str, Path], no_pyc: bool = False) -> dict[str, dict]:
    """{label: {handler: summary}} for each tree, runs interleaved across handlers and trees."""
    samples: dict[tuple[str, str], list[Sample]] = {(label, h): [] for label in trees for h in handlers}
    for _ in range(runs):
        for h in handlers:
            for label, tree in trees.items():
                samples[label, h].append(import_once(h, tree, no_pyc))
    return {label: {h: summarize(h, samples[label, h]) for h in handlers} for label in trees}


def measure_runtime(handlers: list[str], runs: int) -> dict:
    """The runtime's Python importing each handler with the layer as source and with its bytecode, interleaved."""
    from hyperpod_dhc.infra.lambda_assets import runtime_python

    python = runtime_python()
    if python is None:
        raise SystemExit("--runtime needs a CPython 3.13 on PATH or under pyenv; there is none")
    layer = build_layer(f"manylinux2014_{platform.machine()}") / "python"
    with tempfile.TemporaryDirectory(prefix="coldstart-functions-") as tmp:
        functions = Path(tmp) / "functions"  # as packaged: no bytecode of ours
        shutil.copytree(FUNCTIONS_DIR, functions, ignore=shutil.ignore_patterns(*asset_exclude()))
        modes = {"source": Runtime(python, layer, False), "bytecode": Runtime(python, layer, True)}
        samples: dict[tuple[str, str], list[Sample]] = {(m, h): [] for m in modes for h in handlers}
        for _ in range(runs):
            for h in handlers:
                for m, runtime in modes.items():
                    samples[m, h].append(import_once(h, functions, runtime=runtime))
    version = subprocess.run([python, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    return {
        "python": version,
        "layer": _shown(layer),
        "handlers": {m: {h: summarize(h, samples[m, h]) for h in handlers} for m in modes},
    }


def runtime_table(report: dict) -> str:
    rt = report["runtime"]
    src, byte = rt["handlers"]["source"], rt["handlers"]["bytecode"]
    rows = [
        "| handler | import ms, layer as source | import ms, layer with bytecode | import + first use ms, "
        "source → bytecode |",
        "| --- | ---: | ---: | ---: |",
    ]
    for h in src:
        rows.append(
            f"| {h} | {src[h]['median_ms']:.0f} | {byte[h]['median_ms']:.0f} | "
            f"{src[h]['import_and_first_use_ms']:.0f} → {byte[h]['import_and_first_use_ms']:.0f} |"
        )
    rows.append(
        f"\nMedians of {report['runs']} fresh interpreters; {rt['python']} with the layer built by PipInstall "
        f"({rt['layer']}); our code compiled from source in both."
    )
    return "\n".join(rows)


# ---------------------------------------------------------------- sizes


def asset_exclude() -> tuple[str, ...]:
    """What the CDK app leaves out of the function asset: glob patterns, each matched against a file's or a
    directory's name (``lambda_.Code.from_asset(functions/, exclude=ASSET_EXCLUDE)``)."""
    venv_node_first()  # before infra starts jsii: make install's Node.js 22 LTS
    from hyperpod_dhc.infra.controller_config import ASSET_EXCLUDE

    return ASSET_EXCLUDE


def tree_size(root: Path, exclude: tuple[str, ...] = ()) -> dict:
    """Bytes and files under `root`, leaving out files and directories whose name matches a pattern of `exclude`."""

    def kept(name: str) -> bool:
        return not any(fnmatch.fnmatchcase(name, pattern) for pattern in exclude)

    total = files = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if kept(d)]
        for name in filter(kept, filenames):
            total += (Path(dirpath) / name).lstat().st_size
            files += 1
    return {"bytes": total, "mb": round(total / 1e6, 2), "files": files}


def function_asset_size(functions: Path = FUNCTIONS_DIR) -> dict:
    """``lambda_.Code.from_asset(functions/, exclude=ASSET_EXCLUDE)``, unzipped."""
    exclude = asset_exclude()
    size = tree_size(functions, exclude)
    return {**size, "source": f"{_shown(functions)} as packaged (without {', '.join(exclude)})"}


def layer_size() -> dict:
    synthesized = sorted((p for p in CDK_OUT.glob("asset.*") if (p / "python").is_dir()), key=os.path.getmtime)
    if synthesized:
        return {**tree_size(synthesized[-1]), "source": f"synthesized asset {_shown(synthesized[-1])}"}
    path = build_layer()
    return {**tree_size(path), "source": f"built by infra's PipInstall into {_shown(path)}"}


def build_layer(platform_tag: str | None = None) -> Path:
    """The layer bundle exactly as the CDK app's local bundler makes it (cached by its requirement list);
    `platform_tag` builds the same pinned versions for another platform, to import them here."""
    venv_node_first()  # before infra starts jsii: make install's Node.js 22 LTS
    from hyperpod_dhc.infra.lambda_assets import (
        PIP_PLATFORM,
        PYTHON_VERSION,
        PipInstall,
        lambda_requirements,
        runtime_python,
    )

    requirements = lambda_requirements()
    compiler = runtime_python()
    bundle = [requirements, platform_tag or PIP_PLATFORM, PYTHON_VERSION, "bytecode" if compiler else "source"]
    key = hashlib.sha256(json.dumps(bundle).encode()).hexdigest()[:12]
    out = LAYER_CACHE / f"layer-{key}"
    if not (out / ".complete").exists():
        LAYER_CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=LAYER_CACHE))
        PipInstall(requirements, compiler, platform_tag or PIP_PLATFORM).try_bundle(str(staging), image=None)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
        (out / ".complete").touch()
    return out


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


# ---------------------------------------------------------------- report


def run(
    handlers: list[str] | None = None,
    runs: int = 7,
    *,
    functions: Path = FUNCTIONS_DIR,
    baseline: Path | None = None,
    no_pyc: bool = False,
    sizes: bool = True,
    runtime: bool = False,
) -> dict:
    if runtime:
        return {"version": 1, "date": dt.date.today().isoformat(), "runs": runs,
                "runtime": measure_runtime(list(handlers or HANDLERS), runs)}  # fmt: skip
    trees = {"current": functions, **({"baseline": baseline} if baseline else {})}
    results = measure(list(handlers or HANDLERS), runs, trees, no_pyc)
    return {
        "version": 1,
        "date": dt.date.today().isoformat(),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "arch": platform.machine(),
            "load_avg": round(os.getloadavg()[0], 1),  # a shared machine's load inflates wall-clock medians
        },
        "runs": runs,
        "bytecode_cache": not no_pyc,
        "target_ms": TARGET_MS,
        "functions": _shown(functions),
        "handlers": results["current"],
        "baseline": {"functions": _shown(baseline), "handlers": results["baseline"]} if baseline else None,
        "sizes": {"function_asset": function_asset_size(functions), "layer": layer_size()} if sizes else None,
    }


def table(report: dict) -> str:
    def top(r: dict) -> str:
        return ", ".join(f"{t['name']} {t['ms']:.0f}" for t in r["top_imports"])

    base = (report.get("baseline") or {}).get("handlers")
    n, target = report["runs"], report["target_ms"]
    if base:
        rows = [
            f"| handler | import ms, before | import ms, after (min) | ≤ {target:.0f} ms | import + first use ms, "
            "before → after | biggest imports before, ms | biggest imports after, ms |",
            "| --- | ---: | ---: | --- | ---: | --- | --- |",
        ]
    else:
        rows = [
            f"| handler | import ms (min) | ≤ {target:.0f} ms | import + first use ms | biggest imports, ms |",
            "| --- | ---: | --- | ---: | --- |",
        ]
    for name, r in report["handlers"].items():
        now = f"{r['median_ms']:.0f} ({r['min_ms']:.0f})"
        ok = "yes" if r["meets_target"] else f"no (+{r['median_ms'] - target:.0f})"
        if base:
            b = base[name]
            use = f"{b['import_and_first_use_ms']:.0f} → {r['import_and_first_use_ms']:.0f}"
            rows.append(f"| {name} | {b['median_ms']:.0f} | {now} | {ok} | {use} | {top(b)} | {top(r)} |")
        else:
            rows.append(f"| {name} | {now} | {ok} | {r['import_and_first_use_ms']:.0f} | {top(r)} |")
    machine = report["machine"]
    rows += [
        "",
        f"Medians of {n} fresh interpreters per handler; python {machine['python']}, nproc {machine['nproc']}, "
        f"load average {machine['load_avg']}; "
        + ("bytecode cache warm." if report["bytecode_cache"] else "no bytecode cache (compiled from source).")
        + " Import + first use: the import, then the clients and condition builders a first invocation builds.",
    ]
    for name, s in (report["sizes"] or {}).items():
        rows.append(f"{name}: {s['mb']:.2f} MB unzipped, {s['files']} files ({s['source']})")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.coldstart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per handler (median); default 7")
    parser.add_argument("--handler", action="append", choices=HANDLERS, help="only this handler (repeatable)")
    parser.add_argument("--functions", type=Path, default=FUNCTIONS_DIR, help="the tree to import (functions/)")
    parser.add_argument("--baseline", type=Path, help="another functions/ tree to compare with, interleaved")
    parser.add_argument("--no-pyc", action="store_true", help="compile our code and the layer from source (Lambda)")
    parser.add_argument(
        "--runtime", action="store_true", help="the runtime's Python 3.13: layer as source against with bytecode"
    )
    parser.add_argument("--no-sizes", action="store_true", help="skip the function asset and layer sizes")
    parser.add_argument("--json", action="store_true", help="one JSON report on stdout")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    for tree in (args.functions, args.baseline):
        if tree is not None and not (tree / "hyperpod_dhc" / "deephealth" / "handlers").is_dir():
            parser.error(f"{tree} is not a functions/ tree (no hyperpod_dhc/deephealth/handlers)")
    report = run(
        args.handler,
        args.runs,
        functions=args.functions.resolve(),
        baseline=args.baseline.resolve() if args.baseline else None,
        no_pyc=args.no_pyc,
        sizes=not args.no_sizes,
        runtime=args.runtime,
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(runtime_table(report) if args.runtime else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
