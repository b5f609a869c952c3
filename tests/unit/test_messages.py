"""domain.messages and domain.message_words: every kind of notification reads well in a mailbox and in a chat
window, within SNS's and AWS Chatbot's limits, and a detail of an unexpected shape never stops a publish."""

import json

import pytest

from hyperpod_dhc.deephealth.domain.message_words import DESCRIPTION_MAX, SUBJECT_MAX, SUMMARIES, node_subject
from hyperpod_dhc.deephealth.domain.messages import KEYWORD_MAX, MESSAGE_BUDGET_BYTES, TITLE_MAX, render
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState, Verdict, transition
from hyperpod_dhc.deephealth.domain.notices import notices
from hyperpod_dhc.deephealth.domain.policy import NOTIFICATION_KINDS
from hyperpod_dhc.deephealth.domain.runbooks import RUNBOOKS_URL, notification_runbook

T = 1_000.0
CLUSTER, GROUP = "ml-cluster", "gpu-workers"
IID = "i-0abc123def4567890"
LID = "lid-7f3a"
XID = 'result log: "DCGM diagnostic failed on GPU 3: XID 79 (GPU has fallen off the bus)"'


def node_notice(kind, to_state, verdict=None, from_state=NodeState.CHECKING, **record):
    """A node notification as `domain.notices` makes it from a saved decision."""
    base = {
        "cluster": CLUSTER,
        "key": LID,
        "group": GROUP,
        "logical_id": LID,
        "instance_id": IID,
        "hostname": "ip-10-1-2-3.ec2.internal",
        "check_types": ("InstanceStress",),
        "state": from_state,
        "version": 3,
        **record,
    }
    changes = {"verdict": verdict, "verdict_at": T, "evidence": [XID]} if verdict else {}
    saved, decision = transition(NodeRecord(**base), T, to_state, f"judged {verdict}", "r-1", **changes)
    (found,) = [n for n in notices(saved, decision) if n.kind == kind]
    return found.subject, found.detail


