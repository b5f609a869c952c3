"""`hyperpod_dhc.hpdhc.timeline` on node documents as the API returns them, and `hpdhc timeline` against a stubbed API:
segments, marks and rounds from histories, the page's data read back, and a page that fetches nothing. With the twin's
own records and its local API: tests/simulation/test_timeline.py."""

import itertools
import json
import re

import pytest

from hyperpod_dhc.hpdhc import cli, timeline, timeline_svg
from hyperpod_dhc.hpdhc import timeline_page as page_of
from hyperpod_dhc.hpdhc.client import ApiError, OperatorClient

T0 = 1_790_000_000.0


def entry(at: float, state: str, reason: str, trigger: str | None = None, instance: str = "i-1") -> dict:
    return {"at": T0 + at, "state": state, "reason": reason, "instance_id": instance, "trigger": trigger}


def document(key: str, group: str, history: list[dict], actions=(), **fields) -> dict:
    return {
        "node": key,
        "group": group,
        "state": history[-1]["state"] if history else None,
        "verdict": None,
        "evidence": [],
        "instance_ids": ["i-1"],
        "held_by": None,
        "history": history,
        "actions": [{"at": T0 + at, "action": a, "actor": actor, "instance_id": "i-1"} for at, a, actor in actions],
        **fields,
    }


REBOOTED = document(
    "node-a",
    "p5",
    [
        entry(0, "pending", "new worker node ready (Running)", "c-r000000"),
        entry(100, "checking", "claimed for a check round", "c-r000001"),
        entry(190, "checking", "seen in DeepHealthCheckInProgress", "c-r000001"),
        entry(3000, "recovery_due", "check failed; next step reboot", "c-r000001"),
        entry(3000, "recovering", "reboot requested", "c-r000001"),
        entry(3600, "pending", "reboot done: Running again", "c-r000001"),
        entry(4000, "checking", "claimed for a check round", "c-r000002"),
        entry(6000, "passed", "check passed after 1 recovery action(s)", "c-r000002"),
    ],
    actions=[(3000, "reboot", "controller")],
    verdict="passed",
    evidence=["DeepHealthCheckInProgress -> Running; result lines say dcgm passed"],
)
HELD = document(
    "node-b",
    "g5",
    [
        entry(50, "pending", "new worker node ready (Running)"),
        entry(100, "checking", "claimed for a check round", "c-r000001"),
        entry(3100, "recovery_due", "check failed; next step replace", "c-r000001"),
        entry(3200, "recovery_due", "replace held: breaker open (3 of 4 failed)", "reconcile"),
    ],
    held_by="breaker",
)
HYPERPOD = document(
    "node-c",
    "p5",
    [
        entry(10, "pending", "new worker node ready (Running)"),
        entry(100, "checking", "claimed for a check round", "c-r000001"),
        entry(2000, "recovering", "HyperPod is recovering the node (status Pending)", "c-r000001"),
        entry(2600, "pending", "HyperPod replaced the instance", "reconcile", instance="i-2"),
    ],
    actions=[(2000, "hyperpod", "hyperpod")],
)


def picture(*docs, **kwargs) -> timeline.Timeline:
    return timeline.build("c", docs or (REBOOTED, HELD, HYPERPOD), end=T0 + 7200, origin=T0, clock="relative", **kwargs)


def test_segments_follow_the_history_one_per_run_of_a_state_with_every_decision_line():
    node = picture().groups[1].nodes[0]  # p5 sorted after g5; node-a before node-c (ready first)
    assert node.key == "node-a"
    got = [(s.state, s.start, s.end) for s in node.segments]
    assert got == [
        ("waiting", 0, 100),
        ("in-check", 100, 3000),
        ("recovery-due", 3000, 3000),
        ("recovering", 3000, 3600),
        ("waiting", 3600, 4000),
        ("in-check", 4000, 6000),
        ("passed", 6000, 7200),
    ]
    check = node.segments[1]
    assert [line.text for line in check.lines] == [
        "claimed for a check round [c-r000001]",
        "seen in DeepHealthCheckInProgress [c-r000001]",
    ]
    assert check.round == "c-r000001" and node.final == "passed"


