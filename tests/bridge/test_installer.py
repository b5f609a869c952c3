"""The lifecycle snippet that installs the bridge (functions/hyperpod_dhc/hpdhc/lifecycle/install_slurm_bridge.sh)."""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hyperpod_dhc.hpdhc import bridge, gate
from tests.bridge.slurm_cluster import SlurmCluster

SNIPPET = Path(bridge.__file__).parent / "lifecycle" / "install_slurm_bridge.sh"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
UNIT = "etc/systemd/system/hpdhc-slurm-bridge.service"
CONTROLLER = ["--node-type", "controller", "--cluster", "ml-cluster-1",
              "--endpoint", "https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod/"]  # fmt: skip
# The unit's sandbox (tested below): root with no capability, everything read-only but its own directories.
HARDENING = {
    "User": "root",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "NoNewPrivileges": "yes",
    "StateDirectory": "hpdhc-bridge",
    "RuntimeDirectory": "hpdhc-bridge",
    "UMask": "0077",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "RestrictRealtime": "yes",
    "RestrictNamespaces": "yes",
    "SystemCallArchitectures": "native",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "RestartPreventExitStatus": "6 7",  # configuration, another bridge: restarting does not help
}
MAX_EXPOSURE = 2.0  # systemd-analyze security: 9.6 without the sandbox, 1.7 with it (systemd 252)


def snippet(*args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """The snippet run with os.environ and `env` (a None there unsets a variable)."""
    merged = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    return subprocess.run(["bash", str(SNIPPET), *args], capture_output=True, text=True, env=merged, check=False)


def planned(done: subprocess.CompletedProcess) -> list[str]:
    return [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]


def unit_settings(unit: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in unit.read_text().splitlines() if "=" in line and line[0] != "#")


def pip_free_env(**more: str) -> dict[str, str | None]:
    """No pip configuration: no pip.conf, no PIP_* variable but `more`."""
    return {**dict.fromkeys(k for k in os.environ if k.startswith("PIP_")), "PIP_CONFIG_FILE": os.devnull, **more}


def test_the_snippet_is_valid_bash():
    subprocess.run(["bash", "-n", str(SNIPPET)], check=True)


def test_the_snippet_installs_the_wheel_and_a_restarting_unit_on_the_controller(tmp_path):
    args = ["--node-type", "controller", "--cluster", "ml-cluster-1", "--wheel", "s3://bucket/hyperpod_dhc-0.1.0-py3-none-any.whl",
            "--endpoint", "https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod/", "--scontrol",
            "/opt/slurm/bin/scontrol", "--destdir", str(tmp_path), "--dry-run"]  # fmt: skip
    done = snippet(*args)
    assert done.returncode == 0, done.stderr
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert commands[0].startswith("aws s3 cp --region eu-west-1 s3://bucket/hyperpod_dhc-0.1.0-py3-none-any.whl ")
    assert commands[1:] == [
        "python3 -m venv /opt/hpdhc/venv",
        "/opt/hpdhc/venv/bin/pip install --quiet --disable-pip-version-check --upgrade " + commands[0].split()[-1],
    ]  # with --destdir nothing is enabled: the unit is for a package or an image
    unit = (tmp_path / "etc/systemd/system/hpdhc-slurm-bridge.service").read_text()
    service = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line)
    assert service["ExecStart"] == (
        "/opt/hpdhc/venv/bin/hpdhc bridge --cluster ml-cluster-1 "
        "--endpoint https://abc123defg.execute-api.eu-west-1.amazonaws.com/prod/ --region eu-west-1 "
        "--scontrol /opt/slurm/bin/scontrol --provisioning-parameters /opt/ml/config/provisioning_parameters.json "
        "--state-dir /var/lib/hpdhc-bridge"
    )
    assert (service["Restart"], service["WantedBy"]) == ("always", "multi-user.target")
    assert "slurmctld.service" in service["After"]
    # What the unit runs parses as `hpdhc bridge` arguments.
    parsed = bridge.parser().parse_args(service["ExecStart"].split()[2:])
    assert (parsed.cluster, parsed.region, parsed.interval, parsed.once) == ("ml-cluster-1", "eu-west-1", None, False)
    assert parsed.state_dir == Path("/var/lib", service["StateDirectory"])  # the directory systemd makes writable