# What each caller publishes (usecases/claim_round, decisions, operator_actions, readings; domain/safety).
OTHERS = {
    "round-finished": ("round r-000042 finished", {"round_id": "r-000042", "failed_step": False,
                                                   "states": {"passed": 7, "recovery_due": 1}}),
    "dry-run": ("dry-run would check 3 node(s)", {"round_id": "r-1", "checks": "InstanceStress",
                                                  "nodes": ["lid-1", "lid-2", "lid-3"]}),
    "recovery-held": ("recovery held in gpu-workers", {"reason": "replacement budget spent: 2 of 2 in 24 h"}),
    "capacity-hold": ("replacements stopped", {"reason": "3 replacements failed their check in 6 h"}),
    "breaker-tripped": ("breaker open", {"reason": "systemic failure: 40% of checked nodes failed in 1 h"}),
    "breaker-reset": ("breaker reset", {"scope": "breaker", "by": "arn:aws:iam::123456789012:user/ops",
                                        "reason": "bad driver rolled back", "released": ["lid-1", "lid-2"]}),
    "reading-observed": ("a new shape", {"shape": "json:level,msg", "example": '{"level": "x", "msg": "y"}',
                                         "note": "a shape no pattern recognises is never a pass",
                                         "readings": "hpdhc readings ml-cluster"}),
    "check-overdue": ("in progress too long", {"operation_id": "op-1", "in_progress_s": 5520,
                                               "note": "no new check can start on the cluster while it runs"}),
    "job-deferral": ("busy with jobs", {"nodes": ["lid-1", "lid-2"], "busy_for_s": {"lid-1": 30000, "lid-2": 25000},
                                        "job_defer_max_s": 21600}),
    "check-waiting": ("has waited 250 min for a deep health check",
                      {"node": "lid-1", "instance_id": "i-0abc123def4567890", "waited_s": 15000,
                       "evidence": ["ready for 15000 s and not checked yet: no check could start"]}),
    "bridge-take-over": ("the Slurm bridge of ml-cluster was taken over",
                         {"old_holder": "ip-10-1-0-5:6f1c", "new_holder": "ip-10-1-0-9:a2d4", "fence": 3,
                          "why": "started with --take-over",
                          "note": "ip-10-1-0-5:6f1c no longer holds the fence: it only adds drains from now on."}),
    "cluster-not-slurm": ("ml-cluster is not a Slurm cluster",
                          {"cluster_arn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/abc",
                           "orchestrators": ["Eks"], "note": "hyperpod-dhc drives Slurm clusters only"}),
}  # fmt: skip
NODE = {
    "node-failed": lambda: node_notice("node-failed", NodeState.RECOVERY_DUE, Verdict.FAILED),
    "node-recovered": lambda: node_notice("node-recovered", NodeState.PASSED, Verdict.PASSED, attempts=1),
    "node-quarantined": lambda: node_notice("node-quarantined", NodeState.QUARANTINED, Verdict.FAILED, attempts=3),
    "node-inconclusive": lambda: node_notice("node-inconclusive", NodeState.INCONCLUSIVE, Verdict.INCONCLUSIVE),
}
FIRST_WORDS = {
    "node-failed": "FAILED InstanceStress (dcgm): ip-10-1-2-3 (i-0abc123def4567890) in ml-cluster/gpu-workers",
    "node-recovered": "RECOVERED: ip-10-1-2-3 (i-0abc123def4567890) in ml-cluster/gpu-workers passed",
    "node-quarantined": "QUARANTINED: ip-10-1-2-3 (i-0abc123def4567890) in ml-cluster/gpu-workers",
    "node-inconclusive": "INCONCLUSIVE InstanceStress: ip-10-1-2-3 (i-0abc123def4567890) in ml-cluster/gpu-workers",
    "round-finished": "ROUND FINISHED in ml-cluster/gpu-workers (r-000042): 7 passed, 1 recovery_due",
    "dry-run": "DRY-RUN in ml-cluster/gpu-workers: would check 3 node(s) (InstanceStress)",
    "recovery-held": "RECOVERY HELD in ml-cluster/gpu-workers: replacement budget spent",
    "capacity-hold": "REPLACEMENTS STOPPED in ml-cluster/gpu-workers: 3 replacements failed",
    "breaker-tripped": "BREAKER OPEN on ml-cluster: systemic failure",
    "breaker-reset": "BREAKER RESET on ml-cluster by arn:aws:iam::123456789012:user/ops: 2 held node(s) released",
    "reading-observed": "NEW RESULT-LINE SHAPE on ml-cluster: json:level,msg",
    "check-overdue": "CHECK OVERDUE on ml-cluster: operation op-1 in progress for 1 h 32 min",
    "job-deferral": "CHECKED DESPITE JOBS in ml-cluster/gpu-workers: 2 node(s) busy with jobs for over 6 h",
    "check-waiting": "WAITING FOR A CHECK in ml-cluster/gpu-workers: lid-1 ready for 4 h 10 min, not checked yet",
    "bridge-take-over": "SLURM BRIDGE TAKEN OVER on ml-cluster: ip-10-1-0-9:a2d4 replaces ip-10-1-0-5:6f1c "
    "(started with --take-over)",
    "cluster-not-slurm": "NOT A SLURM CLUSTER: ml-cluster (orchestrated by Eks) is ignored; no check or action on it",
}
# Published with group "": the cluster's breaker (tripped, reset) and what the cluster's logs and operations show.
CLUSTER_WIDE = {
    "breaker-tripped",
    "breaker-reset",
    "reading-observed",
    "check-overdue",
    "bridge-take-over",
    "cluster-not-slurm",
}


def published(kind):
    subject, detail = NODE[kind]() if kind in NODE else OTHERS[kind]
    group = "" if kind in CLUSTER_WIDE else GROUP
    return subject, detail, group


def rendered(kind, subject=None, detail=None, group=None):
    s, d, g = published(kind) if kind in NODE or kind in OTHERS else ("", {}, GROUP)
    out = render(
        kind, CLUSTER, g if group is None else group, s if subject is None else subject, d if detail is None else detail
    )
    return out, json.loads(out.message)


def chat(doc):
    return json.loads(doc["https"])


def test_every_kind_has_a_summary_and_a_case_here():
    assert set(SUMMARIES) == set(NOTIFICATION_KINDS) == set(NODE) | set(OTHERS) == set(FIRST_WORDS)


