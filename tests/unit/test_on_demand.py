import pytest
from pydantic import ValidationError

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.nodes import HistoryEntry, NodeRecord, NodeState
from hyperpod_dhc.deephealth.domain.on_demand import CheckRequest, queue_checks
from hyperpod_dhc.deephealth.domain.policy import GroupPolicy, Mode
from hyperpod_dhc.deephealth.domain.rounds import build_check_request
from hyperpod_dhc.deephealth.domain.views import check_seconds, group_views

GROUPS = {
    "gpu": GroupContext(GroupPolicy()),
    "native": GroupContext(GroupPolicy(), on_start_checks=("InstanceStress",)),
    "off": GroupContext(GroupPolicy(mode=Mode.OFF)),
}


def rec(key, state, group="gpu", **kw):
    return NodeRecord(
        cluster="c",
        key=key,
        logical_id=key,
        group=group,
        instance_id=f"i-{int(key[1:]):017x}",
        state=state,
        status="Running",
        version=1,
        **kw,
    )


RECORDS = {
    r.key: r
    for r in [
        rec("n1", NodeState.PASSED),
        rec("n2", NodeState.PENDING),
        rec("n3", NodeState.CHECKING),
        rec("n4", NodeState.RECOVERING),
        rec("n5", NodeState.QUARANTINED),
        rec("n6", NodeState.INCONCLUSIVE),
        rec("n7", NodeState.PASSED, group="native"),
    ]
}


def test_a_group_request_queues_only_nodes_not_already_waiting_or_in_recovery():
    queued, refused = queue_checks(
        RECORDS, GROUPS, group_names=["gpu"], nodes=[], checks=None, now=10.0, trigger="api:r1"
    )
    assert [r.key for r, _ in queued] == ["n1", "n6"]
    assert all(r.state == NodeState.PENDING and r.ready_at == 10.0 for r, _ in queued)
    assert {f.node: f.reason for f in refused} == {
        "n2": "already waiting for a check round",
        "n3": "already being checked",
        "n4": "recovery in progress; it is re-checked after the recovery",
        "n5": "quarantined: no automated actions",
    }


def test_instances_by_instance_id_or_logical_id_with_requested_checks():
    queued, refused = queue_checks(
        RECORDS,
        GROUPS,
        group_names=["native", "off", "nope"],
        nodes=["i-00000000000000001", "n6", "n1", "i-0000000000000beef"],
        checks=("InstanceStress", "InstanceConnectivity"),
        now=0.0,
        trigger="t",
    )
    assert [r.key for r, _ in queued] == ["n1", "n6"], "n1 twice (instance id + logical id) is queued once"
    assert {f.node for f in refused} == {"native", "off", "nope", "i-0000000000000beef"}
    configs = build_check_request([r for r, _ in queued], GROUPS)
    assert configs == [
        {
            "InstanceGroupName": "gpu",
            "InstanceIds": sorted(r.instance_id for r, _ in queued),
            "DeepHealthChecks": ["InstanceStress", "InstanceConnectivity"],
        }
    ]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"groups": ["a"], "instances": ["i-0123456789abcdef0"]},
        {"groups": ["-bad"]},
        {"instances": ["i-xyz; DROP TABLE"]},
        {"groups": ["a"], "checks": ["Bogus"]},
        {"groups": ["a"], "checks": ["InstanceStress", "InstanceStress"]},
        {"groups": ["a"], "extra": 1},
        {"instances": ["<script>alert(1)</script>"]},
    ],
)
def test_bad_check_requests_are_rejected(body):
    with pytest.raises(ValidationError):
        CheckRequest.model_validate(body)


def test_group_view_progress_and_gpu_hours():
    checked = rec(
        "n1",
        NodeState.PASSED,
        instance_type="ml.p5.48xlarge",
        verdict_instance_id="i-00000000000000001",
        history=[
            HistoryEntry(at=0, state=NodeState.CHECKING, reason="claimed"),
            HistoryEntry(at=3600, state=NodeState.PASSED, reason="passed"),
        ],
    )
    assert check_seconds(checked) == 3600
    (view,) = group_views([checked, rec("n2", NodeState.PENDING)], live_round=None)
    assert view["progress"] == {"checked": 1, "total": 2} and view["gpu_hours_in_checks"] == 8.0
    assert view["states"]["passed"] == 1 and view["states"]["pending"] == 1


def test_periodic_revalidation_picks_stale_passed_nodes_only_when_configured():
    from hyperpod_dhc.deephealth.domain.on_demand import due_for_revalidation

    day = 86400.0
    groups = {
        "gpu": GroupContext(GroupPolicy(revalidate_every_days=7, revalidate_max_fraction=1)),
        "off": GroupContext(GroupPolicy(revalidate_every_days=0)),
    }
    records = {
        r.key: r
        for r in [
            rec("n1", NodeState.PASSED, verdict_at=0.0),
            rec("n2", NodeState.PASSED, verdict_at=5 * day),
            rec("n3", NodeState.FAILED, verdict_at=0.0),
            rec("n4", NodeState.PASSED, group="off", verdict_at=0.0),
        ]
    }
    assert due_for_revalidation(records, groups, now=8 * day, bridge_seen_at=8 * day) == ["n1"]
    off = {"gpu": GroupContext(GroupPolicy(revalidate_every_days=0))}
    assert due_for_revalidation(records, off, now=100 * day, bridge_seen_at=100 * day) == []
    assert due_for_revalidation(records, groups, now=8 * day) == []  # no Slurm bridge: never
