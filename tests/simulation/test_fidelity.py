"""The fidelity matrix (`tests/twin/fidelity.py`): the controller under every reading of what HyperPod does not
document. Each variant must hold every invariant (no false, untested or wrong verdict included), give every node
a verdict or an alert by the horizon, and re-check nodes moved into another group.

Not grouped for xdist: the variants share nothing (each builds its own twin), so `--dist loadgroup` spreads them.
"""

import pytest

from tests.twin.fidelity import NAMES, missing, run_variant, variant_scenario

from .invariants import assert_invariants, fired


@pytest.mark.parametrize("name", NAMES)
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