@pytest.mark.parametrize("kind", NOTIFICATION_KINDS)
def test_each_kind_says_what_happened_first_in_the_mail_and_the_chat_title(kind):
    _, doc = rendered(kind)
    first = doc["email"].splitlines()[0]
    assert first.startswith(FIRST_WORDS[kind]), first
    assert chat(doc)["content"]["title"] == first and chat(doc)["metadata"]["summary"] == first


@pytest.mark.parametrize("kind", NOTIFICATION_KINDS)
def test_each_kind_keeps_its_machine_readable_json_for_queues_functions_and_webhooks(kind):
    _, detail, group = published(kind)
    _, doc = rendered(kind)
    machine = {"kind": kind, "cluster": CLUSTER, "group": group, "runbook": notification_runbook(kind), **detail}
    machine = json.loads(json.dumps(machine, default=str))
    assert json.loads(doc["default"]) == machine  # every protocol without a key of its own: SQS, Lambda, HTTP...
    assert set(doc) == {"default", "email", "https"}
    context = chat(doc)["metadata"]["additionalContext"]
    assert all(isinstance(v, str) for v in context.values())  # the schema's string-to-string map
    assert (context["kind"], context["cluster"], context["group"], context["runbook"]) == (
        kind, CLUSTER, group, notification_runbook(kind)
    )  # fmt: skip
    assert json.loads(context["detail"]) == machine
    # The plain text ends with the same JSON, for whoever reads the mail with a script.
    assert json.loads(doc["email"].split("\n\n", 1)[1]) == machine


@pytest.mark.parametrize("kind", NOTIFICATION_KINDS)
def test_each_kind_links_its_runbook_section_in_the_mail_and_the_chat(kind):
    _, doc = rendered(kind)
    link = notification_runbook(kind)
    assert link == f"{RUNBOOKS_URL}#notification-{kind}"
    assert f"Runbook: {link}" in doc["email"].split("\n\n", 1)[0].splitlines()  # in the text, above the JSON
    assert chat(doc)["content"]["description"].endswith(f"Runbook: {link}")


def test_a_long_chat_description_is_cut_above_the_runbook_link():
    evidence = [f"line {i} " + "x" * 990 for i in range(10)]
    _, doc = rendered("node-failed", detail={"node": LID, "evidence": evidence, "note": "y" * 1000})
    description = chat(doc)["content"]["description"]
    assert len(description) <= DESCRIPTION_MAX and "…" in description
    assert description.endswith(f"Runbook: {notification_runbook('node-failed')}")


NODE_DETAIL = {"node": LID, "instance_id": IID, "hostname": "ip-10-1-2-3"}


def test_a_node_subject_names_the_host_the_instance_and_the_cluster():
    assert node_subject("quarantined", CLUSTER, NODE_DETAIL) == (
        "hyperpod-dhc: ip-10-1-2-3 (i-0abc123def4567890) on ml-cluster quarantined"
    )
    # No host name yet (an older record): the node's key names it; no instance: nothing in parentheses.
    assert node_subject("quarantined", CLUSTER, {**NODE_DETAIL, "hostname": None}) == (
        f"hyperpod-dhc: {LID} (i-0abc123def4567890) on ml-cluster quarantined"
    )
    assert node_subject("quarantined", CLUSTER, {"node": LID}) == f"hyperpod-dhc: {LID} on ml-cluster quarantined"


@pytest.mark.parametrize(
    ("cluster", "host"),
    [("c" * 63, "ip-10-1-2-3"), ("ml-cluster", "h" * 63), ("c" * 63, "h" * 63)],
    ids=["long-cluster", "long-host", "both-long"],
)
def test_a_node_subject_fits_sns_keeping_the_instance_and_what_happened(cluster, host):
    subject = node_subject("inconclusive (its pass is reversed)", cluster, {**NODE_DETAIL, "hostname": host})
    assert len(subject) == SUBJECT_MAX
    assert subject.startswith("hyperpod-dhc: ") and subject.endswith(f"({IID}) on {subject.split(' on ')[-1]}")
    assert f"({IID}) on " in subject and subject.endswith(" inconclusive (its pass is reversed)")
    name, shown_cluster = subject.removeprefix("hyperpod-dhc: ").split(f" ({IID}) on ")
    shown_cluster = shown_cluster.removesuffix(" inconclusive (its pass is reversed)")
    assert name == host or (name.endswith("…") and host.startswith(name[:-1]))
    assert shown_cluster == cluster or (shown_cluster.endswith("…") and cluster.startswith(shown_cluster[:-1]))
    assert len(name) >= 10 and len(shown_cluster) >= 10  # neither is squeezed out by the other


