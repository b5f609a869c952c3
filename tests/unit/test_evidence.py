"""Result records, from the event to the verdict: every shape the AWS documentation shows and the adversarial
variants the docs allow, what it proves, whose it is, when it counts, and the verdict a node gets from it.

Only a node's own stream speaks for it; a stream that is no node's never passes or fails a node, and a failure on
it costs the nodes whose window it falls in one re-check. A node's window is widened by its clock's skew at both
ends, and failures count on a later edge than passes.
"""

from __future__ import annotations

import json

import pytest

from hyperpod_dhc.deephealth.domain.nodes import (
    Action,
    ActionEntry,
    NodeRecord,
    NodeSnapshot,
    NodeState,
    Outcome,
    Verdict,
)
from hyperpod_dhc.deephealth.domain.result_log import ResultLog, failures_from, previous_verdict_at
from hyperpod_dhc.deephealth.domain.verdicts import Look, judge_check, judge_late
from hyperpod_dhc.deephealth.evidence.attribute import Ownership, node_evidence
from hyperpod_dhc.deephealth.evidence.judge import Requirements
from hyperpod_dhc.deephealth.evidence.records import Event
from hyperpod_dhc.deephealth.evidence.rules import required_tests

A, B = "i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb"
LID_B = "6f1c0c6e-3c1a-4b7e-9a35-2f0e4d8b9c11"
HOST_A, HOST_B = "ip-10-1-0-1", "ip-10-1-0-2"
T0 = 1_790_000_000.0
LEFT = T0 + 3000  # B left its check
FAULT = (
    "Encountered FaultyInstance. Replace the Instance. Region: us-west-2, InstanceType: ml.g5.8xlarge. "
    "ERROR: Bandwidth has less than threshold: Expected minimum threshold: 80, NCCL Test output Bw: 30"
)
DCGM = (
    "DCGM diagnostic health summary: dcgmCheckLevel: 4 dcgmVersion: 3.3.7 gpuDriverVersion: 535.183.01, "
    "gpuDeviceIds: [2330] replacementRequired: {replace} rebootRequired: {reboot}"
)
DOC_PASS = (
    "Executing Hardware stress check with command: stress-ng",
    "stress-ng success",
    "GpuPci Count check success",
    DCGM.format(replace="false", reboot="false"),
    "EFA Loopback check passed for device: rdmap0s29",
)
NCCL = "Nccl test successful. Summary: NcclMaxAlgoBw: 181.52, NcclAvgAlgoBw: 170.08, NcclNodes: 2, NcclClusterMessage:"
STRESS = ("InstanceStress",)
BOTH = ("InstanceStress", "InstanceConnectivity")


def plain(msg: str, level: str = "info") -> str:
    return f"2026-03-29T18:04:20Z  {level}  {msg}"


def js(level: str | None, msg: str, **fields: str) -> str:
    body = {"ts": "2026-03-29T18:04:20Z", "msg": msg, **fields}
    return json.dumps(body if level is None else {"level": level, **body})


def line(stream: str, message: str, at: float = T0 + 2000, lag: float | None = 5.0) -> Event:
    return Event(stream, int(at * 1000), message, None if lag is None else int((at + lag) * 1000))


def records(**b: object) -> list[NodeRecord]:
    common = {"cluster": "c", "group": "g", "state": NodeState.CHECKING, "check_started_at": T0, "created_at": T0 - 60}
    return [
        NodeRecord(key="a", logical_id="a", instance_id=A, instance_ids=[A], hostname=f"{HOST_A}.ec2.internal",
                   **common),
        NodeRecord(key=LID_B, logical_id=LID_B, instance_id=B, instance_ids=[B], hostname=f"{HOST_B}.ec2.internal",
                   seen_in_progress=True, check_left_at=LEFT, instance_type="ml.g5.8xlarge", **{**common, **b}),
    ]  # fmt: skip


def read(lines: list[Event], rs: list[NodeRecord] | None = None, complete: bool = True) -> ResultLog:
    return ResultLog.of(lines, rs or records(), since=T0 - 1800, read_at=LEFT + 600, complete=complete)


