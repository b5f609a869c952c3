"""The fidelity matrix: the controller under every reading of what HyperPod does not document.

    python -m tests.twin.fidelity [--only NAME ...] [--jobs N] [--json]      (also `make fidelity`)

Each variant is tests/scenarios/fidelity.json (24 nodes in three groups, NodeRecovery None, transient and
persistent faults, event and API faults) with overrides merged over it: one reading of `tests/fakes/readings.py`
alone (a key with each of its non-default values), a few readings that only matter together with a workload or
an incident, and adversarial combinations. One row per variant: the verdicts, how many were wrong against the
ground truth (false_pass, untested_pass, false_fail), the controller's actions and the ready -> verdict p95.
A variant the fake cannot play yet (a reading, `set_busy` or `move_nodes` still missing) is shown as skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
FIDELITY_SCENARIO = REPO_ROOT / "tests" / "scenarios" / "fidelity.json"

Overrides = dict[str, Any]

BUSY_30 = {"busy_rate": 0.3, "job_s": [600, 3600]}
FOREIGN_IDLE = {"kind": "foreign-check", "group": "p5-workers", "nodes": 2, "after_s": 3600}
FOREIGN_OURS = {"kind": "foreign-check", "group": "p5-workers", "nodes": 2, "during": "ours"}
MOVE = {"kind": "move-nodes", "from_group": "p5-workers", "to_group": "p5-reserve", "nodes": 2, "after_s": 7200}
AUTO_RECOVERY = {"reboot_fraction": 0.5, "delay_s": [0, 300], "reboot_s": [60, 180]}
# InstanceConnectivity too (5-10 min, after InstanceStress), for the readings of multi-node lines.
CONNECTIVITY = {
    "check_duration_s": {"InstanceConnectivity": [300, 600]},
    "policy": {"defaults": {"checks": ["InstanceStress", "InstanceConnectivity"]}},
}
# The Slurm bridge at 70 % load (jobs 30-120 min): what the readings cost in job-hours (docs/FIDELITY.md).
BRIDGE_70 = {"utilisation": 0.7, "job_s": [1800, 7200], "slurm_bridge": True}
# Checks as long as AWS documents them (InstanceStress: DCGM level 4 alone is 45-90 min).
DOCUMENTED_CHECKS = {"InstanceStress": [2900, 5700]}
EFA_FAULT = {"faulty_test": "efa", "result_format": "doc-2026-lines"}
# An isolated node that holds HyperPod's operation open and writes no failure line, 20 nodes arriving over 4 h.
WEDGE_GROUPS = [
    {"name": "p5-workers", "instance_type": "ml.p5.48xlarge", "count": 20, "arrival": {"start_s": 0, "spread_s": 14400}}
]
UNTAUGHT = "GPU burn-in 8/8 complete (gpu_burn 60 s)"  # a line the built-in rules do not place
TAUGHT = {"result_patterns": {"neutral": [r"^GPU burn-in \d+/\d+ complete \(gpu_burn \d+ s\)$"]}}

# (name, overrides merged over fidelity.json): dicts merge key by key, anything else (lists) replaces.
VARIANTS: list[tuple[str, Overrides]] = [
    ("baseline", {}),
    # Result-log attribution (audit #2, V2)
    ("stream-opaque", {"fidelity": {"result_stream": "opaque", "result_line_instance": "none"}}),
    ("stream-hostname", {"fidelity": {"result_stream": "hostname", "result_line_instance": "none"}}),
    ("stream-opaque-field", {"fidelity": {"result_stream": "opaque", "result_line_instance": "field"}}),
    ("stream-opaque-message", {"fidelity": {"result_stream": "opaque", "result_line_instance": "message"}}),
    # CloudWatch ingestion lag (#3, V3)
    ("log-lag", {"fidelity": {"log_lag_s": [0, 180]}}),
    ("lines-per-test", {"fidelity": {"result_lines": "per-test"}}),
    # Status after a failed on-demand check under NodeRecovery=None (#4, V4)
    ("failed-in-progress", {"fidelity": {"failed_status": "DeepHealthCheckInProgress"}}),
    ("failed-failure", {"fidelity": {"failed_status": "Failure"}}),
    # A second StartClusterHealthCheck (#5, V5)
    ("second-merge", {"fidelity": {"second_check_request": "merge"}, "incidents": [FOREIGN_IDLE]}),
    ("second-supersede", {"fidelity": {"second_check_request": "supersede"}, "incidents": [FOREIGN_OURS]}),
    (
        "busy-error-conflict",
        {
            "fidelity": {
                "busy_error": {"code": "ConflictException", "message": "There is an existing DeepHealthCheck operation"}
            },
            "incidents": [FOREIGN_IDLE],
        },
    ),
    # Jobs on nodes (#1, V1) and the status of a queued node (#6, V6)
    ("workload", {"workload": BUSY_30}),
    ("queued-in-progress", {"fidelity": {"queued_status": "DeepHealthCheckInProgress"}, "workload": BUSY_30}),
    # HyperPod's own recovery under NodeRecovery=Automatic (#7, V7)
    ("auto-recovery", {"cluster": {"node_recovery": "Automatic"}, "fidelity": {"auto_recovery": AUTO_RECOVERY}}),
    # Instance types HyperPod does not check (#8, V8)
    ("unsupported-reject", {"fidelity": {"unsupported_types": {"patterns": ["ml.g5*"], "behaviour": "reject"}}}),
    ("unsupported-skip", {"fidelity": {"unsupported_types": {"patterns": ["ml.g5*"], "behaviour": "skip"}}}),
    # Launch failures, Failure with retry, nodes missing from listings (#9, V9)
    ("transient-failure", {"fidelity": {"transient_failure_rate": 0.2}}),
    ("vanish", {"fidelity": {"vanish_s": [60, 600], "transient_failure_rate": 0.2}}),
    # The listing and the check start (#10, V10, V11)
    ("creation-logical", {"fidelity": {"creation_time_filter": "logical"}}),
    ("check-start-delay", {"fidelity": {"check_start_delay_s": [30, 1200]}}),
    # Events (V12)
    ("event-metadata-null", {"fidelity": {"event_metadata": "null"}}),
    ("event-wording-reference", {"fidelity": {"event_wording": "reference"}}),
    # MoveClusterNodes (V13): EKS clusters only in the API model, so an operator's move an EKS-minded tool might make;
    # kept to prove a node seen in another group is checked again, not as a HyperPod Slurm behaviour.
    ("move-nodes-eks-only", {"incidents": [MOVE]}),
    # Stream names by NodeLogicalId, the documented line formats, and how failures and passes are written
    ("stream-logical-id", {"fidelity": {"result_stream": "logical-id"}}),
    ("doc-plain", {"fidelity": {"result_format": "doc-plain"}}),
    # The documented DCGM summary alone says the node failed (replacementRequired/rebootRequired: true at info)
    ("doc-plain-dcgm-only", {"fidelity": {"result_format": "doc-plain", "failure_line": "none"}}),
    ("doc-plain-warn", {"fidelity": {"result_format": "doc-plain", "failure_line": "warn"}}),
    ("doc-plain-efa-fault", {"fidelity": {"result_format": "doc-plain", "faulty_test": "efa"}}),
    ("failure-line-warn", {"fidelity": {"failure_line": "warn", "result_lines": "per-test"}}),
    ("failure-line-none", {"fidelity": {"failure_line": "none"}}),
    # No pass line at all: never passed by default (and one alert); passed on silence where the policy opts in
    ("pass-line-none", {"fidelity": {"pass_line": "none"}}),
    ("pass-line-none-silence", {"fidelity": {"pass_line": "none"}, "policy": {"defaults": {"pass_on_silence": True}}}),
    # Statuses outside the enum after a failed check; an isolated node that holds the operation; no retry of Failure
    ("failed-status-failed", {"fidelity": {"failed_status": "Failed"}}),
    ("failed-status-dhc-failed", {"fidelity": {"failed_status": "DeepHealthCheckFailed"}}),
    (
        "isolated-holds-operation",
        {"fidelity": {"failed_status": "DeepHealthCheckInProgress", "isolated_holds_operation": True}},
    ),
    ("failure-not-retried", {"fidelity": {"failed_status": "Failure", "failure_retried": False}}),
    ("failure-retry-slow", {"fidelity": {"failed_status": "Failure", "failure_retry_s": [1800, 3600]}}),
    # Multi-node checks: lines naming peers, an anonymous NCCL summary per node set
    ("peer-lines", {**CONNECTIVITY, "fidelity": {"peer_lines": True, "result_format": "doc-plain"}}),
    ("nccl-summary", {**CONNECTIVITY, "fidelity": {"nccl_summary": True, "result_format": "doc-plain"}}),
    # Hosts the listing does not report (the agent network's ip-...): in the hostname stream, and in line texts
    ("foreign-hostnames", {"fidelity": {"foreign_hostnames": True, "result_stream": "hostname"}}),
    ("foreign-hostnames-in-lines", {"fidelity": {"foreign_hostnames": True, "result_line_instance": "message"}}),
    # The page's lines verbatim (tests/corpus/aws_doc.py): 2024, and 2026 one event per physical line or per record
    ("doc-2024", {"fidelity": {"result_format": "doc-2024"}}),
    ("doc-2026-lines", {"fidelity": {"result_format": "doc-2026-lines"}}),
    ("doc-2026-records", {"fidelity": {"result_format": "doc-2026-records"}}),
    # The DCGM record split over three events is the only failure evidence: it still fails, with its hint.
    ("doc-2026-lines-dcgm-only", {"fidelity": {"result_format": "doc-2026-lines", "failure_line": "none"}}),
    ("doc-2024-connectivity", {**CONNECTIVITY, "fidelity": {"result_format": "doc-2024"}}),
    # Stamped when each test ran (90 min checks), shipped at the check's end: lateness, not age.
    (
        "line-stamps-test-time",
        {
            "check_duration_s": DOCUMENTED_CHECKS,
            "fidelity": {"result_format": "doc-2026-lines", "line_stamps": "test-time"},
        },
    ),
    # The failing EFA device's line 1.5-3 h late while the other lines arrive within a minute: the scan finds it.
    (
        "failure-line-lag",
        {"fidelity": {**EFA_FAULT, "log_lag_s": [0, 60], "failure_line_lag_s": [5400, 10800]}},
    ),
    # Node clocks ahead 5.5-8 min (per-test stamps): a failure stamped past the pass window still fails the node.
    ("node-clock-ahead", {"fidelity": {**EFA_FAULT, "line_stamps": "test-time", "node_clock_skew_s": [330, 480]}}),
    ("node-clock-behind", {"fidelity": {**EFA_FAULT, "line_stamps": "test-time", "node_clock_skew_s": [-240, -30]}}),
    # EFA devices as HyperPod tests them: fewer than the table says on p5 (a policy override says so too), none on g5.
    (
        "efa-devices",
        {
            "fidelity": {"result_format": "doc-2026-records", "efa_devices": {"ml.p5.48xlarge": 4, "ml.g5.8xlarge": 0}},
            "policy": {
                "groups": {
                    "p5-workers": {"efa_devices": 4},
                    "p5-reserve": {"efa_devices": 4},
                    "g5-workers": {"efa_devices": 0},
                }
            },
        },
    ),
    # A stream no node owns: an anonymous error line and a forged summary at every check.
    ("foreign-lines", {"fidelity": {"result_format": "doc-2024", "foreign_lines": True}}),
    # A line the rules do not place: inconclusive with alerts; taught with a neutral pattern, no longer.
    ("extra-lines", {"fidelity": {"result_format": "doc-2024", "extra_lines": [UNTAUGHT]}}),
    (
        "extra-lines-taught",
        {"fidelity": {"result_format": "doc-2024", "extra_lines": [UNTAUGHT]}, "policy": {"defaults": TAUGHT}},
    ),
    # The wedge: an isolated node holds the operation and writes no failure line (20 nodes arriving over 4 h).
    (
        "isolated-wedge",
        {
            "groups": WEDGE_GROUPS,
            "horizon_s": 86400,
            "hardware": {"transient_fault_rate": 0.0, "persistent_fault_rate": 0.0, "faulty_nodes": {"persistent": 2}},
            "fidelity": {
                "failed_status": "DeepHealthCheckInProgress",
                "isolated_holds_operation": True,
                "failure_line": "none",
            },
        },
    ),
    # Launches that fail and that HyperPod never retries: recorded, then acted on.
    (
        "launch-failure-not-retried",
        {"horizon_s": 86400, "fidelity": {"transient_failure_rate": 0.2, "failure_retried": False}},
    ),
    # The Slurm bridge at 70 % load on the trimmed lines and on the page's lines verbatim: the same job-hours.
    ("bridge-doc-plain", {"workload": BRIDGE_70, "fidelity": {"result_format": "doc-plain"}}),
    ("bridge-doc-2024", {"workload": BRIDGE_70, "fidelity": {"result_format": "doc-2024"}}),
    ("bridge-doc-2026-lines", {"workload": BRIDGE_70, "fidelity": {"result_format": "doc-2026-lines"}}),
    # The acceptance case: log lag, exactly 8 of 20 nodes persistently faulty
    (
        "acceptance-lag-8-of-20",
        {
            "groups": [
                {"name": "p5-workers", "count": 10, "arrival": {"start_s": 0, "spread_s": 5400}},
                {"name": "p5-reserve", "count": 4, "arrival": {"start_s": 600, "spread_s": 3600}},
                {
                    "name": "g5-workers",
                    "instance_type": "ml.g5.8xlarge",
                    "count": 6,
                    "arrival": {"start_s": 1800, "spread_s": 3600},
                },
            ],
            "hardware": {"transient_fault_rate": 0.0, "persistent_fault_rate": 0.0, "faulty_nodes": {"persistent": 8}},
            "fidelity": {"log_lag_s": [0, 180]},
        },
    ),
    # Adversarial combinations
    (
        "adv-opaque-lag-queued",
        {
            "fidelity": {
                "result_stream": "opaque",
                "result_line_instance": "none",
                "log_lag_s": [0, 180],
                "queued_status": "DeepHealthCheckInProgress",
            },
            "workload": BUSY_30,
        },
    ),
    # A faulty node's pass lines readable before its error line, each late by up to the settle time.
    ("adv-per-test-lag", {"fidelity": {"result_lines": "per-test", "log_lag_s": [0, 180]}}),
    # Lines per test with a lag far beyond any fixed settle time: the settle time follows the measured lag, and a
    # pass made before a late failure line arrived is reversed (the acceptance case of "late evidence").
    ("adv-per-test-lag-600", {"fidelity": {"result_lines": "per-test", "log_lag_s": [0, 600]}}),
    (
        "adv-efa-fault-lag-600",
        {"fidelity": {"result_format": "doc-plain", "faulty_test": "efa", "log_lag_s": [0, 600]}},
    ),
    # The same with the settle time held short: every pass a late line would have made false is reversed.
    (
        "adv-efa-fault-lag-600-short-settle",
        {
            "fidelity": {"result_format": "doc-plain", "faulty_test": "efa", "log_lag_s": [0, 600]},
            "policy": {"defaults": {"log_settle_s": 30, "log_settle_floor_s": 30, "log_settle_max_s": 30}},
        },
    ),
    (
        "adv-stuck-supersede-slow",
        {
            "fidelity": {
                "failed_status": "DeepHealthCheckInProgress",
                "second_check_request": "supersede",
                "check_start_delay_s": [30, 1200],
            },
            "incidents": [FOREIGN_OURS],
        },
    ),
    (
        "adv-auto-reboot-null-events",
        {
            "cluster": {"node_recovery": "Automatic"},
            "fidelity": {
                "auto_recovery": {"reboot_fraction": 1.0, "delay_s": [60, 600], "reboot_s": [60, 180]},
                "event_metadata": "null",
                "event_wording": "reference",
                "transient_failure_rate": 0.2,
                "vanish_s": [60, 600],
            },
        },
    ),
    (
        "adv-merge-skip-logical-busy",
        {
            "fidelity": {
                "second_check_request": "merge",
                "unsupported_types": {"patterns": ["ml.g5*"], "behaviour": "skip"},
                "creation_time_filter": "logical",
            },
            "workload": {"busy_rate": 0.5, "job_s": [600, 3600]},
            "incidents": [FOREIGN_IDLE],
        },
    ),
]
NAMES = [name for name, _ in VARIANTS]


def merge(base: Any, over: Any) -> Any:
    """`over` merged into `base`: dicts key by key (recursively), anything else replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merge(base.get(k), v) for k, v in over.items()}}
    return over


