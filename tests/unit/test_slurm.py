"""The Slurm bridge's desired state and the scontrol changes to reach it (pure)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deephealth.domain.nodes import NodeRecord, NodeState, Outcome, Verdict
from deephealth.domain.slurm import (
    AWAITING,
    OWNED_PREFIX,
    RUNNING_CHECK,
    Actual,
    Desired,
    Feature,
    changes,
    desired_state,
)

IID = "i-0000000000000000a"


def rec(state, outcomes=(), instance_id=IID) -> NodeRecord:
    return NodeRecord(cluster="c", key="n", group="g", instance_id=instance_id, state=state, outcomes=list(outcomes))


PASSED_HERE = Outcome(at=1.0, verdict=Verdict.PASSED, instance_id=IID)
FAILED_HERE = Outcome(at=2.0, verdict=Verdict.FAILED, instance_id=IID)


@pytest.mark.parametrize(
    ("record", "isolate", "expected"),
    [
        (rec(NodeState.PENDING), True, Desired(AWAITING, Feature.IN_PROGRESS)),
        (rec(NodeState.CHECKING), True, Desired(RUNNING_CHECK, Feature.IN_PROGRESS)),
        (rec(NodeState.PENDING), False, Desired(None, Feature.IN_PROGRESS)),  # the group opted out
        (rec(NodeState.PASSED, [PASSED_HERE]), True, Desired(None, Feature.PASSED)),
        (rec(NodeState.CHECKING, [PASSED_HERE]), True, Desired(None, Feature.PASSED)),  # revalidation: keeps jobs
        (rec(NodeState.CHECKING, [PASSED_HERE, FAILED_HERE]), True, Desired(RUNNING_CHECK, Feature.IN_PROGRESS)),
        (rec(NodeState.PENDING, [PASSED_HERE], instance_id="i-0000000000000000b"), True,
         Desired(AWAITING, Feature.IN_PROGRESS)),  # a new instance under the logical id: not validated
        (rec(NodeState.INCONCLUSIVE), True, Desired(OWNED_PREFIX + "deep health check inconclusive", Feature.SKIPPED)),
        (rec(NodeState.GONE), True, None),
        (rec(NodeState.SHADOWED), True, None),  # dry-run records, never acts
    ],
)  # fmt: skip
def test_desired_state(record, isolate, expected):
    assert desired_state(record, isolate) == expected


@pytest.mark.parametrize(
    "state", [NodeState.RECOVERY_DUE, NodeState.RECOVERING, NodeState.FAILED, NodeState.QUARANTINED]
)
def test_a_failed_node_is_drained_with_an_owned_reason_naming_its_state(state):
    desired = desired_state(rec(state), isolate_until_checked=False)
    assert (
        desired.feature == Feature.FAILED and desired.reason.startswith(OWNED_PREFIX) and state.value in desired.reason
    )


def test_a_new_node_is_drained_and_labelled():
    assert changes(Desired(AWAITING, Feature.IN_PROGRESS), Actual(False, None, ("gpu",))) == [
        "State=DRAIN",
        f"Reason={AWAITING}",
        "AvailableFeatures=gpu,HealthCheck:InProgress",
        "ActiveFeatures=gpu,HealthCheck:InProgress",
    ]


def test_a_passed_node_is_resumed_only_from_our_own_drain():
    passed = Desired(None, Feature.PASSED)
    ours = Actual(True, RUNNING_CHECK, ("HealthCheck:InProgress",))
    assert changes(passed, ours)[0] == "State=RESUME"
    admins = Actual(True, "bad DIMM, ticket 4711", ("HealthCheck:InProgress",))
    assert "State=RESUME" not in changes(passed, admins)  # someone else's drain stays
    assert changes(Desired(AWAITING, Feature.IN_PROGRESS), Actual(True, "Action:Replace", ())) == [
        "AvailableFeatures=HealthCheck:InProgress",
        "ActiveFeatures=HealthCheck:InProgress",
    ]  # HyperPod's drain keeps its reason


def test_our_drain_is_reworded_as_the_check_moves_on():
    assert changes(
        Desired(RUNNING_CHECK, Feature.IN_PROGRESS), Actual(True, AWAITING, ("HealthCheck:InProgress",))
    ) == [
        "State=DRAIN",
        f"Reason={RUNNING_CHECK}",
    ]


REASONS = st.none() | st.sampled_from([AWAITING, RUNNING_CHECK, "admin: maintenance", "Action:Reboot"])
FEATURES = st.lists(st.sampled_from(["gpu", "efa", *(f.value for f in Feature)]), unique=True, max_size=4)


@given(
    reason=st.none() | st.sampled_from([AWAITING, RUNNING_CHECK, OWNED_PREFIX + "failed"]),
    feature=st.sampled_from(list(Feature)),
    drained=st.booleans(),
    actual_reason=REASONS,
    features=FEATURES,
)
def test_changes_never_touch_a_foreign_drain_and_are_idempotent(reason, feature, drained, actual_reason, features):
    desired, actual = Desired(reason, feature), Actual(drained, actual_reason if drained else None, tuple(features))
    out = changes(desired, actual)
    if drained and not actual.owned:
        assert not any(a.startswith(("State=", "Reason=")) for a in out), "someone else's drain is left alone"
    # Applying the changes reaches a fixed point: a second pass changes nothing.
    state = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in out}
    after = Actual(
        drained=(drained and state.get("State") != "RESUME") or state.get("State") == "DRAIN",
        reason=state.get("Reason", actual.reason) if state.get("State") != "RESUME" else None,
        features=tuple(state["AvailableFeatures"].split(",")) if "AvailableFeatures" in state else actual.features,
    )
    assert changes(desired, after) == []
    assert [f for f in after.features if f.startswith("HealthCheck:")] == [feature.value]
    assert [f for f in after.features if not f.startswith("HealthCheck:")] == [
        f for f in features if not f.startswith("HealthCheck:")
    ], "features other than HealthCheck:* are kept"