def verdict(lines: list[Event], checks: tuple[str, ...] = STRESS, after: float = 600, **b: object):
    """The verdict on B, `after` s after it left its check (settle 300 s, revisit 3600 s)."""
    rs = records(**b)
    evidence = read(lines, rs).evidence(rs[1])
    snapshot = NodeSnapshot(group="g", instance_id=B, logical_id=LID_B, status="Running")
    look = Look(LEFT + after, evidence, False, 21600, 300, Requirements(required_tests(checks), 1), revisit_s=3600)
    return judge_check(rs[1], snapshot, look)


# (what, lines, checks, expected verdict, re-checked?, recovery hint); WAITS: no verdict until `revisit_s` after the
# check (a missing test's line may only be late), then inconclusive and re-checked. ANONYMOUS: one re-check.
WAITS = None
ANONYMOUS = "anonymous"
SHAPES = [
    ("documented per-test lines, all passing, in the node's stream",
     [line(B, plain(m)) for m in DOC_PASS], STRESS, Verdict.PASSED, True, None),
    ("the same lines in a stream named by the node's hostname",
     [line(HOST_B, plain(m)) for m in DOC_PASS], STRESS, Verdict.PASSED, True, None),
    ("the same lines in a stream named by its NodeLogicalId",
     [line(LID_B, plain(m)) for m in DOC_PASS], STRESS, Verdict.PASSED, True, None),
    ("the same lines in a stream named <group>/<instance id>",
     [line(f"g/{B}", plain(m)) for m in DOC_PASS], STRESS, Verdict.PASSED, True, None),
    ("one summary line (the fake's default reading)",
     [line(B, js("info", "Deep health check passed"))], STRESS, Verdict.PASSED, True, None),
    ("DCGM summary replacementRequired: true at info, no error line",
     [line(B, plain(m)) for m in (*DOC_PASS[:3], DCGM.format(replace="true", reboot="false"), *DOC_PASS[4:])],
     STRESS, Verdict.FAILED, True, "replace"),
    ("DCGM summary rebootRequired: true at info",
     [line(B, plain(m)) for m in (*DOC_PASS[:3], DCGM.format(replace="false", reboot="true"), *DOC_PASS[4:])],
     STRESS, Verdict.FAILED, True, "reboot"),
    ("a DCGM flag that is neither true nor false is a failure",
     [line(B, plain(m)) for m in (*DOC_PASS[:3], DCGM.format(replace='"1"', reboot="false"), *DOC_PASS[4:])],
     STRESS, Verdict.FAILED, True, "replace"),
    ("a DCGM summary naming an XID error with its flags false",
     [line(B, plain(m)) for m in (*DOC_PASS[:3], DCGM.format(replace="false", reboot="false") + " GPU 3 XID 79",
                                  *DOC_PASS[4:])], STRESS, Verdict.FAILED, True, None),
    ("DCGM summary without its flags (the rest of the record lost): DCGM not proven",
     [line(B, plain(m)) for m in (*DOC_PASS[:3], "DCGM diagnostic health summary: dcgmCheckLevel: 4", *DOC_PASS[4:])],
     STRESS, WAITS, True, None),
    ("a failure at level warn after per-test pass lines",
     [line(B, js("info", "stress-ng passed")), line(B, js("warn", "DCGM diagnostic level 4 failed on GPU 3"))],
     STRESS, Verdict.FAILED, True, None),
    ("a failure at syslog's level err",
     [line(B, js("info", "stress-ng passed")), line(B, js("err", "DCGM diagnostic"))], STRESS, Verdict.FAILED, True,
     None),
    ("error text at level info",
     [line(B, js("info", "Deep health check passed")), line(B, js("info", "ERROR: XID 79, GPU fell off the bus"))],
     STRESS, Verdict.FAILED, True, None),
    ("plural and verb forms of failure words, no level",
     [line(B, "stress-ng: 3 errors, 2 failures"), line(B, js("info", "Deep health check passed"))],
     STRESS, Verdict.FAILED, True, None),
    ("a failed count in a summary's figures",
     [line(B, js("info", "Deep health check passed")), line(B, plain(NCCL.replace("NcclNodes: 2", "wrong: 12")))],
     BOTH, Verdict.FAILED, True, None),
    ("a warn line with no failure word",
     [line(B, js("info", "Deep health check passed")), line(B, js("warn", "GPU 3 temperature 87 C"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a progress line naming a test, with no outcome, is neutral",
     [*(line(B, plain(m)) for m in DOC_PASS), line(B, plain("Starting DCGM diagnostics level 4"))],
     STRESS, Verdict.PASSED, True, None),
    ("a line saying a test did not complete is no pass",
     [*(line(B, plain(m)) for m in DOC_PASS), line(B, plain("DCGM level 4: memory test did not complete"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("an info line that states no outcome is neutral",
     [*(line(B, plain(m)) for m in DOC_PASS), line(B, plain("Collecting hardware inventory"))],
     STRESS, Verdict.PASSED, True, None),
    ("NCCL's benign debug line is neutral, not a failure",
     [*(line(B, plain(m)) for m in DOC_PASS), line(B, f"{HOST_B}:12:12 [0] NCCL INFO Failed to open libibverbs.so")],
     STRESS, Verdict.PASSED, True, None),
    ("'0 errors' is not a failure, nor a pass",
     [line(B, js("info", "Deep health check passed")), line(B, js("info", "memory scan: 0 errors"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a notice-level pass line is not a pass",
     [line(B, js("notice", "Deep health check passed"))], STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a debug-level pass line is one",
     [line(B, js("debug", "Deep health check passed"))], STRESS, Verdict.PASSED, True, None),
    ("the documented JSON error line in the node's stream",
     [line(B, js("error", FAULT))], STRESS, Verdict.FAILED, True, None),
    ("the documented JSON error line in a stream that is no node's",
     [line(B, js("info", "Deep health check passed")), line("3f2a9c", js("error", FAULT))],
     STRESS, ANONYMOUS, True, None),
    ("an error line on a stream naming a host no record knows (the EKS agent network)",
     [line(B, js("info", "Deep health check passed")), line("ip-192-168-7-9", js("error", FAULT))],
     STRESS, ANONYMOUS, True, None),
    ("some tests' pass lines only (the others' lines lost or late)",
     [line(B, js("info", "stress-ng passed")), line(B, js("info", "EFA loopback passed"))],
     STRESS, WAITS, True, None),
    ("a peer's pass line names the node, which wrote nothing itself",
     [line(A, js("info", f"NCCL all_reduce with peer {B} ({HOST_B}) passed"))], BOTH, Verdict.SKIPPED, True, None),
    ("own InstanceStress lines and an NCCL summary of its own (a pair's)",
     [*(line(B, plain(m)) for m in DOC_PASS), line(B, plain(NCCL))], BOTH, Verdict.PASSED, True, None),
    ("own InstanceStress lines and NCCL's summary on a stream that is no node's",
     [*(line(B, plain(m)) for m in DOC_PASS), line("7d1e3b", plain(NCCL))], BOTH, WAITS, True, None),
    ("NCCL's summary alone, on a stream that is no node's",
     [line("7d1e3b", plain(NCCL))], BOTH, Verdict.SKIPPED, True, None),
    ("a forged summary naming the silent node in a field, on a stream that is no node's",
     [line("3f2a9c", js("info", "Deep health check passed", instance_id=B))], STRESS, Verdict.SKIPPED, True, None),
    ("a forged summary naming the silent node in its text",
     [line(A, js("info", f"Deep health check passed on instance {B}"))], STRESS, Verdict.SKIPPED, True, None),
    ("a pass word in a sentence no pattern knows",
     [line(B, js("info", "Deep health check passed on 7 of 8 GPUs"))], STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a negated pass", [line(B, plain("stress-ng did not pass"))], STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a level in a field the code does not know",
     [line(B, json.dumps({"Level": "E", "msg": "Deep health check passed"}))], STRESS, Verdict.INCONCLUSIVE, False,
     None),
    ("a level field spelled another way", [line(B, json.dumps({"Level": "ERROR", "msg": "Deep health check passed"}))],
     STRESS, Verdict.FAILED, True, None),
    ("a 'LEVEL:' prefix", [line(B, "WARN: Deep health check passed")], STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a DCGM summary naming several GPUs, one needing a replacement",
     [line(B, plain(m)) for m in (*DOC_PASS[:3], DCGM.format(replace="true", reboot="false") + " gpu1 "
                                  + "replacementRequired: false rebootRequired: false", *DOC_PASS[4:])],
     STRESS, Verdict.FAILED, True, "replace"),
    ("failure words that say nothing failed are no failure (nor a pass)",
     [*(line(B, plain(m)) for m in DOC_PASS),
      line(B, plain("EFA Loopback check passed for device: rdmap0s31, errors: 0"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a failure word inside a path or a compound",
     [line(B, js("info", "Deep health check passed")), line(B, js("info", "see /var/log/error.log; error-free run"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("colour codes, a byte-order mark and a CR around the documented lines",
     [line(B, "\ufeff" + plain(m).replace("info", "\x1b[32minfo\x1b[0m") + "\r\n") for m in DOC_PASS],
     STRESS, Verdict.PASSED, True, None),
    ("no line at all",
     [], STRESS, Verdict.SKIPPED, True, None),
]  # fmt: skip


@pytest.mark.parametrize(("what", "lines", "checks", "expected", "recheck", "hint"), SHAPES, ids=[s[0] for s in SHAPES])
def test_every_documented_line_shape_gets_its_verdict(what, lines, checks, expected, recheck, hint):
    judgement = verdict(lines, checks)
    if expected is WAITS:
        assert judgement is None, what
        judgement, expected = verdict(lines, checks, after=3600), Verdict.INCONCLUSIVE
    anonymous = expected == ANONYMOUS
    expected = Verdict.SKIPPED if anonymous else expected
    assert judgement is not None, what
    assert (judgement.verdict, judgement.recheck, judgement.hint) == (expected, recheck, hint), judgement.evidence
    assert judgement.anonymous == anonymous


def test_an_anonymous_failure_costs_one_recheck_then_no_longer_keeps_a_node_from_passing():
    lines = [line(B, js("info", "Deep health check passed")), line("my-own-stream", js("error", "x"))]
    first = verdict(lines)
    assert first.verdict == Verdict.SKIPPED and first.anonymous and "my-own-stream" in first.evidence[0]
    second = verdict(lines, anonymous_rechecks=1)
    assert second.verdict == Verdict.PASSED and "ignored after its re-check" in second.evidence[-1]


def test_an_inconclusive_verdict_quotes_the_record():
    judgement = verdict([line(B, js("warn", "GPU 3 temperature 87 C"))])
    assert judgement is not None and "[warn] GPU 3 temperature 87 C" in judgement.evidence[0]


def test_an_efa_pass_is_needed_for_every_device_the_instance_type_has():
    two = [line(B, plain(m)) for m in (*DOC_PASS, DOC_PASS[-1].replace("rdmap0s29", "rdmap0s30"))]
    rs = records()
    evidence = read(two[:-1], rs).evidence(rs[1])
    snapshot = NodeSnapshot(group="g", instance_id=B, logical_id=LID_B, status="Running")

    def judged(devices: int, lines: list[Event]):
        look = Look(LEFT + 3601, read(lines, rs).evidence(rs[1]), False, 21600, 300,
                    Requirements(required_tests(STRESS), devices))  # fmt: skip
        return judge_check(rs[1], snapshot, look).verdict

    assert evidence.passes and judged(1, two[:-1]) == Verdict.PASSED
    assert judged(2, two[:-1]) == Verdict.INCONCLUSIVE and judged(2, two) == Verdict.PASSED
    no_efa = [e for e in two if "EFA" not in e.message]
    assert judged(0, no_efa) == Verdict.PASSED, "a type without EFA needs no EFA line (g5 below 8xlarge)"
    assert judged(1, no_efa) == Verdict.INCONCLUSIVE


def test_a_failure_of_an_earlier_check_that_did_not_pass_still_fails_the_node():
    """Check 1 ended inconclusive (its failing line was late); during check 2 that line arrives: the node fails.
    After a recovery action the earlier failure no longer counts (the reboot may have cured it)."""
    inconclusive = Outcome(at=T0 - 600, verdict=Verdict.INCONCLUSIVE, instance_id=B)
    lines = [line(B, js("error", FAULT), at=T0 - 3000), line(B, js("info", "Deep health check passed"))]
    judgement = verdict(lines, outcomes=[inconclusive], created_at=T0 - 9000)
    assert judgement.verdict == Verdict.FAILED
    rebooted = ActionEntry(at=T0 - 400, action=Action.REBOOT, actor="controller", instance_id=B)
    judgement = verdict(lines, outcomes=[inconclusive], actions=[rebooted], created_at=T0 - 9000)
    assert judgement.verdict == Verdict.PASSED


def test_lines_of_an_earlier_check_and_of_other_nodes_do_not_count():
    earlier = Outcome(at=T0 - 600, verdict=Verdict.PASSED, instance_id=B)
    lines = [
        line(B, js("error", FAULT), at=T0 - 700),  # an earlier check of the same instance, before it passed
        line(B, js("info", "Deep health check passed")),
        line(A, js("error", FAULT)),  # another node's failure, in its own stream
    ]
    judgement = verdict(lines, outcomes=[earlier])
    assert judgement is not None and judgement.verdict == Verdict.PASSED


@pytest.mark.parametrize(
    ("what", "at", "lag", "expected"),
    [
        ("stamped 30 s before the window starts (the node's clock behind)", T0 - 30, 95.0, Verdict.FAILED),
        ("stamped 301 s after it left its check (written after it, or its clock ahead)", LEFT + 301, 5.0,
         Verdict.FAILED),
        ("stamped an hour after it left its check", LEFT + 3500, 5.0, Verdict.FAILED),
        ("stamped long before its check: an earlier check's", T0 - 5000, 5.0, Verdict.PASSED),
    ],
)  # fmt: skip
def test_a_failure_counts_on_both_edges_of_a_skewed_window(what, at, lag, expected):
    lines = [*(line(B, plain(m), lag=95.0) for m in DOC_PASS), line(B, js("error", FAULT), at=at, lag=lag)]
    judgement = verdict(lines, after=600 if at < LEFT + 600 else 3600)
    assert judgement is not None and judgement.verdict == expected, what


def test_a_pass_stamped_past_the_window_is_not_one():
    lines = [*(line(B, plain(m)) for m in DOC_PASS[:-1]), line(B, plain(DOC_PASS[-1]), at=LEFT + 301)]
    assert verdict(lines, after=3601).verdict == Verdict.INCONCLUSIVE
    ahead = [*(line(B, plain(m), lag=-400.0) for m in DOC_PASS[:-1]), line(B, plain(DOC_PASS[-1]), LEFT + 301, -400)]
    assert verdict(ahead, after=3601).verdict == Verdict.PASSED, "a clock measured 400 s ahead widens the pass edge"


def test_whose_stream_is_whose():
    rs = records()
    log = read([line(s, js("error", "x")) for s in (B, HOST_B, LID_B, "3f2a9c", "ip-192-168-7-9", f"{A}/{B}")], rs)
    placed = {f.record.stream: (how, owner) for f, how, owner in log.placed}
    assert placed[B] == placed[HOST_B] == placed[LID_B] == (Ownership.OWN, LID_B)
    assert placed["3f2a9c"] == placed["ip-192-168-7-9"] == placed[f"{A}/{B}"] == (Ownership.FOREIGN, None)


def test_a_hostname_two_records_hold_is_no_ones_and_a_gone_nodes_is_retired():
    rs = records()
    reused = rs[0].model_copy(update={"hostname": rs[1].hostname})  # a private IP handed out again
    placed = {f.record.stream: how for f, how, _ in read([line(HOST_B, "x"), line(B, "x")], [reused, rs[1]]).placed}
    assert placed == {HOST_B: Ownership.FOREIGN, B: Ownership.OWN}
    gone = rs[0].model_copy(update={"state": NodeState.GONE})
    placed = {f.record.stream: how for f, how, _ in read([line(HOST_A, "x"), line(A, "x")], [gone, rs[1]]).placed}
    assert placed == {HOST_A: Ownership.RETIRED, A: Ownership.RETIRED}


def test_a_replaced_nodes_old_hostname_stops_being_its_own():
    """Record A's instance was replaced (a new hostname); EC2 handed its old IP to a new node C: C's stream is C's,
    and C's failure is never A's, nor anonymous."""
    rs = records()
    a = rs[0].model_copy(update={"hostname": "ip-10-1-0-9.ec2.internal", "hostnames": [HOST_A, "ip-10-1-0-9"]})
    c = NodeRecord(cluster="c", key="c", group="g", instance_id="i-0cccccccccccccccc", hostname=f"{HOST_A}.x",
                   state=NodeState.CHECKING, check_started_at=T0)  # fmt: skip
    placed = {
        (f.record.stream, how, owner) for f, how, owner in read([line(HOST_A, js("error", FAULT))], [a, c]).placed
    }
    assert placed == {(HOST_A, Ownership.OWN, "c")}


def test_a_nodes_evidence_is_what_every_record_of_the_read_says_of_it():
    """ResultLog indexes its records by owner (a look at a 1,000-node round no longer walks every record once a
    node): each node's evidence is still what node_evidence makes of every record, whoever's stream it is on."""
    rs = records()
    gone = NodeRecord(cluster="c", key="g", group="g", instance_id="i-0ddddddddddddddd1", hostname="ip-10-1-0-7.x",
                      state=NodeState.GONE, check_started_at=T0)  # fmt: skip
    lines = [
        *(line(B, plain(m)) for m in DOC_PASS),
        line(A, js("error", FAULT)),
        line(A, plain(DOC_PASS[1])),
        line("3f2a9c", js("error", FAULT)),  # no node's
        line("3f2a9c", plain(DOC_PASS[1])),
        line("ip-10-9-9-9", js("error", FAULT)),  # no known node's, on a look without every record
        line(gone.instance_id or "", js("error", FAULT)),  # a gone node's: retired
        line(B, js("error", FAULT), at=T0 - 30),
    ]
    for complete in (True, False):
        log = read(lines, [*rs, gone], complete=complete)
        for r in (*rs, gone):
            started, left, before, since = (
                r.check_started_at or T0,
                r.check_left_at,
                previous_verdict_at(r),
                failures_from(r),
            )
            whole = node_evidence(log.placed, r.key, started, left, before, None, since)
            assert log.evidence(r) == whole, (complete, r.key)
        assert {how for _, how, _ in log.placed} >= {Ownership.OWN, Ownership.RETIRED}


def test_a_look_without_the_whole_listing_waits_for_one_before_a_stream_naming_a_stranger_counts():
    """A poll lists only its members: a host it cannot place may be a node of a group nobody records."""
    stranger = [line(B, js("info", "Deep health check passed")), line("ip-10-9-9-9", js("error", FAULT))]
    rs = records()
    evidence = read(stranger, rs, complete=False).evidence(rs[1])
    assert len(evidence.unplaced) == 1 and not evidence.anonymous_failures
    snapshot = NodeSnapshot(group="g", instance_id=B, logical_id=LID_B, status="Running")
    assert judge_check(rs[1], snapshot, Look(LEFT + 600, evidence, False, 21600, 300)) is None
    judgement = verdict(stranger)  # a look at the whole cluster: the stranger is no node's
    assert judgement is not None and judgement.anonymous


@pytest.mark.parametrize(
    ("late", "expected"),
    [
        ([line(B, js("error", FAULT))], Verdict.FAILED),
        ([line(B, plain(DCGM.format(replace="true", reboot="false")))], Verdict.FAILED),
        ([line(B, js("error", FAULT), at=LEFT + 2000)], Verdict.FAILED),  # after the pass window, before revisit's end
        ([line("3f2a9c", js("error", FAULT))], Verdict.SKIPPED),  # an anonymous failure: its one re-check
        ([line(B, js("info", "Deep health check passed"))], None),
        ([line(B, js("error", FAULT), at=LEFT + 300 + 3700)], None),  # after the revisit's end
        ([], None),
    ],
)
def test_a_late_record_reverses_a_pass_only_when_it_is_not_a_pass(late, expected):
    rs = records(state=NodeState.PASSED, verdict=Verdict.PASSED, verdict_at=LEFT + 300)
    judgement = judge_late(rs[1], read(late, rs).evidence(rs[1], revisit_s=3600))
    assert (judgement.verdict if judgement else None) == expected
    if judgement is not None:
        assert judgement.evidence[0].startswith("verdict reversed")
