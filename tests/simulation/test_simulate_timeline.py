"""`hpdhc simulate --timeline FILE`: the twin writes its run's page and says where (apart from
test_timeline.py, whose twin stays up for its API while this one runs its own)."""

import json

from hyperpod_dhc.hpdhc import timeline_page as page_of
from tests.twin.__main__ import main as simulate

from .test_timeline import SCENARIO


def test_simulate_timeline_writes_the_page_and_says_where(tmp_path, capsys):
    scenario = tmp_path / "one.json"
    one = {**SCENARIO, "name": "one", "groups": [{"name": "p5", "count": 1}], "hardware": {}}
    scenario.write_text(json.dumps(one))
    scenario_args = ["--scenario", str(scenario), "--lambda-log", str(tmp_path / "log")]
    out = tmp_path / "one.html"
    assert simulate([*scenario_args, "--json", "--timeline", str(out)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # --json: the report alone on stdout, the page's path on stderr
    assert captured.err.strip() == f"timeline: {out}"
    data = page_of.read_html(out.read_text())
    (node,) = data["groups"][0]["nodes"]
    assert node["key"] == report["node_details"][0]["logical_id"] and node["final"] == "passed"
