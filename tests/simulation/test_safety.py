"""The safety layer on the twin: a bad AMI trips the breaker, an operator resets it, dry-run acts on nothing."""

from tests.simulation.conftest import BASE_CONFIG
from tests.simulation.invariants import assert_invariants
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin

FAST_CHECKS = {"InstanceStress": [1800, 2400]}
OPERATOR = "arn:aws:iam::123456789012:user/operator"


def run_twin(controller_template, raw: dict, after=None) -> tuple[dict, dict]:
    """Run a scenario; `after(twin)` may act on the finished twin (API calls) before the report is built."""
    scenario = Scenario.model_validate({"version": 1, **raw})
    with Twin(scenario, controller_template, scenario.controller_config(BASE_CONFIG)) as twin:
        wall = twin.run()
        extra = after(twin) if after else {}
        return build_report(twin, wall), extra


def bad_ami(nodes: int) -> dict:
    return {
        "name": "bad-ami",
        "seed": 21,
        "horizon_s": 12 * 3600,
        "cluster": {"name": "badami", "node_recovery": "None"},
        "groups": [{"name": "p5", "count": nodes, "arrival": {"start_s": 0, "spread_s": 2 * 3600}}],
        # Every instance fails, replacements included: what a bad AMI or driver does to a fleet.
        "hardware": {"persistent_fault_rate": 1.0, "replacement_fault_rate": 1.0},
        "check_duration_s": FAST_CHECKS,
        "policy": {
            "defaults": {"gather_window_s": 120, "recovery": "replace", "replace_budget": {"max_pct": 25}},
            "cluster_defaults": {"breaker": {"max_failure_pct": 50, "min_verdicts": 10, "window_h": 6}},
        },
    }


def test_a_bad_ami_trips_the_breaker_which_stops_every_action_until_an_operator_resets_it(controller_template):
    def inspect(twin):
        status, breakers = twin.api("GET", "/clusters/badami/breakers")
        assert status == 200
        # What `hpdhc status` shows of them: the same breaker and holds as the breakers route, per cluster and group.
        (listed,) = twin.api("GET", "/clusters")[1]["clusters"]
        groups = twin.api("GET", "/clusters/badami/groups")[1]
        for view in (listed, groups):
            assert view["breaker"] == {k: breakers["breaker"][k] for k in ("open", "tripped")}
            assert view["capacity_holds"] == breakers["capacity_holds"]
        alerts = twin.notifications()
        return {"breakers": breakers, "alerts": alerts, "actions": list(twin.sim.actions)}

    report, seen = run_twin(controller_template, bad_ami(16), after=inspect)
    breakers, alerts = seen["breakers"], seen["alerts"]

    assert breakers["breaker"]["open"], "every node failing must trip the breaker"
    tripped_at = breakers["breaker"]["tripped"]["at"]
    trips = [a for a in alerts if a["attributes"]["kind"] == "breaker-tripped"]
    assert len(trips) == 1 and "systemic failure" in trips[0]["message"]["reason"]
    controller = [(t, kind) for t, kind, _, actor in seen["actions"] if actor == "controller"]
    assert controller, "actions ran before the threshold was reached"
    assert all(t <= tripped_at for t, _ in controller), "no reboot or replacement after the breaker tripped"
    group, cluster = breakers["replace_budget"]["groups"]["p5"], breakers["replace_budget"]["cluster"]
    assert group["used"] <= group["limit"] and cluster["used"] <= cluster["limit"], "replacements within budget"
    assert report["actions"]["replace"] == group["used"]
    held = {n["node"]: n["held_by"] for n in breakers["held_nodes"]}
    assert "breaker" in held.values(), "failed nodes wait, with their verdict, for an operator"
    assert report["verdicts"]["held"] == len(held) == report["nodes"]
    # The replacements themselves failed their checks: the group's capacity hold tripped too, with its alert.
    assert breakers["capacity_holds"] and any(a["attributes"]["kind"] == "capacity-hold" for a in alerts)
    assert report["safety"]["breaker_open"] and report["safety"]["replace_budget"]["group p5"]["peak"] <= 4
    assert_invariants(report)


def test_an_operator_reset_releases_the_held_nodes_and_the_breaker_does_not_retrip_on_old_failures(
    controller_template,
):
    def reset_and_continue(twin):
        status, _ = twin.api("POST", "/clusters/badami/breakers/reset", {"reason": "x\u0000"}, principal=OPERATOR)
        assert status == 422, "control characters are not a reason"
        before = len([a for a in twin.sim.actions if a[3] == "controller"])
        status, result = twin.api(
            "POST",
            "/clusters/badami/breakers/reset",
            {"reason": "AMI rolled back"},
            principal=OPERATOR,
        )
        assert status == 200 and result["reset"] and result["released"]
        twin.run_until(lambda: False, horizon_s=2 * 3600)
        _, breakers = twin.api("GET", "/clusters/badami/breakers")
        return {
            "released": result["released"],
            "acted_after_reset": len([a for a in twin.sim.actions if a[3] == "controller"]) - before,
            "breakers": breakers,
            "alerts": twin.notifications(),
        }

    # Reboots first, and a breaker that trips after 6 verdicts: the reset then releases rebootable nodes.
    policy = {
        "defaults": {"gather_window_s": 120},
        "cluster_defaults": {"breaker": {"max_failure_pct": 50, "min_verdicts": 6, "window_h": 6}},
    }
    raw = {**bad_ami(8), "horizon_s": 8 * 3600, "policy": policy}
    _, seen = run_twin(controller_template, raw, after=reset_and_continue)
    assert seen["acted_after_reset"] >= 1, "released nodes are recovered after the reset"
    reset = seen["breakers"]["resets"][-1]
    assert reset["by"] == OPERATOR and reset["reason"] == "AMI rolled back"
    breaker = seen["breakers"]["breaker"]
    if breaker["open"]:  # the AMI is still bad, so the released nodes fail again: only those failures count
        assert breaker["tripped"]["at"] > reset["at"], "re-tripped on failures from before the reset"
        assert breaker["verdicted_nodes"] >= policy["cluster_defaults"]["breaker"]["min_verdicts"]
    kinds = [a["attributes"]["kind"] for a in seen["alerts"]]
    assert "breaker-reset" in kinds


def test_dry_run_decides_and_records_but_never_checks_or_acts(controller_template):
    raw = {
        "name": "dry-run",
        "seed": 4,
        "horizon_s": 6 * 3600,
        "cluster": {"name": "shadow", "node_recovery": "None"},
        "groups": [{"name": "p5", "count": 6, "arrival": {"start_s": 0, "spread_s": 1800}}],
        "hardware": {"transient_fault_rate": 0.5},
        "check_duration_s": FAST_CHECKS,
        "policy": {"defaults": {"dry_run": True}},
    }

    def inspect(twin):
        return {"alerts": twin.notifications(), "records": twin.records("shadow")}

    report, seen = run_twin(controller_template, raw, after=inspect)
    assert report["api_calls"].get("StartClusterHealthCheck", 0) == 0
    assert report["verdicts"]["shadowed"] == 6
    assert_invariants(report)
    assert report["actions"]["reboot"] == report["actions"]["replace"] == 0
    assert {r.state.value for r in seen["records"].values() if r.group == "p5"} == {"shadowed"}
    assert all("dry-run: would start" in r.history[-1].reason for r in seen["records"].values() if r.group == "p5")
    assert any(a["attributes"]["kind"] == "dry-run" for a in seen["alerts"])