@pytest.mark.parametrize("kind", sorted(NODE))
def test_each_node_notification_subject_names_the_host_the_instance_and_the_cluster(kind):
    subject, _ = NODE[kind]()
    assert subject.startswith(f"hyperpod-dhc: ip-10-1-2-3 ({IID}) on {CLUSTER} "), subject
    assert rendered(kind)[0].subject == subject


def test_a_failure_reads_like_an_incident_line_in_the_mail():
    out, doc = rendered("node-failed")
    assert out.subject == "hyperpod-dhc: ip-10-1-2-3 (i-0abc123def4567890) on ml-cluster failed its deep health check"
    lines = doc["email"].splitlines()
    assert lines[0] == "FAILED InstanceStress (dcgm): ip-10-1-2-3 (i-0abc123def4567890) in ml-cluster/gpu-workers"
    assert lines[1] == f"> {XID}"
    assert lines[2] == "Decision: judged failed"
    assert lines[3] == f"hpdhc history ml-cluster {LID}"
    assert lines[4] == f"Runbook: {notification_runbook('node-failed')}"
    assert lines[5] == ""


def test_a_failure_is_a_chatbot_custom_notification():
    _, doc = rendered("node-failed")
    note = chat(doc)
    assert note["version"] == "1.0" and note["source"] == "custom"
    content, metadata = note["content"], note["metadata"]
    assert content["textType"] == "client-markdown"
    assert f"```{XID}```" in content["description"]  # evidence verbatim, no markdown or mention parsed in it
    assert f"`hpdhc history ml-cluster {LID}`" in content["description"]
    assert content["keywords"] == ["node-failed", CLUSTER, GROUP]
    assert metadata["eventType"] == "node-failed"
    assert metadata["threadId"] == f"hyperpod-dhc/{CLUSTER}/{LID}"  # the node's later messages join its thread
    assert metadata["relatedResources"] == [IID]
    assert metadata["additionalContext"]["node"] == LID and metadata["additionalContext"]["instance_id"] == IID


@pytest.mark.parametrize(
    ("kind", "command"),
    [
        ("node-quarantined", f"hpdhc history ml-cluster {LID}"),
        ("node-recovered", f"hpdhc history ml-cluster {LID}"),
        ("breaker-tripped", "hpdhc breakers ml-cluster"),
        ("round-finished", "hpdhc status --cluster ml-cluster --group gpu-workers"),
        ("dry-run", "hpdhc nodes ml-cluster --group gpu-workers --state shadowed"),
        ("reading-observed", "hpdhc readings ml-cluster"),
    ],
)
def test_each_message_says_which_hpdhc_command_shows_more(kind, command):
    _, doc = rendered(kind)
    assert command in doc["email"].split("\n\n")[0].splitlines()
    assert f"`{command}`" in chat(doc)["content"]["description"]


def test_a_reversed_pass_and_a_replacement_by_hyperpod_say_so():
    subject, detail = node_notice("node-failed", NodeState.RECOVERY_DUE, Verdict.FAILED, from_state=NodeState.PASSED)
    _, doc = rendered("node-failed", subject, detail)
    assert doc["email"].splitlines()[0].endswith("(its pass is reversed)")
    _, doc = rendered("node-failed", detail={**detail, "verdict": Verdict.REPLACED_BY_HYPERPOD})
    assert doc["email"].startswith("REPLACED BY HYPERPOD in its InstanceStress (dcgm): ip-10-1-2-3")


def test_a_node_without_a_hostname_is_named_by_its_key_and_instance():
    subject, detail = NODE["node-inconclusive"]()
    _, doc = rendered("node-inconclusive", subject, {**detail, "hostname": None})
    assert doc["email"].startswith(f"INCONCLUSIVE InstanceStress: {LID} ({IID}) in ml-cluster/gpu-workers")


