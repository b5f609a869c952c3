import pytest
from hypothesis import given
from hypothesis import strategies as st

from deephealth.domain.events import (
    CLUSTER_EVENT,
    DETAIL_TYPES,
    ClusterSignal,
    Ignored,
    MalformedEvent,
    NodeSignal,
    classify,
)
from tests.conftest import load_event


def _classify(name):
    e = load_event(name)
    return classify(e["detail-type"], e["detail"], e["id"])


def test_instance_event_names_the_node():
    signal = _classify("cluster_event_instance_provisioned.json")
    assert isinstance(signal, NodeSignal)
    assert signal.cluster == "sample-cluster" and signal.group == "p5-workers"
    assert signal.instance_id == "i-0391f86fa0fe0d465"
    assert signal.logical_id == "df268d19-f035-4f28-9b80-b956b92ae21e"
    assert signal.event_id == "5f0c1e6a-0b59-4e0a-9e44-1f2b3c4d5e6f"


def test_health_event_flags_unhealthy():
    signal = _classify("node_health_unhealthy.json")
    assert isinstance(signal, NodeSignal) and signal.unhealthy and "NvidiaErrorTerminate" in signal.reason


def test_state_change_deleting_closes_and_in_service_reconciles():
    assert _classify("cluster_state_change_deleting.json") == ClusterSignal(
        cluster="sample-cluster",
        event_id="3d4e5f60-cccc-4ddd-8eee-3456789abcde",
        reason="cluster Deleting",
        closing=True,
    )
    assert not _classify("cluster_state_change_in_service.json").closing


def test_instance_group_event_reconciles_the_cluster():
    assert isinstance(_classify("cluster_event_instance_group.json"), ClusterSignal)


def test_unknown_detail_type_is_ignored():
    assert isinstance(classify("AWS API Call via CloudTrail", {}, "x"), Ignored)


@pytest.mark.parametrize(
    "detail",
    [
        {},
        {"EventDetails": "nope"},
        {"EventDetails": {"ClusterName": "c"}},  # no ResourceType
        {"EventDetails": {"ClusterName": "c", "ResourceType": "Instance"}},  # no node identity
        {"EventDetails": {"ClusterName": "", "ResourceType": "Instance", "InstanceId": "i-1"}},
        {"EventDetails": {"ClusterName": "c", "ResourceType": "Instance", "InstanceId": "i-" + "0" * 100}},
    ],
)
def test_malformed_cluster_events_raise_with_a_reason(detail):
    with pytest.raises(MalformedEvent) as err:
        classify(CLUSTER_EVENT, detail, "id")
    assert str(err.value)


@given(
    detail_type=st.sampled_from(DETAIL_TYPES),
    detail=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=12,
    ),
)
def test_classify_never_crashes_on_arbitrary_detail(detail_type, detail):
    # Property: any input either classifies or raises MalformedEvent; nothing else escapes.
    try:
        result = classify(detail_type, detail, "id")
    except MalformedEvent:
        return
    assert isinstance(result, NodeSignal | ClusterSignal | Ignored)
