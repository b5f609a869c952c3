"""The controller and the bridge speak one vocabulary: the bridge (functions/hyperpod_dhc/hpdhc, no pydantic, Python
3.10) keeps its own copy of what hyperpod_dhc.deephealth.domain.slurm says, and this test holds the two together."""

from hyperpod_dhc.deephealth.domain import slurm as domain
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState, Outcome, Verdict
from hyperpod_dhc.hpdhc import apply, client, gate, lock, scontrol
from hyperpod_dhc.hpdhc import document as bridge_document


def test_the_bridge_and_the_controller_share_prefix_features_and_bounds():
    assert scontrol.OWNED_PREFIX == domain.OWNED_PREFIX
    assert tuple(f.value for f in domain.Feature) == bridge_document.FEATURES
    assert bridge_document.FEATURE_KEY == domain.FEATURE_KEY
    assert lock.AWAITING == domain.AWAITING and gate.BOOT_REASON.startswith(domain.OWNED_PREFIX + domain.WAIT)
    assert apply.HELD_MAX == domain.HELD_MAX
    assert client.SLURM_STATE_PAGE == domain.MAX_STATE_PAGE and client.SLURM_PAGE == domain.MAX_REPORTED_NODES


def test_the_cli_offers_every_node_state_the_api_filters_on():
    assert tuple(state.value for state in NodeState) == client.NODE_STATES


def test_every_desired_state_the_controller_can_say_is_one_the_bridge_accepts():
    iid = "i-0000000000000000a"
    passed = [Outcome(at=1.0, verdict=Verdict.PASSED, instance_id=iid)]
    entries = []
    for i, state in enumerate(NodeState):
        outcomes = passed if state == NodeState.PASSED else []
        record = NodeRecord(cluster="c", key=f"k{i}", group="g", instance_id=iid, state=state,
                            evidence=["EFA Loopback check failed"], outcomes=outcomes)  # fmt: skip
        for isolate in (True, False):
            desired = domain.desired_state(record, isolate)
            if desired is not None:
                entries.append({"node": f"n{i}{isolate}", "reason": desired.reason, "feature": desired.feature.value})
    ambiguous = domain.ambiguous("n", [NodeRecord(cluster="c", key="a", group="g")] * 2)
    entries.append({"node": "amb", "reason": ambiguous.reason, "feature": ambiguous.feature.value})
    errors: list[str] = []
    document = bridge_document.read_document(
        "c", {"cluster": "c", "nodes": entries, "generation": 1.0, "complete": True, "isolating_groups": ["g"]}, errors
    )
    assert errors == [] and all(d is not None for d in document.wanted.values())
    assert all(d.reason is None or len(d.reason) <= 400 for d in document.wanted.values() if d)