def test_a_held_recovery_is_its_own_state_and_hyperpods_recovery_a_mark_of_its_own():
    t = picture()
    held = t.groups[0].nodes[0]
    assert [s.state for s in held.segments] == ["waiting", "in-check", "recovery-due", "held"]
    assert held.final == "held"
    hyperpod = t.groups[1].nodes[1]
    assert [(m.action, m.actor, m.at) for m in hyperpod.marks] == [("hyperpod", "hyperpod", 2000)]
    assert hyperpod.segments[-1].instance_id == "i-2"


def test_a_mark_says_why_the_node_was_rebooted():
    (mark,) = picture().groups[1].nodes[0].marks
    assert (mark.action, mark.actor, mark.at) == ("reboot", "controller", 3000)
    assert mark.line == "check failed; next step reboot; reboot requested"


def test_rounds_span_their_entries_and_count_the_nodes_they_claimed():
    rounds = {r.id: r for r in picture().rounds}
    assert list(rounds) == ["c-r000000", "c-r000001", "c-r000002"]
    assert (rounds["c-r000001"].start, rounds["c-r000001"].end, rounds["c-r000001"].nodes) == (100, 3600, 3)
    assert (rounds["c-r000002"].nodes, rounds["c-r000000"].nodes) == (1, 0)


def test_groups_are_sorted_and_their_nodes_by_first_entry():
    t = picture()
    assert [(g.name, [n.key for n in g.nodes]) for g in t.groups] == [("g5", ["node-b"]), ("p5", ["node-a", "node-c"])]


def test_a_state_hpdhc_does_not_know_is_shown_as_unknown():
    doc = document("node-x", "p5", [entry(0, "pending", "ready"), entry(60, "teleporting", "brand new state")])
    assert [s.state for s in picture(doc).nodes[0].segments] == ["waiting", "unknown"]
    assert set(timeline.STATE_OF.values()) | {"held", "unknown"} == set(timeline.STATES)


def test_since_keeps_the_last_hours_and_the_line_that_explains_a_cut_segment():
    t = picture(since_s=3000)  # from t+4200
    assert t.start == 4200 and t.end == 7200
    node = t.groups[1].nodes[0]
    assert [(s.state, s.start) for s in node.segments] == [("in-check", 4200), ("passed", 6000)]
    assert node.segments[0].lines[0].text == "claimed for a check round [c-r000002]"
    assert node.marks == []  # the reboot was before
    assert [r.id for r in t.rounds] == ["c-r000002"] and t.rounds[0].start == 4200


def test_without_an_origin_times_count_from_the_first_entry():
    t = timeline.build("c", [REBOOTED, HELD], end=T0 + 7200)
    assert t.origin == T0 and t.start == 0 and t.clock == "utc"


def test_the_page_embeds_its_data_which_reads_back_to_the_same_timeline():
    t = picture()
    page = page_of.render_html(t)
    data = page_of.read_html(page)
    assert data == json.loads(json.dumps(timeline.to_json(t)))
    assert timeline.from_json(data) == t
    assert data["states"] == list(timeline.STATES) and data["version"] == timeline.FORMAT_VERSION


EXTERNAL = re.compile(
    r"""(?:src|href|xlink:href|action)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import"""
)


def test_the_page_references_nothing_outside_itself():
    page = page_of.render_html(picture())
    assert not EXTERNAL.search(page)
    assert "http://" not in page and "https://" not in page
    assert re.findall(r"<script[^>]*>", page) == ['<script type="application/json" id="timeline-data">']
    assert "<link" not in page and "<img" not in page and "<iframe" not in page