def variant_raw(name: str) -> dict[str, Any]:
    """The variant's scenario, in the scenario-file shape."""
    overrides = dict(VARIANTS)[name]
    raw = merge(json.loads(FIDELITY_SCENARIO.read_text()), overrides)
    raw["name"] = f"fidelity-{name}"
    return raw


def variant_scenario(name: str) -> Any:
    from tests.twin.scenario import Scenario

    return Scenario.model_validate(variant_raw(name))


def missing(scenario: Any) -> list[str]:
    """What the variant needs that the HyperPod fake cannot play yet (empty: it can run)."""
    from tests.fakes.hyperpod import Clock, FakeHyperPod
    from tests.fakes.readings import Readings
    from tests.twin.scenario import MoveNodes

    fake = FakeHyperPod(Clock())
    gaps = []
    if scenario.fidelity != Readings() and not isinstance(getattr(fake, "readings", None), Readings):
        gaps.append("readings")
    if scenario.workload.busy_rate and not hasattr(fake, "set_busy"):
        gaps.append("set_busy")
    if any(isinstance(i, MoveNodes) for i in scenario.incidents) and not hasattr(fake, "move_nodes"):
        gaps.append("move_nodes")
    return gaps


def run_variant(name: str, template: Any = None) -> dict[str, Any]:
    """Run the variant on the twin, as `python -m tests.twin` does; returns its report. The Lambdas' logs are
    discarded. `template`: a synthesized ControllerTemplate to reuse (synthesizing takes seconds)."""
    from tests.harness.synth import base_config, synthesized_template
    from tests.harness.template import ControllerTemplate
    from tests.twin.report import build_report
    from tests.twin.simulation import Twin

    scenario = variant_scenario(name)
    config = scenario.controller_config(base_config())
    template = template or ControllerTemplate(synthesized_template())
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    with contextlib.redirect_stdout(_devnull()), Twin(scenario, template, config) as twin:
        wall = twin.run()
        return build_report(twin, wall)