def test_the_snippet_finds_the_controller_node_as_the_base_config_does(tmp_path):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.254.254.254", 1))
        address = probe.getsockname()[0]
    except OSError:
        address = "127.0.0.1"
    finally:
        probe.close()
    resources = tmp_path / "resource_config.json"
    parameters = tmp_path / "provisioning_parameters.json"
    parameters.write_text(json.dumps({"controller_group": "controller-machine", "login_group": "login"}))
    common = ["--cluster", "c", "--endpoint", "https://x.execute-api.us-east-2.amazonaws.com/prod",
              "--wheel", "/tmp/w.whl", "--provisioning-parameters", str(parameters), "--destdir", str(tmp_path),
              "--dry-run"]  # fmt: skip
    for group, installs in (("controller-machine", True), ("login", False), ("p5-workers", False)):
        instances = [{"InstanceName": "n1", "CustomerIpAddress": address}]
        resources.write_text(json.dumps({"InstanceGroups": [{"Name": group, "Instances": instances}]}))
        done = snippet(*common, env={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(resources)})
        assert done.returncode == 0, done.stderr
        assert ("venv" in done.stdout) == installs, done.stdout
    resources.write_text(json.dumps({"InstanceGroups": []}))
    done = snippet(*common, env={"SAGEMAKER_RESOURCE_CONFIG_PATH": str(resources)})
    assert done.returncode == 1 and "pass --node-type" in done.stderr


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--cluster", "bad name", "--endpoint", "https://x", "--wheel", "w"], "--cluster"),
        (["--cluster", "c", "--endpoint", "ftp://x", "--wheel", "w"], "--endpoint"),
        (["--cluster", "c", "--endpoint", "https://x", "--wheel", "w"], "--region needed"),
        (["--cluster", "c", "--endpoint", "https://x", "--region", "us-east-1"], "--wheel"),
        (["--cluster"], "--cluster needs a value"),
        (["--bogus", "x"], "unknown argument: --bogus"),
    ],
)
def test_the_snippet_refuses_what_would_make_a_broken_unit(args, error):
    done = snippet("--node-type", "controller", "--dry-run", *args)
    assert done.returncode == 1 and error in done.stderr


def test_a_node_that_cannot_be_told_a_worker_fails_loudly(tmp_path):
    """Only a node positively in a login or compute group is skipped (exit 0): a doubt is an error (exit 1), so that
    a controller never goes without its bridge in silence."""
    resources, parameters = tmp_path / "resource_config.json", tmp_path / "provisioning_parameters.json"
    common = ["--cluster", "c", "--endpoint", "https://x.execute-api.us-east-2.amazonaws.com/prod",
              "--wheel", "/tmp/w.whl", "--provisioning-parameters", str(parameters), "--dry-run"]  # fmt: skip
    env = {"SAGEMAKER_RESOURCE_CONFIG_PATH": str(resources)}
    everyone = [{"Name": "workers", "Instances": [{"CustomerIpAddress": ip} for ip in own_addresses()]}]
    for resource_config, provisioning in (
        (None, {"controller_group": "controller-machine"}),  # no resource_config.json: not a HyperPod node
        ({"InstanceGroups": everyone}, {"login_group": "login"}),  # no controller_group: every node would be a worker
        ({"Groups": []}, {"controller_group": "controller-machine"}),
        ({"InstanceGroups": everyone}, None),
    ):
        for path, content in ((resources, resource_config), (parameters, provisioning)):
            path.unlink(missing_ok=True)
            if content is not None:
                path.write_text(json.dumps(content))
        done = snippet(*common, env=env)
        assert done.returncode == 1, (resource_config, provisioning, done.stdout)
        assert "cannot tell whether this is the Slurm controller node; pass --node-type" in done.stderr
        assert not planned(done)
    parameters.write_text(json.dumps({"controller_group": "controller-machine"}))
    resources.write_text(json.dumps({"InstanceGroups": everyone}))
    done = snippet(*common, env=env)
    assert done.returncode == 0 and "instance group workers (compute)" in done.stdout
    assert "nothing to do" in done.stdout and not planned(done)
    done = snippet(*common, "--node-type", "worker")
    assert done.returncode == 1 and "--node-type is auto, controller, login or compute" in done.stderr