def test_hover_shows_the_decision_lines_and_markup_in_a_reason_stays_text():
    evil = "check failed: </script><script>alert(1)</script> & <b>"
    doc = document("node-z", "p5", [entry(0, "pending", "ready"), entry(60, "failed", evil, "c-r000003")])
    page = page_of.render_html(picture(doc))
    assert "<script>alert" not in page and "<b>" not in page
    assert "check failed: &lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;" in page  # a title
    assert page_of.read_html(page)["texts"][1] == evil + " [c-r000003]"
    titles = re.findall(r"<title>(.*?)</title>", page, re.S)
    assert any("t+0h01  check failed" in title for title in titles)


def test_a_few_thousand_nodes_make_a_page_of_a_few_megabytes():
    docs = [{**REBOOTED, "node": f"node-{i:05d}", "group": f"g{i % 4}"} for i in range(3000)]
    page = page_of.render_html(picture(*docs))
    assert len(page) < 3000 * 3000  # under 3 KB a node, these with 8 entries and a reboot each
    assert len(re.findall(r'<text class="nl" [^>]*><title>node-\d{5}</title>', page)) == 3000  # each named


# A cluster of 1,000 nodes, most passed at the first check: the picture users could not read.
CLEAN = [
    entry(0, "pending", "new worker node ready (Running)", "c-r000000"),
    entry(100, "checking", "claimed for a check round", "c-r000001"),
    entry(3000, "passed", "check passed", "c-r000001"),
]
LATE_QUARANTINE = document(
    "late-q",
    "p5",
    [*CLEAN[:2], entry(7170, "quarantined", "quarantined: failed 3 checks in a row", "c-r000001")],
)  # 30 s before the picture's end (t+2h)
FAILED = document("failed-1", "p5", [*CLEAN[:2], entry(3000, "failed", "check failed", "c-r000001")])
NO_RECORD = {"node": "no-record", "group": "p5", "instance_ids": ["i-9"], "history": [], "actions": []}


def thousand() -> timeline.Timeline:
    docs = [document(f"n{i:04d}", f"g{i % 2}", CLEAN) for i in range(994)]
    docs += [{**REBOOTED, "group": "p5"}, {**HELD, "group": "p5"}, LATE_QUARANTINE, FAILED, NO_RECORD, HYPERPOD]
    return picture(*docs)


def sections(page: str) -> dict[str, str]:
    """Each group's markup, by name."""
    return {
        m.group(1): m.group(0) for m in re.finditer(r'<section class="group"><h2>([^ <]+).*?</section>', page, re.S)
    }


def listed(section: str) -> list[str]:
    """The node rows a group lists before its folded passed nodes, in order: the names they show."""
    shown = section.split("<details", 1)[0]
    return re.findall(r'<g class="row"[^>]*><text class="nl"[^>]*><title>([^<]*)</title>', shown)


def test_a_thousand_nodes_read_as_summary_rows_then_named_problem_nodes_with_passed_ones_folded():
    t = thousand()
    assert len(t.nodes) == 1000 > page_of.FOLD_OVER
    groups = sections(page_of.render_html(t))
    assert list(groups) == ["g0", "g1", "p5"]
    for section, group in zip(groups.values(), t.groups, strict=True):  # its summary row says how many
        assert section.count('<g class="summary">') == 1 and f">all {len(group.nodes)}</text>" in section
    # g0 and g1: nothing to look at, 497 passed each, counted and folded behind a closed <details>.
    for name in ("g0", "g1"):
        assert listed(groups[name]) == []
        assert "497 node(s): 497 passed" in groups[name]
        assert (
            '<details class="passed"><summary>497 passed node(s), none rebooted or replaced</summary>' in groups[name]
        )
        assert groups[name].count('<g class="row"') == 497  # folded, not dropped: opening it lists them
    # p5: every node a problem, the worst final state first, the recovered-and-passed ones last.
    assert listed(groups["p5"]) == ["late-q", "failed-1", "node-b", "no-record", "node-c", "node-a"]
    assert "<details" not in groups["p5"]


