"""Every `hpdhc` operator command end to end: CLI -> SigV4 HTTP -> the twin's API -> the real Api handler; and
`hpdhc` as operators install it: the wheel in a fresh venv, with boto3 and nothing of the checkout."""

import json
import subprocess
import time
import zipfile

import pytest

from hyperpod_dhc.hpdhc.cli import main
from tests.harness.wheel import PIP, build_wheel, clean_env, fresh_venv, purelib
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

# One twin serves every test here; the wheel test also builds and installs (one worker under --dist loadgroup).
pytestmark = pytest.mark.xdist_group("operator_cli")


@pytest.fixture(scope="module")
def api(request):
    from tests.harness.synth import synthesized_template
    from tests.harness.template import ControllerTemplate

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


def test_nodes_shows_each_node_beside_its_instance_id(api, capsys):
    _, ep = api
    _, out = _run(capsys, "nodes", "cli", "--json", *ep)
    pairs = [[n["node"], n["instance_id"]] for n in _json(out)]
    code, out = _run(capsys, "nodes", "cli", *ep)
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert code == 0 and ["node", "instance", "group", "state"] in [r[:4] for r in rows]
    assert len(pairs) == 4 and all(pair in [r[:2] for r in rows] for pair in pairs)


def test_the_wheel_installs_the_cli_with_boto3_and_re2_alone_and_works_from_a_fresh_venv(api, tmp_path):
    """What an operator's `pip install` gets: hpdhc with boto3 and google-re2 (the operators' result patterns, from
    pip's configured index), and no tests; the
    construct (infra, deephealth) rides along, inert without the `cdk` extra (tests/infra/test_packaging.py). The
    build runs in a copy: setuptools writes build/ and *.egg-info beside the sources."""
    _, ep = api
    started = time.monotonic()
    env = clean_env()
    wheel = build_wheel(tmp_path)
    dist_info = wheel.name.split("-py3")[0] + ".dist-info"
    with zipfile.ZipFile(wheel) as archive:
        assert {name.split("/")[0] for name in archive.namelist()} == {"hyperpod_dhc", dist_info}
        metadata = archive.read(f"{dist_info}/METADATA").decode().splitlines()
    requires = [line for line in metadata if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert requires == ["Requires-Dist: boto3>=1.40", "Requires-Dist: google-re2>=1.1.20240702"]

    venv = tmp_path / "venv"
    python = fresh_venv(venv)
    subprocess.run([*PIP, "--python", str(python), "install", str(wheel)], env=env, check=True)
    installed = {p.name for p in purelib(python).iterdir()}
    assert {"hyperpod_dhc", "boto3", "botocore", "re2"} <= installed
    assert not installed & {"tests", "aws_cdk", "pydantic"}, installed  # the construct's stack: only with [cdk]
    assert not [name for name in installed if name.endswith(".pth")], "nothing puts a checkout on the path"

    def hpdhc(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [venv / "bin" / "hpdhc", *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )

    shown = hpdhc("--help")
    assert shown.returncode == 0 and all(c in shown.stdout for c in ("status", "nodes", "reset-breaker", "simulate"))
    status = hpdhc("status", *ep)
    assert status.returncode == 0, status.stderr
    assert "cli" in status.stdout and "passed" in status.stdout
    simulate = hpdhc("simulate", "--json")
    assert simulate.returncode == 2 and "simulate needs a checkout of hyperpod-dhc" in simulate.stderr
    print(f"wheel built, installed and run in {time.monotonic() - started:.1f} s")


def test_a_nodes_check_captured_through_the_api_is_judged_offline_as_the_controller_judged_it(api, capsys, tmp_path):
    """`hpdhc readings capture` then `hpdhc readings classify`, for every node of the twin: the offline verdict is
    the controller's (the same code, on the same events)."""
    twin, ep = api
    records = twin.records("cli").values()
    assert records
    for record in records:
        out = tmp_path / f"{record.key}.json"
        code, said = _run(capsys, "readings", "capture", "cli", record.key, "--out", str(out), *ep)
        assert code == 0 and "hpdhc readings classify" in said, said
        code, printed = _run(capsys, "readings", "classify", str(out), "--json")
        assert code == 0, printed
        judged = _json(printed)
        expected = {"passed": "passed", "failed": "failed"}.get(record.verdict or "", "inconclusive")
        assert judged["verdict"] == expected, (record.key, record.verdict, record.evidence, judged["why"])
    code, said = _run(capsys, "readings", "capture", "cli", "i-0000000000000beef", "--out", str(tmp_path / "x"), *ep)
    assert code == 2 and "not known" in said
