#!/usr/bin/env bash
# hyperpod-dhc: the HyperPod lifecycle-script snippet for Slurm: the bridge (`hpdhc bridge`) as a systemd service on
# the Slurm controller node, and the boot gate (`hpdhc gate node-boot`) on compute nodes. One call site: on_create.sh,
# on every node, BEFORE the awsome-distributed-training base-config's lifecycle_script.py (which starts slurmctld
# and slurmd), i.e. this line just above its `python3 -u lifecycle_script.py \`, the snippet and the wheel shipped
# beside on_create.sh in the lifecycle scripts' S3 prefix:
#
#     bash install_slurm_bridge.sh --cluster <name> --endpoint <ApiEndpoint output> --wheel hyperpod_dhc-0.1.0-py3-none-any.whl --gate
#
# On the controller node it installs the wheel and the unit and starts it; slurmctld is not up yet, which the unit
# copes with: the bridge retries each pass until slurmctld answers, and Restart=always (RestartSec=10) restarts it
# should it exit. On a compute node, with --gate, it installs the wheel and runs the gate before slurmd starts, so
# the node registers locked. On a login node (or a compute node without --gate) it does nothing. It exits 0 on all
# of those, and 1 when it cannot tell the node's type (pass --node-type) or cannot install: on_create.sh (set -e)
# fails rather than leave a controller without its bridge. The gate itself never fails the launch: it exits 0,
# leaving a marker when it could not lock the node.
#
#   install_slurm_bridge.sh --cluster NAME --endpoint URL --wheel PATH|s3://BUCKET/KEY.whl (or --wheelhouse DIR)
#       [--node-type auto|controller|login|compute]  auto (default): this node's instance group, found by its IP
#                                  address in resource_config.json, against controller_group of the provisioning
#                                  parameters (the base-config's way); or pass the type its lifecycle_script.py has
#       [--region REGION]          default: the one in the endpoint (https://ID.execute-api.REGION.amazonaws.com/...)
#       [--python PYTHON]          a Python >= 3.10 with venv/ensurepip for the agent's venv (default python3: Ubuntu
#                                  22.04's 3.10 on HyperPod, with the python3-venv package)
#       [--wheelhouse DIR]         install the wheel and all it needs from DIR only (pip --no-index --find-links DIR,
#                                  pip's configuration ignored: nothing is downloaded); without --wheel, hyperpod-dhc
#                                  from DIR
#       [--scontrol PATH]          default: scontrol on PATH, else /opt/slurm/bin/scontrol (HyperPod's Slurm)
#       [--provisioning-parameters PATH]  default /opt/ml/config/provisioning_parameters.json
#       [--prefix DIR]             where the venv goes (default /opt/hpdhc)
#       [--destdir DIR]            write the unit under DIR instead of / (packaging, tests)
#       [--gate]                   on a compute node: install the wheel and run `hpdhc gate node-boot --cluster NAME`
#                                  for this node, which locks it in the controller's reservation hpdhc-NAME and drains
#                                  it until its deep health check passes; the one call site above runs it before slurmd
#                                  starts, so no job lands on the node first. It exits 0 whatever Slurm says
#       [--marker-dir DIR]         where the gate marks a node it could not lock (default /var/lib/hpdhc-gate, local)
#                                  and where the bridge looks for such marks: given, it goes to both the gate (compute)
#                                  and the unit's ExecStart (controller, with ReadWritePaths=-DIR to clear them). Point
#                                  both at shared storage, e.g. /fsx/hpdhc-gate, mounted when this line runs (the
#                                  base-config mounts /fsx in lifecycle_script.py, after it: a mark made before would
#                                  land under the mount point, hidden from the bridge)
#       [--dry-run]                print the commands instead of running them (and the unit, without --destdir)
#
# Downloads: without --wheelhouse, pip fetches the wheel's dependencies (boto3 and what it needs) from PyPI, or from
# the index pip is configured with (pip.conf, PIP_INDEX_URL); the snippet says which before it installs. A controller
# without egress to it needs --wheelhouse: build one on a machine with access, for the controller's Python and
# platform, and ship it beside the lifecycle scripts:
#     pip download -d wheelhouse --only-binary=:all: --python-version 3.10 --platform manylinux2014_x86_64 \
#         hyperpod_dhc-0.1.0-py3-none-any.whl
#
# The service runs `hpdhc bridge --cluster NAME --endpoint URL ... --state-dir /var/lib/hpdhc-bridge` with
# Restart=always, as root without capabilities (scontrol update needs Slurm's operator rights), sandboxed (the unit at
# the end of this script), signing its API calls with the instance role (execute-api:Invoke on the API).
set -euo pipefail

