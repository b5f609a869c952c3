"""The fidelity matrix (`tests/twin/fidelity.py`): the controller under every reading of what HyperPod does not
document. Each variant must hold every invariant (no false, untested or wrong verdict included), give every node
a verdict or an alert by the horizon, and re-check nodes moved into another group.

Not grouped for xdist: the variants share nothing (each builds its own twin), so `--dist loadgroup` spreads them.
"""

import pytest

from tests.fakes.readings import Readings
from tests.twin.fidelity import NAMES, REPO_ROOT, VARIANTS, missing, run_variant, variant_scenario

from .invariants import assert_invariants, fired

NO_PASS_LINES = "logs no pass line"
PASSING = ("passed", "passed_after_reboot", "replaced")
# The Slurm bridge at 70 % load on the trimmed lines and on the page's lines: run together, job-hours compared.
BRIDGE = ("bridge-doc-plain", "bridge-doc-2024", "bridge-doc-2026-lines")
# Readings of the verbatim documented lines and of evidence that arrives late, skewed or from no node's stream:
# every healthy node passes, and no round fails.
VERBATIM = ("doc-2024", "doc-2026-lines", "doc-2026-records", "doc-2026-lines-dcgm-only", "doc-2024-connectivity",
            "line-stamps-test-time", "efa-devices", "foreign-lines", "extra-lines-taught", "node-clock-behind",
            "node-clock-ahead", "failure-line-lag")  # fmt: skip
NO_FAILED_ROUND = (*VERBATIM, "extra-lines", "isolated-wedge", "launch-failure-not-retried")


@pytest.mark.parametrize("name", [n for n in NAMES if n not in BRIDGE])
def test_the_controller_holds_under_every_reading(controller_template, name):
    scenario = variant_scenario(name)
    if gaps := missing(scenario):
        pytest.skip(f"the HyperPod fake has no {', '.join(gaps)} yet")
    report = run_variant(name, controller_template)
    verdicts = {k: v for k, v in report["verdicts"].items() if v}
    print(f"{name}: {verdicts}, false_pass/untested_pass/false_fail", report["false_pass"], report["untested_pass"])
    print(f"{name}: false_fail {report['false_fail']}, wall {report['wall_s']} s")

    # Every node has a verdict by the horizon, or an operator was told (held nodes wait for one by design).
    unsettled = [
        (d["logical_id"][:8], d["group"], d["state"]) for d in report["node_details"] if d["verdict"] == "no_verdict"
    ]
    assert not unsettled, f"nodes without a verdict at the horizon: {unsettled}"
    assert report["actions"]["conflicting"] == 0 and report["actions"]["duplicate"] == 0, report["actions"]
    for kind in {i["kind"] for i in report["incidents"]}:
        fired(report, kind)
    for move in (i for i in report["incidents"] if i["kind"] == "move-nodes"):
        assert move["rechecked"] == len(move["nodes"]), (
            f"moved nodes not re-checked in their new group: {[n[:8] for n in move['not_rechecked']]}"
        )
    assert_invariants(report)
    reading_expectations(name, report)


def reading_expectations(name, report):
    """What a cell's reading must lead to beyond the invariants."""
    no_pass_alerts = [n for n in report["notifications"] if NO_PASS_LINES in (n["subject"] or "")]
    healthy = [d for d in report["node_details"] if d["truth"] == "healthy"]
    if name in NO_FAILED_ROUND:
        assert not report["step_functions"]["statuses"].get("FAILED"), "no round fails"
    if name in VERBATIM:
        assert all(d["verdict"] == "passed" for d in healthy), [(d["logical_id"][:8], d["verdict"]) for d in healthy]
    if name == "doc-2026-lines-dcgm-only":
        assert report["actions"]["replace"] >= 1, "the split DCGM record's replacementRequired is still its hint"
    elif name == "foreign-lines":
        foreign = [n for n in report["notifications"] if "no node's" in (n["subject"] or "")]
        assert foreign, "a stream that is no node's is said"
    elif name == "extra-lines":
        assert report["verdicts"]["inconclusive"], "a line no rule places is never a pass"
        assert any("made" in (n["subject"] or "") for n in report["notifications"]), "one shape costing verdicts"
    if name == "pass-line-none":
        assert not any(report["verdicts"][k] for k in PASSING), "no pass line: no node passes by default"
        assert len(no_pass_alerts) == 1, "one alert per cluster says it logs no pass line, naming the policy"
        assert report["readings"]["as_fidelity"].get("pass_line") == "none"
    elif name == "pass-line-none-silence":
        healthy = [d for d in report["node_details"] if d["truth"] == "healthy"]
        assert healthy and all(d["verdict"] == "passed" for d in healthy), "pass_on_silence passes healthy nodes"
    elif name in ("stream-opaque", "stream-opaque-field", "stream-opaque-message", "foreign-hostnames"):
        assert report["verdicts"]["inconclusive"] == report["nodes"], "no node's own stream: never a pass"
    if name != "pass-line-none":
        assert not no_pass_alerts, "a cluster that logs pass lines is never said to log none"


def test_every_reading_has_a_matrix_row_and_a_fidelity_row():
    """A reading key the matrix never plays, or FIDELITY.md never explains, is a behaviour nobody checked."""
    played = {key for _, overrides in VARIANTS for key in overrides.get("fidelity", {})}
    assert not set(Readings.model_fields) - played, "readings without a matrix row"
    doc = (REPO_ROOT / "docs" / "FIDELITY.md").read_text()
    rows = {line.split("|")[1].strip() for line in doc.splitlines() if line.startswith("| `")}
    described = {key.strip("`") for row in rows for key in row.replace(",", " ").split() if key.startswith("`")}
    assert not set(Readings.model_fields) - described, "readings without a FIDELITY.md row"
    matrix = {line.split("|")[1].strip() for line in doc.splitlines() if line.startswith("| ")}
    assert not set(NAMES) - matrix, "matrix variants missing from FIDELITY.md's table"


@pytest.mark.heavy(50)
def test_the_documented_lines_verbatim_cost_no_job_hours(controller_template):
    """With the Slurm bridge at 70 % load, the page's lines verbatim keep as many job-hours as the trimmed lines."""
    hours = {}
    for name in BRIDGE:
        report = run_variant(name, controller_template)
        assert_invariants(report)
        hours[name] = report["exposure"]["job_hours"]
        assert report["exposure"]["jobs_on_unvalidated"] == 0
    print(f"job-hours: {hours}")
    trimmed = hours["bridge-doc-plain"]
    assert trimmed > 0
    for name in BRIDGE[1:]:
        assert abs(hours[name] - trimmed) <= 0.1 * trimmed, hours