def row(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """The table's row of a variant's report."""
    verdicts = {k: v for k, v in report["verdicts"].items() if v}
    actions = report["actions"]
    return {
        "variant": name,
        "verdicts": verdicts,
        "inconclusive": report["verdicts"]["inconclusive"],
        "no_verdict": report["verdicts"]["no_verdict"],
        "false_pass": report["false_pass"],
        "untested_pass": report["untested_pass"],
        "false_fail": report["false_fail"],
        "reversed": report["reversed"],
        "actions": {
            "reboot": actions["reboot"],
            "replace": actions["replace"],
            "conflicting": actions["conflicting"],
            "duplicate": actions["duplicate"],
        },
        "p95_s": report["latency_s"]["ready_to_verdict"]["p95"],
        "rounds_failed": report["step_functions"]["statuses"].get("FAILED", 0),
        "job_hours": report["exposure"]["job_hours"],
        "alerts": report["alerts"],
        "virtual_s": report["virtual_s"],
        "wall_s": report["wall_s"],
        "incidents": [
            {k: v for k, v in i.items() if k in ("kind", "fired", "outcome", "nodes", "rechecked")}
            for i in report["incidents"]
        ],
    }


_TEMPLATE: Any = None
_DEVNULL: Any = None


def _devnull() -> Any:
    """One sink for the Lambdas' logs, never closed: their loggers keep the stream they first saw."""
    global _DEVNULL
    if _DEVNULL is None:
        _DEVNULL = open(os.devnull, "w")  # noqa: SIM115
    return _DEVNULL


def _worker_init() -> None:
    global _TEMPLATE
    from tests.harness.synth import synthesized_template
    from tests.harness.template import ControllerTemplate

    sys.stdout = _devnull()  # the worker's whole life
    _TEMPLATE = ControllerTemplate(synthesized_template())


def _one(name: str) -> dict[str, Any]:
    gaps = missing(variant_scenario(name))
    if gaps:
        return {"variant": name, "skipped": f"the fake has no {', '.join(gaps)} yet"}
    try:
        return row(name, run_variant(name, _TEMPLATE))
    except Exception as err:  # a broken variant is a row, not the end of the matrix
        where = traceback.extract_tb(err.__traceback__)[-1]
        return {"variant": name, "error": f"{type(err).__name__}: {err} ({where.filename}:{where.lineno})"[:400]}


def print_table(rows: list[dict[str, Any]], out: Any = sys.stdout) -> None:
    from hyperpod_dhc.hpdhc.render import hm, table

    body = [
        [
            "variant",
            "verdicts",
            "inconcl",
            "no_verdict",
            "false_pass",
            "untested_pass",
            "false_fail",
            "reversed",
            "actions (reboot/replace/conflicting/duplicate)",
            "p95 ready->verdict",
            "virtual",
            "wall",
        ]
    ]
    for r in rows:
        if "skipped" in r or "error" in r:
            body.append([r["variant"], f"SKIPPED: {r['skipped']}" if "skipped" in r else f"ERROR: {r['error']}"])
            body[-1] += [""] * (len(body[0]) - 2)
            continue
        a = r["actions"]
        body.append(
            [
                r["variant"],
                " ".join(f"{k}={v}" for k, v in r["verdicts"].items()),
                str(r["inconclusive"]),
                str(r["no_verdict"]),
                str(r["false_pass"]),
                str(r["untested_pass"]),
                str(r["false_fail"]),
                str(r["reversed"]),
                f"{a['reboot']}/{a['replace']}/{a['conflicting']}/{a['duplicate']}",
                hm(r["p95_s"]),
                hm(r["virtual_s"]),
                f"{r['wall_s']:.0f} s",
            ]
        )
    table(body, out)
    for r in rows:
        for i in r.get("incidents", []):
            print(f"  {r['variant']}: incident {json.dumps(i)}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.twin.fidelity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=NAMES, help="variants (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="variants run at once, one process each (default 2)")
    parser.add_argument("--json", action="store_true", help="one JSON list of rows instead of the table")
    parser.add_argument("--list", action="store_true", help="print the variants and their overrides, run nothing")
    args = parser.parse_args(argv)
    names = args.only or NAMES
    if args.list:
        for name in names:
            print(f"{name}: {json.dumps(dict(VARIANTS)[name])}")
        return 0
    with multiprocessing.get_context("spawn").Pool(max(1, args.jobs), initializer=_worker_init) as pool:
        rows = pool.map(_one, names, chunksize=1)
    if args.json:
        json.dump(rows, sys.stdout)
        sys.stdout.write("\n")
    else:
        print_table(rows)
    bad = [r for r in rows if "error" in r or any(r.get(k) for k in ("false_pass", "untested_pass", "false_fail"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
