"""The Slurm bridge's desired state per node record (pure). The scontrol changes that reach it are the agent's:
tests/unit/test_slurm_bridge.py."""

import pytest

from deephealth.domain.nodes import NodeRecord, NodeState, Outcome, Verdict
from deephealth.domain.slurm import AWAITING, OWNED_PREFIX, RUNNING_CHECK, Desired, Feature, desired_state

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
