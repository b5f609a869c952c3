import pytest

from tests.fakes.hyperpod import Clock, FakeHyperPod
from tests.harness.engine import Harness
from tests.harness.synth import synthesized_template
from tests.harness.template import ControllerTemplate


@pytest.fixture(scope="session")
def controller_template() -> ControllerTemplate:
    return ControllerTemplate(synthesized_template())


@pytest.fixture
def fake() -> FakeHyperPod:
    return FakeHyperPod(Clock(), seed=7)


@pytest.fixture
def harness(controller_template, fake, request):
    """The deployed controller against `fake`; a test passes its config with @pytest.mark.controller_config."""
    marker = request.node.get_closest_marker("controller_config")
    with Harness(controller_template, fake, config=marker.args[0] if marker else {}) as h:
        yield h
