"""The operator CLI without an API: it renders what the API returns (no vocabulary of its own), maps failures to
exit codes, and says what `simulate` needs outside a checkout. End to end: tests/simulation/test_operator_cli.py."""

import http.server
import json
import sys
import threading

import boto3
import pytest
from moto import mock_aws

from hyperpod_dhc.hpdhc import cli
from hyperpod_dhc.hpdhc.client import NODE_STATES, RETRY_BASE_S, RETRY_MAX_WAIT_S, ApiError, OperatorClient


class FakeClient:
    """Answers like the API, with a state the CLI has never heard of: columns must come from the response."""

    failure: ApiError | None = None

    def __init__(self, *args: object, **kwargs: object) -> None:
        if self.failure:
            raise self.failure

    def list_clusters(self) -> dict:
        states = {"pending": 1, "passed": 3, "brand_new_state": 2}
        return {"clusters": [{"cluster": "c1", "live_round": None, "states": states}]}

    def get_readings(self, cluster: str) -> dict:
        # What a node wrote reaches the answer: a line may carry a terminal's escape sequences.
        return {"cluster": cluster, "lines": 0, "note": "\x1b]0;owned\x07\x1b[31mno line yet\x1b[0m\r"}


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(cli, "OperatorClient", FakeClient)
    return FakeClient


def test_status_columns_are_the_states_the_api_counts_in_its_order(fake, capsys):
    assert cli.main(["status", "--endpoint", "http://127.0.0.1:1"]) == 0
    header, _, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["cluster", "live", "round", "pending", "passed", "brand_new_state"]
    assert row.split() == ["c1", "-", "1", "3", "2"]


@pytest.mark.parametrize(("status", "code"), [(403, 2), (422, 2), (0, 2), (500, 1), (503, 1)])
def test_a_refusal_exits_2_and_a_server_error_1(fake, monkeypatch, capsys, status, code):
    monkeypatch.setattr(FakeClient, "failure", ApiError(status, "no"))
    assert cli.main(["status"]) == code
    assert capsys.readouterr().err.startswith("hpdhc: error:")


def test_readings_of_a_cluster_is_readings_show_and_escape_sequences_in_lines_never_reach_the_terminal(fake, capsys):
    assert cli.main(["readings", "c1"]) == 0
    out = capsys.readouterr().out
    assert "no line yet" in out and "cluster c1" in out
    assert not any(c in out for c in "\x1b\x07\r"), repr(out)