def own_addresses() -> list[str]:
    """The address the snippet (and the base-config) takes for this node's, and loopback should it find none."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.254.254.254", 1))
        return [probe.getsockname()[0], "127.0.0.1"]
    except OSError:
        return ["127.0.0.1"]
    finally:
        probe.close()


def test_a_wheelhouse_installs_with_no_index_and_no_download(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    done = snippet(*CONTROLLER, "--wheelhouse", str(wheelhouse), "--python", sys.executable, "--dry-run",
                   env=pip_free_env(PIP_INDEX_URL="https://pypi.example/simple"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert planned(done) == [
        f"{sys.executable} -m venv /opt/hpdhc/venv",
        "env PIP_CONFIG_FILE=/dev/null /opt/hpdhc/venv/bin/pip install --quiet --disable-pip-version-check --upgrade "
        f"--isolated --no-index --find-links {wheelhouse} hyperpod-dhc",
        "cat > /etc/systemd/system/hpdhc-slurm-bridge.service",
        "systemctl daemon-reload",
        "systemctl enable --now hpdhc-slurm-bridge.service",
    ]  # no aws s3 cp, no index: pip's configuration and PIP_* variables are ignored too
    assert f"from the wheelhouse {wheelhouse} only (no download)" in done.stdout
    assert "pypi" not in done.stdout.lower()
    # A wheel named as well: that one, its dependencies from the wheelhouse.
    done = snippet(*CONTROLLER, "--wheelhouse", str(wheelhouse), "--wheel", "/srv/hyperpod_dhc-0.1.0-py3-none-any.whl",
                   "--dry-run")  # fmt: skip
    assert planned(done)[1].endswith(f"--find-links {wheelhouse} /srv/hyperpod_dhc-0.1.0-py3-none-any.whl")
    done = snippet(*CONTROLLER, "--wheelhouse", str(tmp_path / "nowhere"), "--dry-run")
    assert done.returncode == 1 and "--wheelhouse" in done.stderr and "no such directory" in done.stderr


def test_without_a_wheelhouse_it_says_what_it_downloads_and_from_where(tmp_path):
    wheel = tmp_path / "hyperpod_dhc-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        metadata = "Metadata-Version: 2.4\nName: hyperpod-dhc\nVersion: 0.1.0\nRequires-Dist: boto3>=1.40\n"
        archive.writestr("hyperpod_dhc-0.1.0.dist-info/METADATA", metadata)
    for env, sources in (
        (pip_free_env(), "https://pypi.org/simple (PyPI)"),
        (pip_free_env(PIP_INDEX_URL="https://pypi.example/simple", PIP_FIND_LINKS="/srv/wheels"),
         "https://pypi.example/simple, /srv/wheels"),
    ):  # fmt: skip
        done = snippet(*CONTROLLER, "--wheel", str(wheel), "--python", sys.executable, "--dry-run", env=env)
        assert done.returncode == 0, done.stderr
        said = done.stdout.index(f"pip downloads its dependencies (boto3>=1.40, and theirs) from {sources}\n")
        assert said < done.stdout.index("+ /opt/hpdhc/venv/bin/pip install")  # before it installs
        assert "needs --wheelhouse" in done.stdout
    help_text = snippet("--help").stdout
    assert "--wheelhouse DIR" in help_text and "pip download -d wheelhouse" in help_text


def test_the_python_floor_is_the_wheels_and_an_older_python_is_refused(tmp_path):
    floor = re.search(r'^requires-python = ">=(\d+\.\d+)"$', PYPROJECT.read_text(), re.M)
    assert floor and f"PYTHON_FLOOR={floor[1]} " in SNIPPET.read_text()
    older = python39()
    if older is None:
        pytest.skip("no Python 3.9 here (pyenv's or python3.9 on PATH)")
    version = subprocess.run([older, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    done = snippet(*CONTROLLER, "--wheel", "/tmp/w.whl", "--python", older, "--dry-run")
    assert done.returncode == 1 and not planned(done)
    assert f"{older} is Python {version}, older than the bridge's floor 3.10; pass --python" in done.stderr
    done = snippet(*CONTROLLER, "--wheel", "/tmp/w.whl", "--python", str(tmp_path / "python-nowhere"), "--dry-run")
    assert done.returncode == 1 and "cannot run" in done.stderr


def python39() -> str | None:
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = [*sorted(glob.glob(f"{root}/versions/3.9.*/bin/python3.9"), reverse=True), shutil.which("python3.9")]
    for candidate in filter(None, candidates):
        check = [candidate, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 9))"]
        if subprocess.run(check, capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def test_the_unit_is_sandboxed_and_systemd_accepts_it(tmp_path):
    prefix = tmp_path / "opt"
    (prefix / "venv/bin").mkdir(parents=True)
    (prefix / "venv/bin/hpdhc").write_text("#!/bin/sh\n")
    (prefix / "venv/bin/hpdhc").chmod(0o755)
    done = snippet(*CONTROLLER, "--wheel", "/w.whl", "--prefix", str(prefix), "--destdir", str(tmp_path), "--dry-run")
    assert done.returncode == 0, done.stderr
    unit = tmp_path / UNIT
    service = unit_settings(unit)
    assert {key: service.get(key) for key in HARDENING} == HARDENING
    assert "ReadWritePaths" not in service  # nothing but its state and runtime directories is writable
    assert service["ExecStart"].startswith(f"{prefix}/venv/bin/hpdhc bridge ")
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze here")
    verify = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr
    security = subprocess.run([analyze, "security", "--offline=yes", str(unit)], capture_output=True, text=True)
    exposure = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security.stdout)
    assert exposure and float(exposure[1]) <= MAX_EXPOSURE, security.stdout[-2000:]


def test_scontrol_update_works_inside_the_units_sandbox(slurm: SlurmCluster, tmp_path):
    """What the unit takes away, on a real Slurm: scontrol drains and resumes a node as root with no capability and
    no new privileges, with Slurm's directory (its config and munge's socket) mounted read-only."""
    assert snippet(*CONTROLLER, "--wheel", "/tmp/w.whl", "--destdir", str(tmp_path), "--dry-run").returncode == 0
    service = unit_settings(tmp_path / UNIT)
    emulated = {key: service[key] for key in ("CapabilityBoundingSet", "NoNewPrivileges", "ProtectSystem")}
    assert emulated == {"CapabilityBoundingSet": "", "NoNewPrivileges": "yes", "ProtectSystem": "strict"}
    tools = [shutil.which(tool) for tool in ("unshare", "setpriv", "mount")]
    if None in tools:
        pytest.skip("needs unshare, setpriv and mount (util-linux)")
    root = slurm.conf.parent

    def sandboxed(*args: str) -> subprocess.CompletedProcess:
        script = (f"mount --bind {root} {root} && mount -o remount,bind,ro {root} && "
                  f"if touch {root}/writable 2>/dev/null; then echo writable >&2; exit 99; fi; "
                  "exec setpriv --bounding-set=-all --inh-caps=-all --no-new-privs -- " + shlex.join(args))  # fmt: skip
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                              env=slurm.env, capture_output=True, text=True, check=False)  # fmt: skip

    node = "ip-10-0-0-1"
    done = sandboxed("scontrol", "update", f"nodename={node}", "state=drain", "reason=sandboxed")
    assert done.returncode == 0, done.stderr
    assert "DRAIN" in slurm.line(node) and "Reason=sandboxed" in slurm.line(node)
    done = sandboxed("sh", "-c", "grep CapBnd /proc/self/status; scontrol update nodename=ip-10-0-0-1 state=resume")
    assert done.returncode == 0, done.stderr
    assert "CapBnd:\t0000000000000000" in done.stdout and "DRAIN" not in slurm.line(node)


def test_on_a_compute_node_the_gate_drains_it_before_slurmd_and_installs_no_unit(tmp_path):
    compute = ["--node-type", "compute", *CONTROLLER[2:]]
    done = snippet(*compute, "--wheel", "/srv/hyperpod_dhc-0.1.0-py3-none-any.whl", "--python", sys.executable,
                   "--scontrol", "/opt/slurm/bin/scontrol", "--dry-run")  # fmt: skip
    assert done.returncode == 0 and planned(done) == [] and "nothing to do" in done.stdout
    done = snippet(*compute, "--gate", "--wheel", "/srv/hyperpod_dhc-0.1.0-py3-none-any.whl", "--python",
                   sys.executable, "--scontrol", "/opt/slurm/bin/scontrol", "--dry-run")  # fmt: skip
    assert done.returncode == 0, done.stderr
    steps = planned(done)
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    assert steps[-1] == (f"/opt/hpdhc/venv/bin/hpdhc gate node-boot --cluster ml-cluster-1 --node {node} "
                         "--scontrol /opt/slurm/bin/scontrol "
                         "--provisioning-parameters /opt/ml/config/provisioning_parameters.json")  # fmt: skip
    assert not any("systemctl" in step or "cat >" in step for step in steps), "no service on a compute node"
    # What it runs parses as `hpdhc gate` arguments: the cluster (its lock) and the default marker directory.
    parsed = gate.parser().parse_args(steps[-1].split()[2:])
    assert (parsed.cluster, parsed.node, parsed.marker_dir) == ("ml-cluster-1", node, Path(gate.MARKER_DIR))


# The base-config's on_create.sh (aws-samples/awsome-distributed-training,
# 1.architectures/5.sagemaker-hyperpod/LifecycleScripts/base-config/on_create.sh), its order kept: set -ex, the
# resource config's path, then lifecycle_script.py, which starts slurmctld or slurmd. Its log file and sleep are left
# out; @SNIPPET@ marks where the documented line goes.
BASE_ON_CREATE = """#!/bin/bash