def test_rows_stay_tall_enough_for_a_name_at_any_size():
    for t in (picture(), thousand()):
        page = page_of.render_html(t)
        ys = [float(y) for y in re.findall(r'<g class="row" transform="translate\(0,([\d.]+)\)"', page)]
        pitches = {round(b - a, 1) for a, b in itertools.pairwise(ys) if b > a}
        assert pitches == {timeline_svg.ROW_H} and timeline_svg.ROW_H >= 16
    # In a 1,400-px window the page's units are about pixels: an 11-px name is 11 px tall.
    assert timeline_svg.WIDTH <= 1400 - 2 * 20 - 15  # the body's margins and a scrollbar


def test_problem_nodes_come_first_and_a_small_page_folds_nothing():
    healthy = document("healthy", "p5", [entry(0, "pending", "ready"), entry(60, "passed", "check passed")])
    section = sections(page_of.render_html(picture(healthy, REBOOTED, FAILED)))["p5"]
    assert listed(section) == ["failed-1", "node-a", "healthy"]  # failed, then passed after a reboot, then passed
    assert "<details" not in section


def test_a_node_quarantined_30_s_before_the_end_shows_quarantined_not_in_check():
    page = page_of.render_html(picture(LATE_QUARANTINE))
    (row,) = re.findall(r'<g class="row".*?</g>', page, re.S)
    bars = re.findall(r'<rect class="s ([\w-]+)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', row)
    state, x, width = bars[-1]
    assert state == "quarantined" and float(width) >= 5  # to scale, 30 s of 2 h would be 3 units: one pixel
    x1 = timeline_svg.WIDTH - timeline_svg.OUTCOME_W
    assert float(x) + float(width) == pytest.approx(x1, abs=0.2)  # at the end, on top of the check before it
    assert '<rect class="fo s quarantined"' in row and ">quarantined</text>" in row  # and in the outcome column
    # Its true span is 30 s: the hover says so.
    assert "quarantined: t+1h59 to t+2h00 (0h00)" in row


def test_a_long_final_state_is_drawn_to_scale():
    page = page_of.render_html(picture(REBOOTED))
    row = re.findall(r'<g class="row".*?</g>', page, re.S)[0]
    state, x, width = re.findall(r'<rect class="s ([\w-]+)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', row)[-1]
    plot = timeline_svg.WIDTH - timeline_svg.OUTCOME_W - timeline_svg.LABEL_W
    assert state == "passed" and float(width) == pytest.approx(plot * 1200 / 7200, abs=0.2)
    assert float(x) == pytest.approx(timeline_svg.LABEL_W + plot * 6000 / 7200, abs=0.2)


def test_the_summary_row_stacks_the_groups_states_and_ends_on_their_final_states():
    page = page_of.render_html(picture(LATE_QUARANTINE, FAILED, REBOOTED))
    summary = sections(page)["p5"].split('<g class="summary">', 1)[1].split("</g>", 1)[0]
    titles = dict(re.findall(r'<path class="s ([\w-]+)" d="[^"]*"><title>([^<]*)</title>', summary))
    assert titles["quarantined"].endswith("1 at the end")  # 30 s long, still in the last column
    assert titles["failed"].endswith("1 at the end") and titles["passed"].endswith("1 at the end")
    assert titles["in-check"] == "in a deep health check: up to 3 of 3 node(s); 0 at the end"


def test_the_page_scales_to_its_window():
    page = page_of.render_html(picture())
    svgs = re.findall(r"<svg [^>]*>", page.split("<body>", 1)[1])
    svgs = [s for s in svgs if 'class="' in s]  # not the legend's icons
    assert svgs and all(f'viewBox="0 0 {timeline_svg.WIDTH} ' in s and " width=" not in s for s in svgs)
    assert "svg { display: block; width: 100%; height: auto;" in page


