"""Report parity: do fixed-seed `hpdhc simulate --json` reports of every scenario file equal a baseline commit's?

    python -m tests.twin.parity --baseline REF [--apply COMMIT] [--only demo faults] [--jobs 2] [--template]

For a change meant to leave behaviour alone (a refactor), this is the proof: the baseline commit is checked out
into a temporary git worktree, and each file of tests/scenarios/ is simulated there and here with the same Python,
each run a fresh interpreter. Reports are compared whole except `wall_s`. A file whose full run takes too long is
run with a capped horizon in both trees (`--cap NAME=SECONDS`; bench-10000 by default: 10,000 arrivals over two
virtual days take over an hour of wall time each), and the table says so. Exits 1 on any difference and prints
the first differing lines. `--template` also compares the synthesized CloudFormation templates, asset hashes
aside (a refactor of the Lambda code changes the code asset's hash and nothing else).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.harness.node import venv_node_first

venv_node_first()  # each tree's synth and twin run on make install's Node.js 22 LTS

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CAPS = {"bench-10000": 2 * 3600.0}

# The command line moved out of tests/ (issue 12): the script runs the one the tree has. Chosen by the tree's
# files, not by import: the dev venv's .pth puts this checkout's functions/ on every interpreter's path.
JSON = ("--json",)
_RUN = "import sys; from {module} import main; sys.exit(main())"


def _cli_module(tree: Path) -> str:
    return (
        "hyperpod_dhc.hpdhc.cli"
        if (tree / "functions" / "hyperpod_dhc" / "hpdhc" / "cli.py").exists()
        else "tests.twin.cli"
    )


# The stack as each tree synthesizes it from cdk.json (layer bundling skipped; nag off: it only adds checks).
_SYNTH = (
    "import json, pathlib, aws_cdk as cdk\n"
    "from aws_cdk.assertions import Template\n"
    "from hyperpod_dhc.infra.app import build\n"
    "context = json.loads(pathlib.Path('cdk.json').read_text())['context']\n"
    "app = cdk.App(context={**context, 'aws:cdk:bundling-stacks': []})\n"
    "print(json.dumps(Template.from_stack(build(app, nag=False)).to_json()))\n"
)
ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def template(tree: Path) -> Any:
    """The tree's synthesized template with every asset hash (64 hex digits) replaced by one placeholder."""
    env = dict(os.environ, PYTHONPATH=f"{tree / 'functions'}{os.pathsep}{tree}")
    done = subprocess.run(
        [sys.executable, "-c", _SYNTH], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: synth exited {done.returncode}:\n{done.stderr[-2000:]}")
    return json.loads(ASSET_HASH.sub("<asset hash>", done.stdout))


def without_wall(report: Any) -> Any:
    if isinstance(report, dict):
        return {k: without_wall(v) for k, v in report.items() if k != "wall_s"}
    if isinstance(report, list):
        return [without_wall(v) for v in report]
    return report


def simulate(tree: Path, scenario: Path) -> Any:
    """One fixed-seed report of `scenario` (a path) simulated by the code of `tree`."""
    env = dict(os.environ, PYTHONPATH=f"{tree / 'functions'}{os.pathsep}{tree}")
    done = subprocess.run(
        [sys.executable, "-c", _RUN.format(module=_cli_module(tree)), "simulate", "--scenario", str(scenario), *JSON],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: simulate {scenario.name} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return without_wall(json.loads(done.stdout))


def scenario_file(name: str, cap_s: float | None, workdir: Path) -> Path:
    """The scenario file as is, or a copy whose horizon is capped (the same copy runs in both trees)."""
    path = REPO_ROOT / "tests" / "scenarios" / f"{name}.json"
    if cap_s is None:
        return path
    raw = json.loads(path.read_text())
    raw["horizon_s"] = min(cap_s, raw["horizon_s"])
    capped = workdir / f"{name}.json"
    capped.write_text(json.dumps(raw))
    return capped


def _rev_parse(ref: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", ref], capture_output=True, text=True, check=True
    ).stdout.strip()


def _baseline(cache: Path | None, commit: str, tree: Path, scenario: Path) -> Any:
    """The baseline's report, from the cache when this commit and (capped) file ran before."""
    if cache is None:
        return simulate(tree, scenario)
    kept = cache / commit / f"{scenario.stem}-{hashlib.sha256(scenario.read_bytes()).hexdigest()[:12]}.json"
    if kept.exists():
        return json.loads(kept.read_text())
    report = simulate(tree, scenario)
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(report))
    return report


def compare(name: str, baseline: Any, current: Any) -> list[str]:
    if baseline == current:
        return []
    old = json.dumps(baseline, indent=1, sort_keys=True).splitlines()
    new = json.dumps(current, indent=1, sort_keys=True).splitlines()
    return list(difflib.unified_diff(old, new, f"{name} (baseline)", f"{name} (this tree)", lineterm=""))[:40]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.twin.parity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git commit whose reports this tree must reproduce")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="scenario names (default: every file)")
    parser.add_argument("--jobs", type=int, default=2, help="simulations run at once (default 2)")
    parser.add_argument("--cap", action="append", default=[], metavar="NAME=SECONDS", help="cap a file's horizon")
    parser.add_argument("--cache", type=Path, help="keep the baseline's reports here and reuse them (keyed by commit)")
    parser.add_argument(
        "--apply",
        action="append",
        default=[],
        metavar="COMMIT",
        help="a later twin-only commit applied to the baseline tree first (e.g. a fix that makes runs reproducible)",
    )
    parser.add_argument("--template", action="store_true", help="also compare the synthesized templates")
    parser.add_argument("--baseline-only", action="store_true", help="only fill --cache with the baseline's reports")
    args = parser.parse_args(argv)
    caps = dict(DEFAULT_CAPS)
    caps.update({k: float(v) for k, v in (c.split("=", 1) for c in args.cap)})
    names = args.only or sorted(p.stem for p in (REPO_ROOT / "tests" / "scenarios").glob("*.json"))
    with tempfile.TemporaryDirectory(prefix="hpdhc-parity-") as tmp:
        work = Path(tmp)
        baseline_tree = work / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "-q", str(baseline_tree), args.baseline],
            check=True,
        )
        try:
            files = {n: scenario_file(n, caps.get(n), work) for n in names}
            commit = "+".join(_rev_parse(c)[:12] for c in (args.baseline, *args.apply))
            for fix in args.apply:
                subprocess.run(["git", "-C", str(baseline_tree), "cherry-pick", "--no-commit", fix], check=True)
            with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
                runs = {
                    (n, baseline_tree): pool.submit(_baseline, args.cache, commit, baseline_tree, files[n])
                    for n in names
                }
                if args.baseline_only:
                    for n in names:
                        runs[(n, baseline_tree)].result()
                    return 0
                for n in names:
                    runs[(n, REPO_ROOT)] = pool.submit(simulate, REPO_ROOT, files[n])
                if args.template:
                    templates = pool.submit(template, baseline_tree), pool.submit(template, REPO_ROOT)
                failed = 0
                applied = f" with {', '.join(args.apply)} applied" if args.apply else ""
                print(f"baseline {args.baseline}{applied}; reports compared without wall_s")
                for n in names:
                    diff = compare(n, runs[(n, baseline_tree)].result(), runs[(n, REPO_ROOT)].result())
                    horizon = f"capped at {caps[n]:.0f} s virtual" if n in caps else "whole horizon"
                    print(f"  {n:<18} {'equal' if not diff else 'DIFFERENT'}  ({horizon})")
                    if diff:
                        failed += 1
                        print("\n".join(f"      {line}" for line in diff))
                if args.template:
                    diff = compare("template", templates[0].result(), templates[1].result())
                    print(f"  {'template':<18} {'equal' if not diff else 'DIFFERENT'}  (asset hashes aside)")
                    if diff:
                        failed += 1
                        print("\n".join(f"      {line}" for line in diff))
        finally:
            subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(baseline_tree)])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