set -ex

PROVISIONING_PARAMETERS_PATH="provisioning_parameters.json"

if [[ -z "$SAGEMAKER_RESOURCE_CONFIG_PATH" ]]; then
  SAGEMAKER_RESOURCE_CONFIG_PATH="/opt/ml/config/resource_config.json"
  if [[ ! -f $SAGEMAKER_RESOURCE_CONFIG_PATH ]]; then
    exit 0
  fi
fi

@SNIPPET@
python3 -u lifecycle_script.py \\
  -rc $SAGEMAKER_RESOURCE_CONFIG_PATH \\
  -pp $PROVISIONING_PARAMETERS_PATH

exit_code=$?

exit $exit_code
"""
FAKE_LIFECYCLE_SCRIPT = "import sys\nprint('lifecycle_script.py ran', *sys.argv[1:], flush=True)\n"


def documented_line() -> str:
    """The one on_create.sh line the install docs give, the same in the snippet's header."""
    docs = (PYPROJECT.parent / "docs" / "OPERATIONS.md").read_text()
    lines = {line for line in docs.splitlines() if line.startswith("bash install_slurm_bridge.sh ")}
    assert len(lines) == 1, lines
    line = lines.pop()
    assert f"#     {line}\n" in SNIPPET.read_text()
    assert "just above `python3 -u lifecycle_script.py \\`" in docs
    return line