@pytest.mark.parametrize(
    ("span", "clock", "labels"),
    [
        (10 * 3600, "relative", ["t+0", "t+1h", "t+2h", "t+3h", "t+4h", "t+5h", "t+6h", "t+7h"]),
        (7 * 3600, "relative", ["t+0", "t+30m", "t+1h", "t+1h30", "t+2h"]),
        (50 * 60, "relative", ["t+0", "t+5m", "t+10m"]),
        (3 * 86400, "utc", ["09-21 18:00", "09-22 00:00", "06:00"]),  # the date where it changes
    ],
)
def test_the_time_axis_has_a_dozen_round_ticks(span, clock, labels):
    t = timeline.Timeline("c", T0, 0, span, clock, "", [], [])
    ticks = [label for _, label in timeline_svg.Page(t).ticks()]
    assert 5 <= len(ticks) <= timeline_svg.MAX_TICKS
    assert ticks[: len(labels)] == labels


# ---------------------------------------------------------------------------------------------- `hpdhc timeline`


class StubClient(OperatorClient):
    """The real client (pagination, `get_nodes`' threads) over canned route answers instead of HTTP."""

    calls: list[tuple[str, dict]] = []

    def __init__(self, endpoint=None, *args: object, **kwargs: object) -> None:
        self.endpoint = endpoint or "http://127.0.0.1:1/v1"

    def _credentials(self):
        return None

    def _call(self, method, path, body=None, query=None):
        StubClient.calls.append((path, dict(query or {})))
        if path == "/clusters/c/nodes":
            pages = {
                None: {"nodes": [{"node": "node-a"}, {"node": "node-b"}], "next_token": "node-b"},
                "node-b": {"nodes": [{"node": "node-c"}, {"node": "node-gone"}], "next_token": None},
            }
            return {"cluster": "c", **pages[(query or {}).get("next_token")]}
        docs = {d["node"]: d for d in (REBOOTED, HELD, HYPERPOD)}
        node = path.rsplit("/", 1)[1]
        if node not in docs:
            raise ApiError(404, f"node {node} is not known in cluster c")
        return docs[node]


@pytest.fixture
def stub(monkeypatch):
    StubClient.calls = []
    monkeypatch.setattr(cli, "OperatorClient", StubClient)
    return StubClient


def test_timeline_writes_the_page_of_every_listed_node(stub, tmp_path, capsys):
    out = tmp_path / "c.html"
    assert cli.main(["timeline", "c", "--until", "last", "--out", str(out)]) == 0
    assert (
        capsys.readouterr().out == f"wrote {out}: 3 node(s) in 2 group(s), 3 round(s), 2 reboot(s) and replacement(s)\n"
    )
    data = page_of.read_html(out.read_text())
    assert [n["key"] for g in data["groups"] for n in g["nodes"]] == ["node-b", "node-a", "node-c"]  # node-gone: 404
    assert data["end"] - data["start"] == 6000  # from the first entry to the last change
    assert timeline.from_json(data) == timeline.build(
        "c", [REBOOTED, HELD, HYPERPOD], end=T0 + 6000, source=data["source"]
    )
    assert "hpdhc timeline c: http://127.0.0.1:1/v1" in data["source"]


def test_timeline_json_prints_the_data_up_to_now_and_passes_the_group(stub, capsys):
    assert cli.main(["timeline", "c", "--group", "p5", "--json", "--endpoint", "http://127.0.0.1:1/v1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["clock"] == "utc" and data["origin"] == T0
    assert data["end"] > 6000  # now, long after the twin's virtual 2026-09
    assert stub.calls[0] == ("/clusters/c/nodes", {"group": "p5"})


def test_timeline_of_a_cluster_the_api_does_not_know_exits_2(monkeypatch, capsys):
    class Unknown(StubClient):
        def _call(self, method, path, body=None, query=None):
            raise ApiError(404, "cluster nope is not watched")

    monkeypatch.setattr(cli, "OperatorClient", Unknown)
    assert cli.main(["timeline", "nope"]) == 2
    assert "cluster nope is not watched" in capsys.readouterr().err
