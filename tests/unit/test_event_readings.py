"""Cluster events as the events reference words them and as EventBridge was seen to deliver them (fidelity V12):
the documented replacement wording and a null `EventMetadata`."""

import copy

import pytest

from hyperpod_dhc.deephealth.domain.events import NodeSignal, classify
from tests.conftest import load_event


def _instance_event(description, metadata):
    e = copy.deepcopy(load_event("cluster_event_lifecycle_started.json"))
    e["detail"]["EventDetails"]["Description"] = description
    e["detail"]["EventDetails"]["EventDetails"] = metadata
    return classify(e["detail-type"], e["detail"], e["id"])


IID = "i-0391f86fa0fe0d465"
REFERENCE_REPLACEMENT_START = (
    f"Instance {IID} is starting as part of instance replacement in Cluster sample-cluster and IG p5-workers"
)


@pytest.mark.parametrize(
    "metadata",
    [{"EventMetadata": None}, {"EventMetadata": {"Instance": None}}, None, {}],
    ids=["metadata-null", "instance-null", "details-null", "details-empty"],
)
def test_a_null_event_metadata_still_names_the_node_by_its_instance_id(metadata):
    signal = _instance_event("Instance i-0391f86fa0fe0d465 has been rebooted", metadata)
    assert isinstance(signal, NodeSignal)
    assert signal.instance_id == "i-0391f86fa0fe0d465" and signal.logical_id is None
    assert signal.cluster == "sample-cluster" and signal.group == "p5-workers"
    assert signal.wakes_round, "unknown wording wakes the round"


@pytest.mark.parametrize("metadata", [{"EventMetadata": None}, {"EventMetadata": {"Instance": None}}])
def test_the_references_replacement_start_wording_comes_before_readiness(metadata):
    signal = _instance_event(REFERENCE_REPLACEMENT_START, metadata)
    assert isinstance(signal, NodeSignal) and not signal.wakes_round


@pytest.mark.parametrize(
    "description",
    [
        "Instance replacement started for EC2 Instance i-0391f86fa0fe0d465 in Cluster sample-cluster and IG p5-workers",
        REFERENCE_REPLACEMENT_START,
    ],
    ids=["fake", "reference"],
)
def test_both_replacement_start_wordings_wake_nothing(description):
    assert not _instance_event(description, {"EventMetadata": None}).wakes_round


def test_the_references_replacement_completion_wakes_the_round():
    done = (
        "Instance i-0391f86fa0fe0d465 replacement completed successfully as part of instance replacement in Cluster "
        "sample-cluster and IG p5-workers"
    )
    assert _instance_event(done, {"EventMetadata": None}).wakes_round


def test_a_populated_lifecycle_state_still_decides_over_the_wording():
    started = {"EventMetadata": {"Instance": {"LcsExecutionState": "Started"}}}
    succeeded = {"EventMetadata": {"Instance": {"LcsExecutionState": "Succeeded"}}}
    assert not _instance_event("anything", started).wakes_round
    assert _instance_event(REFERENCE_REPLACEMENT_START, succeeded).wakes_round
