import pytest

from tests.harness.synth import base_config, synthesized_template
from tests.harness.template import ControllerTemplate
from tests.simulation.invariants import assert_invariants
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin

BASE_CONFIG = base_config()


@pytest.fixture(scope="session")
def controller_template() -> ControllerTemplate:
    return ControllerTemplate(synthesized_template())


@pytest.fixture
def simulate(controller_template):
    """Run a scenario (a dict in the scenario-file shape) through the twin, check the shared invariants, and
    return its report."""

    def run(raw: dict, invariants: bool = True) -> dict:
        """`invariants`: the shared invariants must hold (tests/simulation/invariants.py), as on every scenario."""
        scenario = Scenario.model_validate({"version": 1, **raw})
        with Twin(scenario, controller_template, scenario.controller_config(BASE_CONFIG)) as twin:
            wall = twin.run()
            report = build_report(twin, wall)
        if invariants:
            assert_invariants(report)
        return report

    return run
