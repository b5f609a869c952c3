"""Every `hpdhc` operator command end to end: CLI -> SigV4 HTTP -> the twin's API -> the real Api handler."""

import json

import pytest

from tests.twin.cli import main
from tests.twin.local_api import endpoint, serve
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin

from .conftest import BASE_CONFIG

SCENARIO = {
    "version": 1,
    "name": "cli",
    "seed": 2,
    "horizon_s": 12 * 3600,
    "cluster": {"name": "cli"},
    "groups": [{"name": "p5", "count": 4, "arrival": {"start_s": 0, "spread_s": 600}}],
    "hardware": {"transient_fault_rate": 0.3},
    "check_duration_s": {"InstanceStress": [1200, 1500]},
    "policy": {"defaults": {"gather_window_s": 0}},
}


@pytest.fixture(scope="module")
def api(request):
    from tests.twin.synth import synthesized_template
    from tests.twin.template import ControllerTemplate

    scenario = Scenario.model_validate(SCENARIO)
    twin = Twin(scenario, ControllerTemplate(synthesized_template()), scenario.controller_config(BASE_CONFIG))
    with twin:
        twin.run()
        server = serve(twin, 0)
        yield twin, ["--endpoint", endpoint(server)]
        server.shutdown()


def _run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _json(out: str):
    """The CLI's --json document (in-process, the twin's Lambda log lines share stdout; not so in a shell)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line in ("{", "["))
    return json.loads("\n".join(lines[start:]))


def test_status_nodes_and_history(api, capsys):
    _, ep = api
    code, out = _run(capsys, "status", *ep)
    assert code == 0 and "cli" in out and "passed" in out
    code, out = _run(capsys, "status", "--cluster", "cli", "--group", "p5", *ep)
    assert code == 0 and "4/4" in out
    code, out = _run(capsys, "nodes", "cli", "--state", "passed", "--json", *ep)
    nodes = _json(out)
    assert code == 0 and len(nodes) == 4
    code, out = _run(capsys, "history", "cli", nodes[0]["instance_id"], *ep)
    assert code == 0 and "claimed for a check round" in out and nodes[0]["node"] in out


def test_check_queues_then_refuses_a_duplicate_and_bad_input_exits_2(api, capsys):
    twin, ep = api
    code, out = _run(capsys, "check", "cli", "--group", "p5", "--checks", "InstanceStress", *ep)
    assert code == 0 and "queued 4 node(s)" in out and "not pre-empted" in out
    node = sorted(twin.records("cli"))[0]
    code, out = _run(capsys, "check", "cli", "--instance", node, "--json", *ep)
    assert code == 0 and _json(out)["not_queued"][0]["node"] == node
    code, out = _run(capsys, "check", "cli", "--instance", "no such node!", *ep)
    assert code == 2 and "HTTP 422" in out
    code, _ = _run(capsys, "history", "nope", "n1", *ep)
    assert code == 2


def test_breakers_shows_budgets_and_a_reset_of_a_closed_breaker_changes_nothing(api, capsys):
    _, ep = api
    code, out = _run(capsys, "breakers", "cli", *ep)
    assert code == 0 and "breaker closed" in out and "group p5" in out
    code, out = _run(capsys, "breakers", "cli", "--json", *ep)
    assert code == 0 and _json(out)["replace_budget"]["groups"]["p5"]["limit"] == 1  # 25 % of 4 nodes
    code, out = _run(capsys, "reset-breaker", "cli", "--reason", "drill", *ep)
    assert code == 0 and "nothing reset: the breaker is not open" in out
    code, out = _run(capsys, "reset-breaker", "cli", "--group", "bad group!", "--reason", "drill", *ep)
    assert code == 2 and "HTTP 422" in out
