"""What must hold after any scenario, whatever was injected: checked from the twin's report alone.

One place on purpose: a new invariant (a budget, say) is added here and every fault scenario checks it.
"""

from __future__ import annotations


def assert_invariants(report: dict) -> None:
    nodes = {d["logical_id"]: d for d in report["node_details"]}

    # Every node ends with a verdict: a node without one is a node nobody owns any more.
    # A `held` node has its verdict and waits for an operator's reset (breaker, capacity hold).
    stuck = [(k[:8], d["state"], d["actions"]) for k, d in nodes.items() if d["verdict"] == "no_verdict"]
    assert not stuck, f"nodes left without a verdict (node, controller state, actions): {stuck}"
    # "inconclusive" is a verdict only if an operator was told (the controller's node-inconclusive alert).
    unalerted = [(k[:8], nodes[k]["group"]) for k in report["inconclusive_without_alert"]]
    assert not unalerted, f"inconclusive nodes without a node-inconclusive notification: {unalerted}"

    # Verdicts against the ground truth of each instance (report version 4): the controller's core purpose.
    for key, what in (
        ("false_pass", "passed while their instance was faulty"),
        ("untested_pass", "passed without a check outcome on their instance"),
        ("false_fail", "failed, or acted on, while their instance was healthy"),
    ):
        wrong = [
            (k[:8], d["group"], d["verdict"], d["actions"], d["evidence"][-2:]) for k, d in nodes.items() if d[key]
        ]
        assert report[key] == 0, f"{key}={report[key]}: nodes {what} (node, group, verdict, actions, evidence): {wrong}"

    actions = report["actions"]
    # Never a reboot/replace while another action (HyperPod's or ours) is in flight on the node.
    assert actions["conflicting"] == 0, f"{actions['conflicting']} conflicting action request(s)"
    # Never a second action on a node without a check outcome in between (acting twice on one piece of evidence).
    assert actions["duplicate"] == 0, f"{actions['duplicate']} duplicate action request(s)"

    # One active check per cluster: the controller never asks while its own check runs (someone else's may).
    checks = report["checks"]
    assert checks["started_while_active"] == 0, (
        f"the controller requested {checks['started_while_active']} check(s) while its own was active"
    )
    # An operation held open after its check is over (a failed node left isolated) is asked past once at most.
    assert checks["asked_past_held_max"] <= 1, f"asked past a held operation {checks['asked_past_held_max']} times"

    # No call without its grant: the harness evaluates every request against the synthesized roles, as AWS would.
    iam = report["iam"]
    assert iam["denied"] == 0, f"AWS would refuse: {iam['denials']}"
    assert not iam["unmapped"], f"requests with no IAM mapping: {iam['unmapped']}"

    # No budget exceeded: the most replacements in any rolling window stays within the policy's limit.
    over = {k: b for k, b in report["safety"]["replace_budget"].items() if b["peak"] > b["limit"]}
    assert not over, f"replacement budget exceeded: {over}"
    # An open breaker stops every action: none after it tripped (unless an operator reset it).
    safety = report["safety"]
    if safety["breaker_open"] and not safety["resets"] and safety["last_action_at_s"] is not None:
        assert safety["last_action_at_s"] <= safety["breaker_at_s"], "a reboot/replace after the breaker tripped"


def fired(report: dict, kind: str) -> dict:
    """The report entry of the scenario's (only) incident of `kind`, which must have fired."""
    (incident,) = [i for i in report["incidents"] if i["kind"] == kind]
    assert incident["fired"], f"incident {kind} never found its moment: the scenario did not exercise it"
    return incident