def test_the_documented_call_site_runs_before_lifecycle_script_py_on_every_node(tmp_path):
    """The documented line placed where the docs say in the base-config's on_create.sh: on a compute node the gate
    runs before lifecycle_script.py (so before slurmd), the controller gets its unit, a login node is left alone, and
    on_create.sh goes on to lifecycle_script.py each time."""
    line = documented_line()
    line = line.replace("<name>", "ml-cluster-1").replace("<ApiEndpoint output>", CONTROLLER[-1])
    lifecycle = tmp_path / "lifecycle"  # the lifecycle scripts' S3 prefix, as HyperPod copies it to the node
    lifecycle.mkdir()
    shutil.copy(SNIPPET, lifecycle / "install_slurm_bridge.sh")
    (lifecycle / "lifecycle_script.py").write_text(FAKE_LIFECYCLE_SCRIPT)
    parameters = lifecycle / "provisioning_parameters.json"
    parameters.write_text(json.dumps({"controller_group": "controller-machine", "login_group": "login"}))
    resources = tmp_path / "resource_config.json"
    # The test's own: print instead of install, the unit under tmp, this Python for the venv.
    test_only = (f" --provisioning-parameters {parameters} --destdir {tmp_path / 'root'} --python {sys.executable}"
                 " --scontrol /opt/slurm/bin/scontrol --dry-run")  # fmt: skip
    on_create = lifecycle / "on_create.sh"
    on_create.write_text(BASE_ON_CREATE.replace("@SNIPPET@", line + test_only))
    node = subprocess.run(["hostname", "-s"], capture_output=True, text=True, check=True).stdout.strip()
    unit = tmp_path / "root" / UNIT
    for group, kind in (("p5-workers", "compute"), ("controller-machine", "controller"), ("login", "login")):
        instances = [{"InstanceName": "n1", "CustomerIpAddress": ip} for ip in own_addresses()]
        resources.write_text(json.dumps({"InstanceGroups": [{"Name": group, "Instances": instances}]}))
        done = subprocess.run(["bash", str(on_create)], cwd=lifecycle, capture_output=True, text=True, check=False,
                              env={**os.environ, "SAGEMAKER_RESOURCE_CONFIG_PATH": str(resources)})  # fmt: skip
        assert done.returncode == 0, (kind, done.stderr)
        assert f"instance group {group} ({kind})" in done.stdout
        ran = done.stdout.index(f"lifecycle_script.py ran -rc {resources} -pp provisioning_parameters.json")
        if kind == "compute":
            gate_step = f"+ /opt/hpdhc/venv/bin/hpdhc gate node-boot --cluster ml-cluster-1 --node {node} "
            assert done.stdout.index(gate_step) < ran, done.stdout
            assert not unit.exists()
        elif kind == "controller":
            assert done.stdout.index(f"wrote {unit}") < ran
            assert "gate" not in unit_settings(unit)["ExecStart"]
        else:
            assert "login node: nothing to do" in done.stdout and not planned(done)


