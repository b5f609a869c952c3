"""The picture of a twin run (`hpdhc simulate --timeline`, `tests/twin/timeline.py`) against the run's report, and
`hpdhc timeline` against the twin's operator API drawing the same picture from the API's node documents."""

import pytest

from hyperpod_dhc.hpdhc import timeline
from hyperpod_dhc.hpdhc import timeline_page as page_of
from hyperpod_dhc.hpdhc.cli import main as hpdhc
from tests.twin.local_api import endpoint, serve
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin
from tests.twin.timeline import documents, write_timeline

from .conftest import BASE_CONFIG

SCENARIO = {
    "version": 1,
    "name": "pictured",
    "seed": 3,
    "horizon_s": 12 * 3600,
    "cluster": {"name": "pictured", "node_recovery": "None"},
    "groups": [
        {"name": "p5", "count": 4, "arrival": {"start_s": 0, "spread_s": 600}},
        {"name": "g5", "instance_type": "ml.g5.8xlarge", "count": 2, "arrival": {"start_s": 300, "spread_s": 300}},
    ],
    "hardware": {"faulty_nodes": {"transient": 1, "persistent": 1}},  # a reboot, then a reboot and a replacement
    "check_duration_s": {"InstanceStress": [1200, 1500]},
    "policy": {"defaults": {"gather_window_s": 0}},
}

pytestmark = pytest.mark.xdist_group("timeline")  # one twin for the module, serving its API


@pytest.fixture(scope="module")
def run(controller_template, tmp_path_factory):
    """The run's report, its page (read back), and its operator API's endpoint while the twin lives."""
    scenario = Scenario.model_validate(SCENARIO)
    with Twin(scenario, controller_template, scenario.controller_config(BASE_CONFIG)) as twin:
        report = build_report(twin, twin.run())
        page = tmp_path_factory.mktemp("timeline") / "run.html"
        write_timeline(twin, page)
        server = serve(twin, 0)
        try:
            yield twin, report, page.read_text(), endpoint(server)
        finally:
            server.shutdown()


def test_the_page_shows_every_node_of_the_report_with_its_verdict_actions_and_rounds(run):
    twin, report, page, _ = run
    data = page_of.read_html(page)
    nodes = {n["key"]: (g["name"], n) for g in data["groups"] for n in g["nodes"]}
    details = {d["logical_id"]: d for d in report["node_details"]}
    assert set(nodes) == set(details) and len(nodes) == report["nodes"] == 6
    for key, d in details.items():
        group, node = nodes[key]
        assert group == d["group"]
        expected = "held" if d["verdict"] == "held" else timeline.STATE_OF[d["state"]]
        assert node["final"] == node["segments"][-1]["state"] == expected, key
        controller = [m["action"] for m in node["marks"] if m["actor"] == "controller"]
        assert sorted(controller) == sorted(a for a in d["actions"] if not a.endswith("(hyperpod)")), key
        assert node["instance_ids"] == d["instance_ids"]
    marks = [m["action"] for _, n in nodes.values() for m in n["marks"]]
    assert (marks.count("reboot"), marks.count("replace")) == (
        report["actions"]["reboot"],
        report["actions"]["replace"],
    )
    assert marks.count("reboot") >= 2 and marks.count("replace") >= 1  # the scenario's faults were acted on
    # Every round the twin's state machine ran is a band; every node in a check was claimed by one.
    executions = {e["name"] for e in twin.executions()}
    assert {r["id"] for r in data["rounds"]} == executions
    claimed = sum(r["nodes"] for r in data["rounds"])
    checks = sum(1 for _, n in nodes.values() for s in n["segments"] if s["state"] == "in-check")
    assert claimed == checks
    assert data["start"] == 0 and data["end"] == report["virtual_s"] and data["clock"] == "relative"


def test_hpdhc_timeline_draws_the_same_picture_from_the_api(run, tmp_path, capsys):
    twin, _, page, ep = run
    out = tmp_path / "api.html"
    assert hpdhc(["timeline", "pictured", "--until", "last", "--out", str(out), "--endpoint", ep]) == 0
    assert f"wrote {out}: 6 node(s) in 2 group(s)" in capsys.readouterr().out
    from_api = page_of.read_html(out.read_text())
    docs = documents(twin)  # what the twin's page is drawn from: the API answers the same documents
    assert timeline.from_json(from_api) == timeline.build(
        "pictured", docs, end=timeline.last_change(docs), source=from_api["source"]
    )
    # The twin's own picture, but in UTC and counted from the first entry instead of the run's start.
    from_twin = page_of.read_html(page)
    shift = from_api["origin"] - from_twin["origin"]
    assert from_api["clock"] == "utc" and shift > 0

    def states(data, shift=0.0):
        return [
            [(s["state"], round(s["start"] + shift, 1)) for s in n["segments"]]
            for g in data["groups"]
            for n in g["nodes"]
        ]

    assert states(from_api, shift) == states(from_twin)