def test_the_other_shapes_of_a_kind_read_too():
    silent = {"silent_nodes": 6, "note": "nodes come back Running"}
    _, doc = rendered("reading-observed", "hyperpod-dhc: ml-cluster logs no pass line", silent, "")
    assert doc["email"].startswith("NO PASS LINES on ml-cluster: 6 node(s) came back")
    held = {"node": LID, "reason": "needs a replacement the controller will not make"}
    _, doc = rendered("recovery-held", "s", held)
    assert doc["email"].startswith(f"RECOVERY HELD: {LID} in ml-cluster/gpu-workers: needs a replacement")
    assert f"hpdhc history ml-cluster {LID}" in doc["email"]
    lifted = {"scope": "capacity-hold", "by": "ops", "reason": "new AMI", "released": []}
    _, doc = rendered("breaker-reset", "s", lifted, GROUP)
    assert doc["email"].startswith("BAD-CAPACITY HOLD LIFTED on ml-cluster/gpu-workers by ops: 0 held node(s)")
    assert chat(doc)["metadata"]["threadId"] == "hyperpod-dhc/ml-cluster/gpu-workers/capacity-hold"


@pytest.mark.parametrize("kind", NOTIFICATION_KINDS)
@pytest.mark.parametrize("detail", [{}, {"states": "x", "nodes": 3, "in_progress_s": "soon", "evidence": 7}])
def test_a_detail_of_an_unexpected_shape_never_stops_the_publish(kind, detail):
    out, doc = rendered(kind, "hyperpod-dhc: something happened", detail, GROUP)
    first = doc["email"].splitlines()[0]
    assert first and out.subject == "hyperpod-dhc: something happened"
    assert chat(doc)["content"]["title"] == first
    runbook = notification_runbook(kind)
    machine = {"kind": kind, "cluster": CLUSTER, "group": GROUP, "runbook": runbook, **detail}
    assert json.loads(doc["default"]) == machine


def test_an_unknown_shape_gets_a_generic_line_quoting_the_kind():
    _, doc = rendered("check-overdue", "hyperpod-dhc: a check on ml-cluster is overdue", {"in_progress_s": "?"}, "")
    assert doc["email"].splitlines()[0] == "check-overdue in ml-cluster: a check on ml-cluster is overdue"
    _, doc = rendered("round-finished", "", {"states": None})
    assert doc["email"].splitlines()[0] == "round-finished in ml-cluster/gpu-workers"


def test_long_texts_are_cut_to_the_limits_with_an_ellipsis():
    _, detail = NODE["node-failed"]()
    long_reason = "x" * 20_000
    out, doc = rendered("node-failed", "hyperpod-dhc: " + "s" * 300 + "\nsecond line", {**detail, "reason": long_reason,
                        "evidence": ["e" * 5000] * 30, "hostname": "h" * 400})  # fmt: skip
    assert len(out.subject) == SUBJECT_MAX and out.subject.endswith("…") and "\n" not in out.subject
    content = chat(doc)["content"]
    assert len(content["title"]) == TITLE_MAX and content["title"].endswith("…")
    assert len(content["description"]) <= DESCRIPTION_MAX
    # Whole lines, the command and the runbook kept.
    runbook = notification_runbook("node-failed")
    assert content["description"].endswith(f"…\n`hpdhc history ml-cluster {LID}`\nRunbook: {runbook}")
    assert content["description"].count("```") % 2 == 0
    assert all(len(k) <= KEYWORD_MAX for k in content["keywords"])
    assert len(out.message.encode()) <= MESSAGE_BUDGET_BYTES


def test_a_huge_detail_fits_sns_and_says_what_was_cut():
    nodes = [f"lid-{i:06d}-{'x' * 30}" for i in range(20_000)]  # ~900 KB of node keys
    detail = {"round_id": "r-1", "checks": "InstanceStress", "nodes": nodes}
    out, doc = rendered("dry-run", "hyperpod-dhc: dry-run would check 20000 node(s)", detail)
    assert len(out.message.encode()) <= MESSAGE_BUDGET_BYTES
    machine = json.loads(doc["default"])
    assert machine["truncated"] == {"nodes": 20_000} and machine["nodes"] == nodes[: len(machine["nodes"])]
    assert doc["email"].startswith("DRY-RUN in ml-cluster/gpu-workers: would check 20000 node(s)")  # the whole count
    assert "(+19990 more)" in doc["email"]
    context = chat(doc)["metadata"]["additionalContext"]["detail"]
    assert json.loads(context)["truncated"]["nodes"] == 20_000