UNIT_NAME=hpdhc-slurm-bridge.service
STATE_DIR=/var/lib/hpdhc-bridge  # the unit's StateDirectory=
PYTHON_FLOOR=3.10                # requires-python of the wheel: Ubuntu 22.04's python3
CLUSTER="" ENDPOINT="" WHEEL="" REGION="" NODE_TYPE=auto PYTHON=python3 SCONTROL="" PREFIX=/opt/hpdhc DESTDIR=""
WHEELHOUSE="" DRY_RUN=0 GATE=0 MARKER_DIR=""
PROVISIONING=/opt/ml/config/provisioning_parameters.json
RESOURCE_CONFIG=${SAGEMAKER_RESOURCE_CONFIG_PATH:-/opt/ml/config/resource_config.json}

die() { echo "install_slurm_bridge: $*" >&2; exit 1; }
run() { if ((DRY_RUN)); then echo "+ $*"; else "$@"; fi; }

while (($#)); do
  case $1 in
    --dry-run) DRY_RUN=1; shift; continue ;;
    --gate) GATE=1; shift; continue ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  esac
  (($# >= 2)) || die "$1 needs a value"
  case $1 in
    --cluster) CLUSTER=$2 ;;
    --endpoint) ENDPOINT=$2 ;;
    --wheel) WHEEL=$2 ;;
    --node-type) NODE_TYPE=$2 ;;
    --region) REGION=$2 ;;
    --python) PYTHON=$2 ;;
    --wheelhouse) WHEELHOUSE=$2 ;;
    --scontrol) SCONTROL=$2 ;;
    --provisioning-parameters) PROVISIONING=$2 ;;
    --prefix) PREFIX=$2 ;;
    --destdir) DESTDIR=$2 ;;
    --marker-dir) MARKER_DIR=$2 ;;
    *) die "unknown argument: $1" ;;
  esac
  shift 2
done

# This node's type, as the base-config's lifecycle_script.py decides it. Anything that leaves it in doubt (no
# resource config, an address in no group, no controller_group to compare with) is an error, never "not the
# controller": a controller that skipped the install would leave the cluster without its bridge, silently.
node_type() {
  "$PYTHON" - "$RESOURCE_CONFIG" "$PROVISIONING" <<'EOF'
import json, socket, sys

try:
    resources, parameters = (json.load(open(path)) for path in sys.argv[1:3])
    groups = [(g.get("Name"), [i.get("CustomerIpAddress") for i in g.get("Instances") or []])
              for g in resources["InstanceGroups"]]
except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
    sys.exit(f"unreadable: {err!r}")
if not isinstance(parameters, dict) or not parameters.get("controller_group"):
    sys.exit(f"{sys.argv[2]} names no controller_group")
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    probe.connect(("10.254.254.254", 1))  # no packet is sent: this only picks the address of the default route
    address = probe.getsockname()[0]
except OSError:
    address = "127.0.0.1"
for name, addresses in groups:
    if address in addresses:
        kind = "controller" if name == parameters["controller_group"] else "login" if name == parameters.get("login_group") else "compute"
        print(kind, name)
        break
else:
    sys.exit(f"{address} is in no instance group of {sys.argv[1]}")
EOF
}

if [[ $NODE_TYPE == auto ]]; then
  found=$(node_type) || die "cannot tell whether this is the Slurm controller node; pass --node-type"
  NODE_TYPE=${found%% *}
  echo "install_slurm_bridge: this node is in instance group ${found#* } ($NODE_TYPE)"
fi
case $NODE_TYPE in
  controller) ;;
  compute) if ((!GATE)); then
    echo "install_slurm_bridge: compute node: nothing to do (the bridge runs on the Slurm controller node; --gate" \
      "drains a compute node before its slurmd starts)"
    exit 0
  fi ;;
  login)
    echo "install_slurm_bridge: login node: nothing to do (the bridge runs on the Slurm controller node)"
    exit 0 ;;
  *) die "--node-type is auto, controller, login or compute, not $NODE_TYPE" ;;
