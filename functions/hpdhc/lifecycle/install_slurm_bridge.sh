#!/usr/bin/env bash
# hyperpod-dhc: install the Slurm bridge (`hpdhc bridge`) on a SageMaker HyperPod cluster's Slurm controller node,
# as a systemd service. A lifecycle-script snippet: call it from on_create.sh on every node (after Slurm is set up,
# e.g. after the awsome-distributed-training base-config's lifecycle_script.py); it acts on the controller node only
# and exits 0 anywhere else.
#
#   install_slurm_bridge.sh --cluster NAME --endpoint URL --wheel PATH|s3://BUCKET/KEY.whl
#       [--node-type auto|controller|login|compute]  auto (default): this node's instance group, found by its IP
#                                  address in resource_config.json, against controller_group of the provisioning
#                                  parameters (the base-config's way); or pass the type its lifecycle_script.py has
#       [--region REGION]          default: the one in the endpoint (https://ID.execute-api.REGION.amazonaws.com/...)
#       [--python PYTHON]          a Python >= 3.11 for the agent's venv (default python3)
#       [--scontrol PATH]          default: scontrol on PATH, else /opt/slurm/bin/scontrol (HyperPod's Slurm)
#       [--provisioning-parameters PATH]  default /opt/ml/config/provisioning_parameters.json
#       [--prefix DIR]             where the venv goes (default /opt/hpdhc)
#       [--destdir DIR]            write the unit under DIR instead of / (packaging, tests)
#       [--dry-run]                print the commands instead of running them (and the unit, without --destdir)
#
# The service runs `hpdhc bridge --cluster NAME --endpoint URL ...` with Restart=always, as root (scontrol update
# needs Slurm's operator rights), signing its API calls with the instance role (execute-api:Invoke on the API).
set -euo pipefail

UNIT_NAME=hpdhc-slurm-bridge.service
CLUSTER="" ENDPOINT="" WHEEL="" REGION="" NODE_TYPE=auto PYTHON=python3 SCONTROL="" PREFIX=/opt/hpdhc DESTDIR=""
DRY_RUN=0
PROVISIONING=/opt/ml/config/provisioning_parameters.json
RESOURCE_CONFIG=${SAGEMAKER_RESOURCE_CONFIG_PATH:-/opt/ml/config/resource_config.json}

die() { echo "install_slurm_bridge: $*" >&2; exit 1; }
run() { if ((DRY_RUN)); then echo "+ $*"; else "$@"; fi; }

while (($#)); do
  case $1 in
    --dry-run) DRY_RUN=1; shift; continue ;;
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
    --scontrol) SCONTROL=$2 ;;
    --provisioning-parameters) PROVISIONING=$2 ;;
    --prefix) PREFIX=$2 ;;
    --destdir) DESTDIR=$2 ;;
    *) die "unknown argument: $1" ;;
  esac
  shift 2
done

# This node's type, as the base-config's lifecycle_script.py decides it.
node_type() {
  "$PYTHON" - "$RESOURCE_CONFIG" "$PROVISIONING" <<'EOF'
import json, socket, sys

try:
    resources, parameters = (json.load(open(path)) for path in sys.argv[1:3])
except (OSError, ValueError) as err:
    sys.exit(f"unreadable: {err}")
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    probe.connect(("10.254.254.254", 1))  # no packet is sent: this only picks the address of the default route
    address = probe.getsockname()[0]
except OSError:
    address = "127.0.0.1"
for group in resources["InstanceGroups"]:
    if any(i.get("CustomerIpAddress") == address for i in group["Instances"]):
        name = group.get("Name")
        print("controller" if name == parameters.get("controller_group") else "login" if name == parameters.get("login_group") else "compute")
        break
else:
    sys.exit(f"{address} is in no instance group of resource_config.json")
EOF
}

[[ $NODE_TYPE == auto ]] && { NODE_TYPE=$(node_type) || die "cannot tell this node's type; pass --node-type"; }
if [[ $NODE_TYPE != controller ]]; then
  echo "install_slurm_bridge: $NODE_TYPE node: nothing to do (the bridge runs on the Slurm controller node)"
  exit 0
fi

[[ $CLUSTER =~ ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$ ]] || die "--cluster needs a HyperPod cluster name"
# Nothing systemd would expand in ExecStart (% specifiers, $ variables) or split (spaces).
[[ $ENDPOINT =~ ^https?://[A-Za-z0-9.:/_-]+$ ]] || die "--endpoint needs the API's URL (the stack's ApiEndpoint output)"
[[ -n $WHEEL ]] || die "--wheel needs the hyperpod-dhc wheel (a path or an s3:// URL)"
if [[ -z $REGION && $ENDPOINT =~ \.execute-api\.([a-z0-9-]+)\.amazonaws\.com ]]; then REGION=${BASH_REMATCH[1]}; fi
[[ -n $REGION ]] || die "--region needed: the endpoint names none"
[[ -n $SCONTROL ]] || SCONTROL=$(command -v scontrol || echo /opt/slurm/bin/scontrol)

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PYTHON is older than 3.11; pass --python"

if [[ $WHEEL == s3://* ]]; then
  download=$(mktemp -d)
  trap 'rm -rf "$download"' EXIT
  run aws s3 cp --region "$REGION" "$WHEEL" "$download/${WHEEL##*/}"  # pip reads the version from the file name
  WHEEL=$download/${WHEEL##*/}
fi
run "$PYTHON" -m venv "$PREFIX/venv"
run "$PREFIX/venv/bin/pip" install --quiet --disable-pip-version-check --upgrade "$WHEEL"

unit_text="[Unit]
Description=hyperpod-dhc Slurm bridge: drains, resumes and labels Slurm nodes as the deep health check controller says
Wants=network-online.target
After=network-online.target slurmctld.service

[Service]
ExecStart=$PREFIX/venv/bin/hpdhc bridge --cluster $CLUSTER --endpoint $ENDPOINT --region $REGION --scontrol $SCONTROL --provisioning-parameters $PROVISIONING
Restart=always
RestartSec=10

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