def test_a_marker_dir_reaches_the_gate_and_the_bridge_alike(tmp_path):
    common = [*CONTROLLER[2:], "--wheel", "/srv/hyperpod_dhc-0.1.0-py3-none-any.whl", "--python", sys.executable,
              "--marker-dir", "/fsx/hpdhc-gate", "--dry-run"]  # fmt: skip
    done = snippet("--node-type", "compute", "--gate", *common)
    assert done.returncode == 0, done.stderr
    parsed = gate.parser().parse_args(planned(done)[-1].split()[2:])
    assert parsed.marker_dir == Path("/fsx/hpdhc-gate")
    done = snippet("--node-type", "controller", "--destdir", str(tmp_path), *common)
    assert done.returncode == 0, done.stderr
    service = unit_settings(tmp_path / UNIT)
    assert service["ExecStart"].endswith(" --state-dir /var/lib/hpdhc-bridge --marker-dir /fsx/hpdhc-gate")
    assert bridge.parser().parse_args(service["ExecStart"].split()[2:]).marker_dir == Path("/fsx/hpdhc-gate")
    assert service["ReadWritePaths"] == "-/fsx/hpdhc-gate"  # the bridge clears a marker once the controller knows it
    for bad in ("fsx/relative", "/fsx/with space", "/fsx/%n", "/fsx/$HOME"):
        done = snippet("--node-type", "controller", *common, "--marker-dir", bad)
        assert done.returncode == 1 and "an absolute path without spaces" in done.stderr, bad
