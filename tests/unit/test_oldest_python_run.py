"""Which sessions start the oldest-Python bridge run with them (tests/oldest_python.py): the paths that hold its
test, and never a session that filters by name or mark (it may not run the test at all)."""

import pytest

from tests import oldest_python

ROOT = oldest_python.ROOT


@pytest.mark.parametrize(
    ("args", "invoked_in", "expected"),
    [
        (["tests"], ROOT, True),  # `make test`: pyproject's testpaths
        (["."], ROOT, True),
        (["integration"], ROOT / "tests", True),
        (["tests/integration/test_oldest_python.py::test_the_bridge_tests_pass"], ROOT, True),
        (["tests/unit", "tests/simulation"], ROOT, False),
        (["tests/integration/test_intake.py"], ROOT, False),
    ],
)
def test_a_session_starts_the_run_only_when_its_paths_hold_the_test(args, invoked_in, expected):
    assert oldest_python.selected(args, invoked_in, filtering=False) is expected


def test_a_session_that_filters_never_starts_it():
    assert not oldest_python.selected(["tests"], ROOT, filtering=True)
