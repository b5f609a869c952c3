"""Result lines, from the line to the verdict: every line shape the AWS documentation shows (and the adversarial
variants the docs allow), what it proves, whose it is, and the verdict a node gets from it.

The documented on-node lines [D-DHC] are plain text `<time>  info  <message>`, one per test; the one documented
failure line is JSON and names no instance; InstanceConnectivity's NCCL summary names no node.
"""

from __future__ import annotations

import json

import pytest

from deephealth.domain.nodes import NodeRecord, NodeSnapshot, NodeState, Verdict
from deephealth.domain.result_lines import Finding, ResultLine, parse_line, required_tests
from deephealth.domain.result_lines import Test as Probe
from deephealth.domain.results import NameIndex, ResultLog
from deephealth.domain.verdicts import Look, judge_check, judge_late

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
    "stress-ng success",
    "GpuPci Count check success",
    DCGM.format(replace="false", reboot="false"),
    "EFA Loopback check passed for device: rdmap0s29",
    "EFA Loopback check passed for device: rdmap0s30",
)
NCCL = "Nccl test successful. Summary: NcclMaxAlgoBw: 181.52, NcclAvgAlgoBw: 170.08, NcclNodes: 2, NcclClusterMessage:"
STRESS = ("InstanceStress",)
BOTH = ("InstanceStress", "InstanceConnectivity")


def plain(msg: str, level: str = "info") -> str:
    return f"2026-03-29T18:04:20Z  {level}  {msg}"


def js(level: str | None, msg: str, **fields: str) -> str:
    body = {"ts": "2026-03-29T18:04:20Z", "msg": msg, **fields}
    return json.dumps(body if level is None else {"level": level, **body})


def line(stream: str, message: str, at: float = T0 + 2000, lag: float | None = None) -> ResultLine:
    ingest = None if lag is None else int((at + lag) * 1000)
    parsed = parse_line(f"DeepHealthCheckResults/{stream}", message, int(at * 1000), ingest)
    assert parsed is not None
    return parsed


def records() -> list[NodeRecord]:
    common = {"cluster": "c", "group": "g", "state": NodeState.CHECKING, "check_started_at": T0}
    return [
        NodeRecord(key="a", logical_id="a", instance_id=A, instance_ids=[A], hostname=f"{HOST_A}.ec2.internal",
                   **common),
        NodeRecord(key=LID_B, logical_id=LID_B, instance_id=B, instance_ids=[B], hostname=f"{HOST_B}.ec2.internal",
                   seen_in_progress=True, check_left_at=LEFT, **common),
    ]  # fmt: skip


def verdict(lines: list[ResultLine], checks: tuple[str, ...] = STRESS, after: float = 600, node_set: int = 2):
    """The verdict on B, `after` s after it left its check (settle 300 s, revisit 3600 s), checked in a request
    configuration of `node_set` nodes."""
    rs = records()
    log = ResultLog(tuple(lines), since=T0, read_at=LEFT + after, index=NameIndex.of(rs))
    evidence = log.evidence(LID_B, T0, LEFT)
    snapshot = NodeSnapshot(group="g", instance_id=B, logical_id=LID_B, status="Running")
    required = required_tests(checks)
    look = Look(LEFT + after, evidence, False, 21600, 300, required=required, revisit_s=3600, nccl_set=node_set)
    return judge_check(rs[1], snapshot, look)


