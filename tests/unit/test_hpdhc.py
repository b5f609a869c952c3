"""The operator CLI without an API: it renders what the API returns (no vocabulary of its own), maps failures to
exit codes, and says what `simulate` needs outside a checkout. End to end: tests/simulation/test_operator_cli.py."""

import sys

import pytest

from hpdhc import cli
from hpdhc.client import ApiError


class FakeClient:
    """Answers like the API, with a state the CLI has never heard of: columns must come from the response."""

    failure: ApiError | None = None

    def __init__(self, *args: object) -> None:
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
