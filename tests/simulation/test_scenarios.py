"""Scenarios end to end on the twin: the real handlers and the deployed workflow, simulated HyperPod."""

FAST_CHECKS = {"InstanceStress": [1800, 2400]}


def _nodes(report, truth):
    return [d for d in report["node_details"] if d["truth"] == truth]


def test_continuous_arrivals_over_hours_all_get_a_verdict(simulate):
    report = simulate(
        {
            "seed": 3,
            "horizon_s": 24 * 3600,
            "cluster": {"name": "arrivals", "node_recovery": "None"},
            "groups": [
                {"name": "p5", "count": 16, "arrival": {"start_s": 0, "spread_s": 4 * 3600}},
                {
                    "name": "g5",
                    "instance_type": "ml.g5.8xlarge",
                    "count": 8,
                    "arrival": {"start_s": 3600, "spread_s": 3 * 3600},
                },
            ],
            "hardware": {"transient_fault_rate": 0.1, "persistent_fault_rate": 0.05},
            "check_duration_s": FAST_CHECKS,
            "faults": {"duplicate_event_rate": 0.2, "dropped_event_rate": 0.05},
        }
    )
    assert report["nodes"] == 24 and report["verdicts"]["no_verdict"] == 0
    assert report["events"]["duplicated"] and report["events"]["dropped"], "the faults were exercised"
    assert report["checks"]["started_while_active"] == 0
    healthy = _nodes(report, "healthy")
    assert healthy and all(d["verdict"] == "passed" and not d["actions"] for d in healthy), (
        "a healthy node is never rebooted or replaced"
    )


def test_node_recovery_automatic_makes_no_conflicting_actions(simulate):
    report = simulate(
        {
            "seed": 5,
            "horizon_s": 24 * 3600,
            "cluster": {"name": "auto", "node_recovery": "Automatic"},
            "groups": [{"name": "p5", "count": 12, "arrival": {"start_s": 0, "spread_s": 1800}}],
            "hardware": {"persistent_fault_rate": 0.25},
            "check_duration_s": FAST_CHECKS,
            "policy": {"defaults": {"recovery": "auto", "recovery_grace_s": 1800}},
        }
    )
    assert report["verdicts"]["no_verdict"] == 0
    assert report["actions"]["conflicting"] == 0
    assert report["actions"]["hyperpod_replace"] >= 1, "HyperPod recovered the faulty nodes itself"
    assert report["actions"]["reboot"] == report["actions"]["replace"] == 0, "the controller did not fight it"


def test_recovery_ladder_cures_transient_by_reboot_and_persistent_by_replacement(simulate):
    report = simulate(
        {
            "seed": 11,
            "horizon_s": 36 * 3600,
            "cluster": {"name": "ladder", "node_recovery": "None"},
            "groups": [{"name": "p5", "count": 12, "arrival": {"start_s": 0, "spread_s": 1200}}],
            "hardware": {"transient_fault_rate": 0.25, "persistent_fault_rate": 0.25},
            "check_duration_s": FAST_CHECKS,
            # Half the nodes are faulty on purpose: the breaker (50 % by default) would rightly stop the ladder.
            "policy": {
                "defaults": {"recovery": "reboot-then-replace", "max_attempts": 2},
                "cluster_defaults": {"breaker": {"max_failure_pct": None}},
            },
        }
    )
    transient, persistent = _nodes(report, "transient"), _nodes(report, "persistent")
    assert transient and persistent, "the seed draws both kinds of fault"
    assert all(d["verdict"] == "passed_after_reboot" and d["actions"] == ["reboot"] for d in transient)
    assert all(d["verdict"] in ("replaced", "quarantined") for d in persistent)
    assert all(len(d["instance_ids"]) == 2 for d in persistent if d["verdict"] == "replaced")
    assert report["actions"]["conflicting"] == 0 and report["verdicts"]["no_verdict"] == 0


def test_throttling_and_server_errors_on_every_api_still_end_in_verdicts(simulate):
    report = simulate(
        {
            "seed": 8,
            "horizon_s": 24 * 3600,
            "cluster": {"name": "flaky", "node_recovery": "None"},
            "groups": [{"name": "p5", "count": 10, "arrival": {"start_s": 0, "spread_s": 3600}}],
            "hardware": {"transient_fault_rate": 0.2},
            "check_duration_s": FAST_CHECKS,
            "faults": {"throttle_rate": 0.1, "server_error_rate": 0.02},
            "fidelity": {"second_check_request": "merge"},
        }
    )
    assert report["verdicts"]["no_verdict"] == 0 and report["actions"]["conflicting"] == 0
    assert report["checks"]["started_while_active"] == 0
    # Every transient fault is cured; a reboot whose answer was lost to a 5xx may never have happened (then
    # the re-check fails and the ladder replaces, within the budget, or holds the node for the next window).
    assert all(d["verdict"] in ("passed", "passed_after_reboot", "replaced", "held") for d in report["node_details"])