esac

[[ $CLUSTER =~ ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$ ]] || die "--cluster needs a HyperPod cluster name"
# Nothing systemd would expand in ExecStart (% specifiers, $ variables) or split (spaces).
[[ $ENDPOINT =~ ^https?://[A-Za-z0-9.:/_-]+$ ]] || die "--endpoint needs the API's URL (the stack's ApiEndpoint output)"
if [[ -n $WHEELHOUSE ]]; then
  [[ -d $WHEELHOUSE ]] || die "--wheelhouse $WHEELHOUSE: no such directory"
  WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
  [[ -n $WHEEL ]] || WHEEL=hyperpod-dhc
fi
[[ -n $WHEEL ]] || die "--wheel needs the hyperpod-dhc wheel (a path or an s3:// URL), or --wheelhouse a directory with it"
if [[ -z $REGION && $ENDPOINT =~ \.execute-api\.([a-z0-9-]+)\.amazonaws\.com ]]; then REGION=${BASH_REMATCH[1]}; fi
[[ -n $REGION ]] || die "--region needed: the endpoint names none"
[[ $REGION =~ ^[a-z0-9-]+$ ]] || die "--region $REGION is no AWS region"
[[ -n $SCONTROL ]] || SCONTROL=$(command -v scontrol || echo /opt/slurm/bin/scontrol)
for path in "$PREFIX" "$SCONTROL" "$PROVISIONING" ${MARKER_DIR:+"$MARKER_DIR"}; do  # they go into ExecStart as they are
  [[ $path =~ ^/[A-Za-z0-9._/+-]*$ ]] || die "$path: an absolute path without spaces, % or \$ (it goes into the unit)"
done

version=$("$PYTHON" -c 'import platform; print(platform.python_version())' 2>/dev/null) \
  || die "cannot run $PYTHON; pass --python"
"$PYTHON" -c "import sys; sys.exit(sys.version_info < (${PYTHON_FLOOR/./, }))" \
  || die "$PYTHON is Python $version, older than the bridge's floor $PYTHON_FLOOR; pass --python"
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
  || die "$PYTHON (Python $version) cannot make a venv: install python3-venv (Debian, Ubuntu) or pass --python"

# Where pip would download from: its configuration (pip.conf, PIP_* variables) as `pip config list` shows it, a
# variable before an [install] section before [global], else PyPI.
pip_sources() {
  local config
  config=$("$@" config list 2>/dev/null) || config=""
  "$PYTHON" - "$config" <<'EOF'
import sys

settings = {}
for line in sys.argv[1].splitlines():
    key, _, value = line.partition("=")
    section, _, name = key.rpartition(".")
    settings[section, name] = value.strip("'\"").split()
def setting(name):
    return next((settings[s, name] for s in (":env:", "install", "global") if (s, name) in settings), [])
index = setting("index-url") or ["https://pypi.org/simple (PyPI)"]
print(", ".join(dict.fromkeys(index + setting("extra-index-url") + setting("find-links"))))
EOF
}

# What the wheel needs (its Requires-Dist), when the wheel is a file here.
wheel_requires() {
  "$PYTHON" - "$1" <<'EOF' 2>/dev/null
import sys, zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(name for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in wheel.read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]  # extras are not installed
print(", ".join(requires) or "nothing")
EOF
}

if [[ $WHEEL == s3://* ]]; then
  echo "install_slurm_bridge: downloads $WHEEL with the AWS CLI (region $REGION, the instance role's rights)"
  download=$(mktemp -d)
  trap 'rm -rf "$download"' EXIT
  run aws s3 cp --region "$REGION" "$WHEEL" "$download/${WHEEL##*/}"  # pip reads the version from the file name
  WHEEL=$download/${WHEEL##*/}
fi
run "$PYTHON" -m venv "$PREFIX/venv"
pip=("$PREFIX/venv/bin/pip" install --quiet --disable-pip-version-check --upgrade)
if [[ -n $WHEELHOUSE ]]; then
  echo "install_slurm_bridge: installs $WHEEL and all it needs from the wheelhouse $WHEELHOUSE only (no download)"
  # No index, and no pip configuration or PIP_* variable adding another source (a find-links URL, say).
  pip=(env PIP_CONFIG_FILE=/dev/null "${pip[@]}" --isolated --no-index --find-links "$WHEELHOUSE")
else
  requires=$(wheel_requires "$WHEEL") && requires=" ($requires, and theirs)" || requires=""
  sources=$(if [[ -x $PREFIX/venv/bin/pip ]]; then pip_sources "$PREFIX/venv/bin/pip"; else pip_sources "$PYTHON" -m pip; fi)
  echo "install_slurm_bridge: installs $WHEEL; pip downloads its dependencies$requires from $sources"
  echo "install_slurm_bridge: a controller without egress to that needs --wheelhouse (see --help)"
fi
run "${pip[@]}" "$WHEEL"

if [[ $NODE_TYPE == compute ]]; then
  # The gate: locked in the controller's reservation and drained with our reason before slurmd registers, released
  # by the bridge once the node passes. It asks no API (the worker's role need not reach it): without an answer, the
  # lock is the safe side. It never fails the launch: it exits 0, and when slurmctld does not know this node within
  # its wait (or does not answer) it leaves a marker in its --marker-dir for the bridge, and says why in its log.
  node=$(hostname -s)
  echo "install_slurm_bridge: locks $node until its deep health check passes (hpdhc gate node-boot)"
  run "$PREFIX/venv/bin/hpdhc" gate node-boot --cluster "$CLUSTER" --node "$node" --scontrol "$SCONTROL" \
    --provisioning-parameters "$PROVISIONING" ${MARKER_DIR:+--marker-dir "$MARKER_DIR"}
  exit 0
fi

# The service's sandbox: what `hpdhc bridge` needs is to run scontrol (Slurm's config readable, munge's socket in
# /run/munge and slurmctld on the network reachable), to call the API and the instance metadata service (IPv4/IPv6),
# and to write its state dir (the lock and the last applied document); nothing else is writable (no ReadWritePaths:
# connecting to a Unix socket needs no writable mount). It stays root only for `scontrol update`: Slurm lets only
# SlurmUser, root or an operator (AdminLevel, which needs slurmdbd) drain or resume a node; it needs no capability
# for that (munge vouches for its uid), so it has none. `systemd-analyze security --offline=yes` on this unit
# (systemd 252): overall exposure 9.6 UNSAFE without the sandbox, 1.7 OK with it; what is left is its network (the
# API's addresses are not fixed), root, and the @resources system calls (without capabilities, they only lower limits).
# Under strace, scontrol 22.05 (show, update) and the agent's Python make no system call outside the filter and map
# no memory writable and executable (MemoryDenyWriteExecute).
unit_text="[Unit]
Description=hyperpod-dhc Slurm bridge: drains, resumes and labels Slurm nodes as the deep health check controller says
Wants=network-online.target
After=network-online.target munge.service slurmctld.service

[Service]
ExecStart=$PREFIX/venv/bin/hpdhc bridge --cluster $CLUSTER --endpoint $ENDPOINT --region $REGION --scontrol $SCONTROL --provisioning-parameters $PROVISIONING --state-dir $STATE_DIR${MARKER_DIR:+ --marker-dir $MARKER_DIR}
Restart=always
RestartSec=10
# A configuration error (6) or another bridge holding the lock (7) does not go away by restarting: the unit fails.
RestartPreventExitStatus=6 7
User=root
CapabilityBoundingSet=
AmbientCapabilities=
NoNewPrivileges=yes
StateDirectory=${STATE_DIR#/var/lib/}
StateDirectoryMode=0700
RuntimeDirectory=hpdhc-bridge
RuntimeDirectoryMode=0700
UMask=0077${MARKER_DIR:+
ReadWritePaths=-$MARKER_DIR}
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
PrivateIPC=yes
PrivateMounts=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictNamespaces=yes
MemoryDenyWriteExecute=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target"

if ((DRY_RUN)) && [[ -z $DESTDIR ]]; then
  printf '%s\n' "+ cat > /etc/systemd/system/$UNIT_NAME" "$unit_text"
else
  unit=$DESTDIR/etc/systemd/system/$UNIT_NAME
  mkdir -p "$(dirname "$unit")"
  printf '%s\n' "$unit_text" >"$unit"
  echo "install_slurm_bridge: wrote $unit"
fi
if [[ -z $DESTDIR ]]; then
  run systemctl daemon-reload
  run systemctl enable --now "$UNIT_NAME"
fi
