"""The nodes table as the functions read it: a warm Lambda's `load_cluster` reads what was saved since its last
load, not the whole cluster (the index BySavedAt, as the template deploys it, on moto)."""

from __future__ import annotations

import pytest

from hyperpod_dhc.deephealth.adapters.node_table import SAVE_MARGIN_S, WHOLE_RELOAD_S, NodeTable
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState
from tests.harness.engine import TABLE_NAME


class Counted(NodeTable):
    """One Lambda's table, counting the records it reads whole and by key."""

    def __init__(self) -> None:
        super().__init__(TABLE_NAME)
        self.whole = 0
        self.by_key: list[set[str]] = []

    def _query_cluster(self, cluster):
        self.whole += 1
        return super()._query_cluster(cluster)

    def load_nodes(self, cluster, keys):
        self.by_key.append(set(keys))
        return super().load_nodes(cluster, keys)


def record(i: int, **kw) -> NodeRecord:
    return NodeRecord(cluster="demo", key=f"n{i:04}", group="gpu", instance_id=f"i-{i:017x}", **kw)


@pytest.mark.controller_config({"clusters": ["demo"]})
def test_a_warm_lambda_reads_only_what_was_saved_since_its_last_load(harness, fake):
    writer, reader = NodeTable(TABLE_NAME), Counted()
    for i in range(300):
        writer.save(record(i))
    harness.advance(2 * SAVE_MARGIN_S)
    assert len(reader.load_cluster("demo")) == 300 and reader.whole == 1  # cold: the whole cluster

    harness.advance(60)
    changed = writer.save(writer.get("demo", "n0005").model_copy(update={"state": NodeState.PASSED}))
    records = reader.load_cluster("demo")
    assert reader.whole == 1 and reader.by_key[-1] == {"n0005"}  # only what another Lambda saved since
    assert records["n0005"] == changed and len(records) == 300
    new = writer.save(record(300))  # a node recorded since: it is there too
    assert reader.load_cluster("demo")["n0300"] == new

    # What it saved itself, it knows at once; the index brings it again within SAVE_MARGIN_S (no harm).
    own = reader.save(records["n0007"].model_copy(update={"state": NodeState.PASSED}))
    assert reader.load_cluster("demo")["n0007"] == own

    harness.advance(WHOLE_RELOAD_S)  # and the whole cluster again now and then
    assert len(reader.load_cluster("demo")) == 301 and reader.whole == 2


@pytest.mark.controller_config({"clusters": ["elsewhere"]})  # no function of the controller writes demo's records
def test_a_whole_reload_parses_only_the_records_that_changed(harness, fake, monkeypatch):
    writer, reader = NodeTable(TABLE_NAME), Counted()
    for i in range(50):
        writer.save(record(i))
    harness.advance(2 * SAVE_MARGIN_S)
    reader.load_cluster("demo")
    changed = writer.get("demo", "n0003").model_copy(update={"state": NodeState.PASSED})
    parsed: list[str] = []
    parse = NodeRecord.model_validate_json
    monkeypatch.setattr(NodeRecord, "model_validate_json", lambda doc: parsed.append(doc) or parse(doc))
    changed = writer.save(changed)
    harness.advance(WHOLE_RELOAD_S)
    records = reader.load_cluster("demo")
    assert reader.whole == 2 and len(records) == 50
    assert records["n0003"] == changed and records["n0003"].state == NodeState.PASSED
    assert len(parsed) == 1, "the one record another Lambda changed is parsed; the 49 others are the ones held"


@pytest.mark.controller_config({"clusters": ["demo"]})
def test_an_idle_look_reads_no_record(harness, fake):
    writer, reader = NodeTable(TABLE_NAME), Counted()
    for i in range(50):
        writer.save(record(i))
    reader.load_cluster("demo")
    harness.advance(2 * SAVE_MARGIN_S)
    reader.load_cluster("demo")  # still within the margin of the first load's saves: reads them by key once
    harness.advance(2 * SAVE_MARGIN_S)
    reader.by_key.clear()
    assert len(reader.load_cluster("demo")) == 50
    assert reader.whole == 1 and reader.by_key == [set()]


@pytest.mark.controller_config({"clusters": "all"})
def test_a_cluster_that_is_not_slurm_is_marked_once_per_arn(harness, fake):
    """One alert per cluster (Context.describe sends it when this says True): a second function meeting the same
    cluster says nothing, a cluster recreated under the same name has a new ARN and is said again."""
    table = NodeTable(TABLE_NAME)
    first = "arn:aws:sagemaker:us-east-1:123456789012:cluster/aaaa1111"
    assert table.note_not_slurm("eks", first) is True
    assert table.note_not_slurm("eks", first) is False
    assert table.note_not_slurm("eks", "arn:aws:sagemaker:us-east-1:123456789012:cluster/bbbb2222") is True
    assert table.note_not_slurm("other", first) is True  # by name and ARN: another name is another mark


def test_a_look_for_arrivals_is_taken_once_per_gap_and_starts_where_the_last_one_was_taken(harness, fake):
    """`claim_arrivals_look` says when the look before was taken (0.0: never): the next listing starts there."""
    table = NodeTable(TABLE_NAME)
    assert table.claim_arrivals_look("demo", 1000.0, 300) == 0.0
    assert table.claim_arrivals_look("demo", 1200.0, 300) is None  # another look took the last 5 minutes
    assert table.claim_arrivals_look("demo", 1300.0, 300) == 1000.0
    table.note_whole_look("demo", 1700.0)  # a round's whole look counts as one
    assert table.claim_arrivals_look("demo", 1800.0, 300) is None
    assert table.claim_arrivals_look("demo", 2000.0, 300) == 1700.0