def test_simulate_outside_a_checkout_says_what_it_needs(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tests.twin.__main__", None)  # import fails as if tests/ were not there
    assert cli.main(["simulate", "--json"]) == 2
    assert "simulate needs a checkout of hyperpod-dhc after `make install`" in capsys.readouterr().err


# ---------------------------------------------------------------- what stops recovery, in `status`

OPEN = {"open": True, "tripped": {"at": 1_800_000_000.0, "reason": "systemic failure: 40% failed in 1 h"}}
HOLDS = {
    "gpu": {"at": 1_800_000_600.0, "reason": "3 replacements failed their check"},
    "cpu": {"at": 0.0, "reason": "r"},
}


class StoppedClient(FakeClient):
    def list_clusters(self) -> dict:
        clusters = [
            {"cluster": "c1", "live_round": None, "states": {"passed": 1}, "breaker": OPEN, "capacity_holds": HOLDS},
            {"cluster": "c2", "live_round": None, "states": {"passed": 1},
             "breaker": {"open": False, "tripped": None}, "capacity_holds": {}},
        ]  # fmt: skip
        return {"clusters": clusters}

    def list_groups(self, cluster: str) -> dict:
        group = {"group": "gpu", "progress": {"checked": 1, "total": 2}, "current_round": None,
                 "gpu_hours_in_checks": 0.5, "states": {"passed": 1}}  # fmt: skip
        return {"cluster": cluster, "groups": [group], "breaker": OPEN, "capacity_holds": HOLDS}


def test_status_shows_an_open_breaker_and_each_capacity_hold_under_the_table(monkeypatch, capsys):
    monkeypatch.setattr(cli, "OperatorClient", StoppedClient)
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "c1: BREAKER OPEN since 2027-01-15 08:00: systemic failure: 40% failed in 1 h" in out
    assert "c1: CAPACITY HOLD on gpu since 2027-01-15 08:10: 3 replacements failed their check" in out
    assert "c1: CAPACITY HOLD on cpu" in out and "hpdhc breakers c1" in out
    assert "c2:" not in out  # a closed breaker and no hold: nothing to say


def test_status_of_a_group_shows_the_breaker_and_that_groups_hold_only(monkeypatch, capsys):
    monkeypatch.setattr(cli, "OperatorClient", StoppedClient)
    assert cli.main(["status", "--cluster", "c1", "--group", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "c1: BREAKER OPEN" in out and "CAPACITY HOLD on gpu" in out and "CAPACITY HOLD on cpu" not in out


def test_status_of_an_older_api_without_breakers_shows_the_table_alone(fake, capsys):
    assert cli.main(["status"]) == 0
    assert "BREAKER" not in capsys.readouterr().out


# ---------------------------------------------------------------- arguments and errors: one line each


def test_a_bad_state_is_one_line_naming_the_states_and_no_call(fake, monkeypatch, capsys):
    monkeypatch.setattr(FakeClient, "failure", AssertionError("no client may be made"))
    with pytest.raises(SystemExit) as exited:
        cli.main(["nodes", "c1", "--state", "broken"])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("hpdhc nodes: error: argument --state: invalid choice: 'broken'")
    assert all(state in line for state in NODE_STATES)


def test_every_state_is_a_choice_of_nodes_state(capsys):
    assert cli.parser().parse_args(["nodes", "c1", "--state", "recovery_due"]).state == "recovery_due"
    with pytest.raises(SystemExit):
        cli.main(["nodes", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert all(state in shown for state in NODE_STATES)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"statusCode": 422, "detail": [{"loc": ["query", "state"], "type": "enum"}]}',
         "HTTP 422: invalid query.state (enum)"),
        ('{"message": "cluster x is not watched\\nby this controller"}',
         "HTTP 404: cluster x is not watched by this controller"),
        ('{"Message": "User is not authorized"}', "HTTP 403: User is not authorized"),
        ("<html>\n bad gateway </html>", "HTTP 502: <html> bad gateway </html>"),
    ],
)  # fmt: skip
def test_an_error_answer_is_one_line(api, payload, message):
    status = int(message.split()[1].rstrip(":"))
    api.answers = [(status, payload, {})]
    with pytest.raises(ApiError) as raised:
        OperatorClient(api.endpoint).list_clusters()
    assert str(raised.value) == message and "\n" not in str(raised.value)


# ---------------------------------------------------------------- retries


class Api:
    """A local HTTP server answering each request with the next of `answers` (status, body, headers)."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str, dict[str, str]]] = []
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server calls it by this name
                outer.requests.append(self.path)
                status, body, headers = outer.answers.pop(0)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body.encode())

            do_POST = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def api():
    server = Api()
    yield server
    server.server.shutdown()
    server.server.server_close()


def retrying(endpoint: str, retries: int = 3) -> tuple[OperatorClient, list[float]]:
    client = OperatorClient(endpoint, retries=retries)
    waits: list[float] = []
    client.sleep = waits.append
    return client, waits


OK = (200, '{"clusters": []}', {})


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_a_throttled_or_failed_request_is_sent_again_with_growing_jittered_waits(api, status):
    api.answers = [(status, '{"message": "slow down"}', {})] * 3 + [OK]
    client, waits = retrying(api.endpoint)
    assert client.list_clusters() == {"clusters": []}
    assert len(api.requests) == 4 and len(waits) == 3
    assert all(0 <= w <= RETRY_BASE_S * 2**i for i, w in enumerate(waits)), waits


def test_retries_are_bounded_and_the_last_error_is_raised(api):
    api.answers = [(503, '{"message": "ThrottledError; retry"}', {})] * 4
    client, waits = retrying(api.endpoint)
    with pytest.raises(ApiError) as raised:
        client.list_clusters()
    assert raised.value.status == 503 and len(api.requests) == 4 and len(waits) == 3


def test_retry_after_is_waited_for_up_to_a_bound(api):
    api.answers = [(429, "{}", {"Retry-After": "3"}), (429, "{}", {"Retry-After": "600"}), OK]
    client, waits = retrying(api.endpoint)
    client.list_clusters()
    assert waits[0] >= 3 and waits[1] == RETRY_MAX_WAIT_S


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_a_refusal_is_not_sent_again(api, status):
    api.answers = [(status, '{"message": "no"}', {})]
    client, waits = retrying(api.endpoint)
    with pytest.raises(ApiError):
        client.list_clusters()
    assert len(api.requests) == 1 and waits == []


def test_no_connection_is_retried_then_one_line(api):
    endpoint = api.endpoint
    api.server.shutdown()
    api.server.server_close()  # nothing listens there any more
    client, waits = retrying(endpoint, retries=2)
    with pytest.raises(ApiError) as raised:
        client.list_clusters()
    assert raised.value.status == 0 and str(raised.value).startswith(f"cannot reach {endpoint}")
    assert len(waits) == 2


def test_the_bridge_and_the_gate_keep_their_own_loops(api):
    """A client made without `retries` sends once: the bridge's pass and the gate have their own deadlines."""
    api.answers = [(503, "{}", {}), OK]
    with pytest.raises(ApiError):
        OperatorClient(api.endpoint).list_clusters()
    assert len(api.requests) == 1


def test_the_cli_retries(monkeypatch):
    made = {}

    class Recording(FakeClient):
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.update(kwargs)

    monkeypatch.setattr(cli, "OperatorClient", Recording)
    assert cli.main(["status"]) == 0
    assert made["retries"] == cli.RETRIES > 0


def test_a_file_that_cannot_be_written_is_one_line(monkeypatch, capsys, tmp_path):
    class Capturing(FakeClient):
        def capture(self, cluster: str, node: str) -> dict:
            return {"events": [], "captured": {"node": node}}

    monkeypatch.setattr(cli, "OperatorClient", Capturing)
    assert cli.main(["readings", "capture", "c1", "n1", "--out", str(tmp_path / "no-such-dir" / "x.json")]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("hpdhc: error:") and "no-such-dir" in line


def test_the_api_is_found_by_the_stacks_api_endpoint_output_whatever_the_construct_id(monkeypatch):
    """The construct names its outputs the same under any id (tests/infra/test_hyperpod_dhc.py), so `--stack` is
    all an operator passes when the controller lives in a stack of their own."""
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/v1/"
    template = {
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {"ApiEndpoint": {"Value": url}, "RoundStateMachineArn": {"Value": "arn:x"}},
    }
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="eu-west-1")
        cfn.create_stack(StackName="Platform", TemplateBody=json.dumps(template))
        cfn.create_stack(StackName="Bare", TemplateBody=json.dumps({"Resources": template["Resources"]}))
        assert OperatorClient(region="eu-west-1", stack="Platform").endpoint == url.rstrip("/")
        with pytest.raises(ApiError, match="stack Bare has no ApiEndpoint output; pass --endpoint"):
            OperatorClient(region="eu-west-1", stack="Bare")
