"""nodes.recheck and nodes.instance_replaced: shared by observe (first sight, pending, final states) and the
recovery ladder (recovery_due, recovering)."""

from hyperpod_dhc.deephealth.domain.nodes import (
    Action,
    NodeRecord,
    NodeSnapshot,
    NodeState,
    Verdict,
    instance_replaced,
    recheck,
)

A, B = "i-0000000000000000a", "i-0000000000000000b"


def rec(**kw) -> NodeRecord:
    fields = {"cluster": "c", "key": "n", "group": "g", "logical_id": "n", "instance_id": A, "instance_ids": [A]}
    return NodeRecord(**{**fields, "version": 2, **kw})


def snap(status="Running", iid: str | None = A) -> NodeSnapshot:
    return NodeSnapshot(group="g", instance_id=iid, logical_id="n", status=status)


def test_only_another_instance_id_on_both_sides_is_a_replacement():
    assert instance_replaced(rec(), snap(iid=B))
    assert not instance_replaced(rec(), snap(iid=A))
    assert not instance_replaced(rec(), snap(iid=None))  # provisioning: nothing to compare yet
    assert not instance_replaced(rec(instance_id=None), snap(iid=B))


def test_recheck_queues_the_listed_instance_afresh_and_keeps_the_nodes_trail():
    stale = rec(
        state=NodeState.RECOVERING,
        round_id="c-r000001",
        seen_in_progress=True,
        check_started_at=5.0,
        seen_down=True,
        observe_only=True,
        held_by="breaker",
        verdict=Verdict.FAILED,
        attempts=1,
    )
    record, decision = recheck(stale, snap(iid=B), 100.0, "replacement done", "t", attempts=2)
    assert record.state == NodeState.PENDING and record.instance_id == B and record.instance_ids == [A, B]
    assert record.ready_at == 100.0 and record.round_id is None and record.check_started_at is None
    assert not (record.seen_in_progress or record.seen_down or record.observe_only) and record.held_by is None
    assert record.verdict == Verdict.FAILED and record.attempts == 2  # the trail stays; `changes` apply
    assert decision.from_state == NodeState.RECOVERING and decision.reason == "replacement done"
    assert decision.trigger == "t" and decision.instance_id == B


def test_recheck_of_a_node_not_running_waits_for_it_and_keeps_the_known_instance():
    record, _ = recheck(rec(action=Action.REBOOT), snap("Pending", iid=None), 100.0, "listed again", None)
    assert record.ready_at is None and record.instance_id == A and record.instance_ids == [A]