# (what, lines, checks, expected verdict, re-checked?, recovery hint); WAITS: no verdict until `revisit_s` after the
# check (a missing test's line may only be late), then inconclusive and re-checked.
WAITS = None
SHAPES = [
    ("documented per-test lines, all passing, in the node's stream",
     [line(B, plain(m)) for m in DOC_PASS], STRESS, Verdict.PASSED, True, None),
    ("the same lines in a stream named by the node's hostname",
     [line(HOST_B, plain(m)) for m in DOC_PASS], STRESS, Verdict.PASSED, True, None),
    ("the same lines in a stream named by its NodeLogicalId",
     [line(LID_B, plain(m)) for m in DOC_PASS], STRESS, Verdict.PASSED, True, None),
    ("one summary line (the fake's default reading)",
     [line(B, js("info", "Deep health check passed"))], STRESS, Verdict.PASSED, True, None),
    ("DCGM summary replacementRequired: true at info, no error line",
     [line(B, plain(m)) for m in (*DOC_PASS[:2], DCGM.format(replace="true", reboot="false"), *DOC_PASS[3:])],
     STRESS, Verdict.FAILED, True, "replace"),
    ("DCGM summary rebootRequired: true at info",
     [line(B, plain(m)) for m in (*DOC_PASS[:2], DCGM.format(replace="false", reboot="true"), *DOC_PASS[3:])],
     STRESS, Verdict.FAILED, True, "reboot"),
    ("DCGM summary without its flags",
     [line(B, plain(m)) for m in (*DOC_PASS[:2], "DCGM diagnostic health summary: dcgmCheckLevel: 4", *DOC_PASS[3:])],
     STRESS, Verdict.INCONCLUSIVE, False, None),
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
    ("a warn line with no failure word",
     [line(B, js("info", "Deep health check passed")), line(B, js("warn", "GPU 3 temperature 87 C"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("an info line no pattern recognises",
     [*(line(B, plain(m)) for m in DOC_PASS), line(B, plain("Starting DCGM diagnostics level 4"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("'0 errors' is not a failure, nor a pass",
     [line(B, js("info", "Deep health check passed")), line(B, js("info", "memory scan: 0 errors"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a notice-level pass line is not a pass",
     [line(B, js("notice", "Deep health check passed"))], STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a debug-level pass line is one",
     [line(B, js("debug", "Deep health check passed"))], STRESS, Verdict.PASSED, True, None),
    ("the documented JSON error line in the node's stream",
     [line(B, js("error", FAULT))], STRESS, Verdict.FAILED, True, None),
    ("the documented JSON error line in a stream naming nobody",
     [line(B, js("info", "Deep health check passed")), line("3f2a9c", js("error", FAULT))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("an error line naming a host no record knows (the EKS agent network)",
     [line(B, js("info", "Deep health check passed")), line("ip-192-168-7-9", js("error", FAULT))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("some tests' pass lines only (the others' lines lost or late)",
     [line(B, js("info", "stress-ng passed")), line(B, js("info", "EFA loopback passed"))],
     STRESS, WAITS, True, None),
    ("a peer's pass line names the node, which wrote nothing itself",
     [line(A, js("info", f"NCCL all_reduce with peer {B} ({HOST_B}) passed"))], BOTH, Verdict.SKIPPED, True, None),
    ("own InstanceStress lines and NCCL's anonymous summary",
     [*(line(B, plain(m)) for m in DOC_PASS), line("7d1e3b", plain(NCCL))], BOTH, Verdict.PASSED, True, None),
    ("NCCL's anonymous summary of a smaller node set than the node's (the peers' pair, not its own set)",
     [*(line(B, plain(m)) for m in DOC_PASS), line("7d1e3b", plain(NCCL))], BOTH, WAITS, True, None),
    ("own InstanceStress lines, no NCCL line at all",
     [line(B, plain(m)) for m in DOC_PASS], BOTH, WAITS, True, None),
    ("NCCL's anonymous summary alone",
     [line("7d1e3b", plain(NCCL))], BOTH, Verdict.INCONCLUSIVE, False, None),
    ("a pass line on an opaque stream naming the node in a field",
     [line("3f2a9c", js("info", "Deep health check passed", instance_id=B))], STRESS, Verdict.PASSED, True, None),
    ("a line whose field names the node and whose text names another",
     [line("3f2a9c", js("info", f"Deep health check passed on instance {A}", instance_id=B))], STRESS, Verdict.PASSED,
     True, None),
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
     [line(B, plain(m)) for m in (*DOC_PASS[:2], DCGM.format(replace="true", reboot="false") + " gpu1 "
                                  + "replacementRequired: false rebootRequired: false", *DOC_PASS[3:])],
     STRESS, Verdict.FAILED, True, "replace"),
    ("failure words that say nothing failed are no failure (nor a pass)",
     [*(line(B, plain(m)) for m in DOC_PASS),
      line(B, plain("EFA Loopback check passed for device: rdmap0s31, errors: 0"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a failure word inside a path or a compound",
     [line(B, js("info", "Deep health check passed")), line(B, js("info", "see /var/log/error.log; error-free run"))],
     STRESS, Verdict.INCONCLUSIVE, False, None),
    ("a pass line on an opaque stream naming two nodes",
     [line("3f2a9c", js("info", f"NCCL test between {A} and {B} passed"))], BOTH, Verdict.INCONCLUSIVE, False, None),
    ("no line at all",
     [], STRESS, Verdict.SKIPPED, True, None),
]  # fmt: skip


@pytest.mark.parametrize(("what", "lines", "checks", "expected", "recheck", "hint"), SHAPES, ids=[s[0] for s in SHAPES])
def test_every_documented_line_shape_gets_its_verdict(what, lines, checks, expected, recheck, hint):
    node_set = 4 if "smaller node set" in what else 2
    judgement = verdict(lines, checks, node_set=node_set)
    if expected is WAITS:
        assert judgement is None, what
        judgement, expected = verdict(lines, checks, after=3600, node_set=node_set), Verdict.INCONCLUSIVE
    assert judgement is not None, what
    assert (judgement.verdict, judgement.recheck, judgement.hint) == (expected, recheck, hint), judgement.evidence


def test_an_inconclusive_verdict_quotes_the_line():
    judgement = verdict([line(B, js("warn", "GPU 3 temperature 87 C"))])
    assert judgement is not None and "[warn] GPU 3 temperature 87 C" in judgement.evidence[0]


def test_documented_lines_are_classified_test_by_test():
    found = {m: line(B, plain(m)) for m in DOC_PASS}
    assert [found[m].proves for m in DOC_PASS] == [
        {Probe.STRESS}, {Probe.GPU_PCI}, {Probe.DCGM}, {Probe.EFA}, {Probe.EFA}
    ]  # fmt: skip
    assert all(f.finding == Finding.PASS and f.level == "info" and not f.json_format for f in found.values())
    assert found[DOC_PASS[2]].shape == "info dcgm-summary"
    nccl = line("7d1e3b", plain(NCCL))
    assert (nccl.proves, nccl.nccl_nodes, nccl.shape) == ({Probe.NCCL}, 2, "info nccl")


def test_a_dcgm_summary_says_failure_even_at_a_level_that_looks_fine():
    failed = line(B, js("debug", DCGM.format(replace="true", reboot="true")))
    assert (failed.finding, failed.hint) == (Finding.FAIL, "replace")


def test_lines_of_an_earlier_check_and_of_other_nodes_do_not_count():
    lines = [
        line(B, js("error", FAULT), at=T0 - 100),  # an earlier check of the same instance
        line(B, js("info", "Deep health check passed")),
        line(A, js("error", FAULT)),  # another node's failure, in its own stream
    ]
    judgement = verdict(lines)
    assert judgement is not None and judgement.verdict == Verdict.PASSED


def test_a_hostname_two_records_hold_names_nobody():
    rs = records()
    reused = rs[0].model_copy(update={"hostname": rs[1].hostname})  # a private IP handed out again
    index = NameIndex.of([reused, rs[1]])
    assert index.owner(line(HOST_B, js("info", "Deep health check passed"))) is None
    assert index.owner(line(B, js("info", "Deep health check passed"))) == LID_B


def test_a_gone_nodes_hostname_is_free_but_its_instance_ids_are_kept():
    rs = records()
    gone = rs[0].model_copy(update={"state": NodeState.GONE, "hostname": rs[1].hostname})
    index = NameIndex.of([gone, rs[1]])
    assert index.owner(line(HOST_B, "x")) == LID_B and index.owner(line(A, "x")) == "a"


def test_stream_kinds_say_how_streams_are_named():
    index = NameIndex.of(records())
    kinds = [index.stream_kind(line(s, "x")) for s in (B, HOST_B, LID_B, "3f2a9c", "ip-192-168-7-9")]
    assert kinds == ["instance-id", "hostname", "logical-id", "opaque", "unknown-host"]


def test_a_lines_lag_is_its_ingestion_after_its_timestamp():
    assert line(B, "x", lag=42.5).lag_s == 42.5 and line(B, "x").lag_s is None


def test_other_streams_are_not_results():
    assert parse_line("SageMaker/instance-log", js("error", FAULT), 0) is None


@pytest.mark.parametrize(
    ("late", "expected"),
    [
        ([line(B, js("error", FAULT))], Verdict.FAILED),
        ([line(B, plain(DCGM.format(replace="true", reboot="false")))], Verdict.FAILED),
        ([line("3f2a9c", js("error", FAULT))], Verdict.INCONCLUSIVE),  # would have kept it from passing
        ([line(B, js("info", "Deep health check passed"))], None),
        ([], None),
    ],
)
def test_a_late_line_reverses_a_pass_only_when_it_is_not_a_pass(late, expected):
    log = ResultLog(tuple(late), since=T0, read_at=LEFT + 900, index=NameIndex.of(records()))
    judgement = judge_late(log.evidence(LID_B, T0, LEFT))
    assert (judgement.verdict if judgement else None) == expected
    if judgement is not None:
        assert judgement.evidence[0].startswith("verdict reversed")


def test_a_gone_nodes_hostname_names_it_for_the_lines_stamped_while_it_lived():
    """A peer replaced and gone since: its lines from the round it was in are still its own, not anonymous."""
    rs = records()
    gone = rs[0].model_copy(update={"state": NodeState.GONE, "created_at": T0 - 100, "updated_at": T0 + 2500})
    index = NameIndex.of([gone])
    assert index.owner(line(HOST_A, js("error", FAULT), at=T0 + 2000)) == "a"
    assert index.owner(line(HOST_A, js("error", FAULT), at=T0 + 9000)) is None, "after it was gone: nobody's"
    reused = NameIndex.of([gone, rs[1].model_copy(update={"hostname": f"{HOST_A}.ec2.internal"})])
    assert (
        reused.owner(line(HOST_A, "x", at=T0 + 2000)) == "a" and reused.owner(line(HOST_A, "x", at=T0 + 9000)) == LID_B
    )


def test_a_look_without_the_whole_listing_waits_for_one_before_a_line_naming_a_stranger_counts():
    """A poll lists only its members: a host it cannot place may be a node of a group nobody records."""
    stranger = [line(B, js("info", "Deep health check passed")), line("ip-10-9-9-9", js("error", FAULT))]
    rs = records()
    partial = ResultLog(tuple(stranger), since=T0, read_at=LEFT + 600, index=NameIndex.of(rs), names_complete=False)
    evidence = partial.evidence(LID_B, T0, LEFT)
    assert evidence.unresolved == 1 and not evidence.anonymous_failures
    snapshot = NodeSnapshot(group="g", instance_id=B, logical_id=LID_B, status="Running")
    assert judge_check(rs[1], snapshot, Look(LEFT + 600, evidence, False, 21600, 300)) is None
    assert judge_late(evidence) is None
    judgement = verdict(stranger)  # a look at the whole cluster: the stranger is a stranger
    assert judgement is not None and judgement.verdict == Verdict.INCONCLUSIVE
