"""`make faults`: every fault-injection scenario and the bad-AMI scenario on the twin, one table row each.

The scenarios are the ones `tests/simulation/test_fault_tolerance.py` and `test_safety.py` assert on; this
prints what they measured: nodes, verdicts, actions, conflicting and duplicate actions, budget use, breaker.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from typing import TextIO

from hyperpod_dhc.hpdhc.render import table
from tests.harness.synth import synthesized_template
from tests.harness.template import ControllerTemplate
from tests.simulation.conftest import BASE_CONFIG
from tests.simulation.test_fault_tolerance import SCENARIOS
from tests.simulation.test_safety import bad_ami
from tests.twin.report import build_report
from tests.twin.scenario import Scenario
from tests.twin.simulation import Twin


def run(raw: dict, template: ControllerTemplate) -> dict:
    scenario = Scenario.model_validate({"version": 1, **raw})
    with Twin(scenario, template, scenario.controller_config(BASE_CONFIG)) as twin:
        wall = twin.run()
        return build_report(twin, wall)


def row(name: str, report: dict) -> list[str]:
    verdicts = ", ".join(f"{k} {v}" for k, v in report["verdicts"].items() if v)
    actions = report["actions"]
    budgets = report["safety"]["replace_budget"]
    use = " ".join(f"{k.removeprefix('group ')} {b['peak']}/{b['limit']}" for k, b in budgets.items())
    breaker = f"open at {report['safety']['breaker_at_s']:g} s" if report["safety"]["breaker_open"] else "closed"
    return [
        name,
        str(report["nodes"]),
        verdicts,
        f"{actions['reboot']}/{actions['replace']}",
        str(actions["conflicting"]),
        str(actions["duplicate"]),
        use,
        breaker,
        f"{report['wall_s']:.1f}",
    ]


def main(out: TextIO | None = None) -> int:
    out = out or sys.stdout
    template = ControllerTemplate(synthesized_template())
    scenarios = {**SCENARIOS, "bad-ami": bad_ami(16)}
    rows = [["scenario", "nodes", "verdicts", "reboot/replace", "conflicting", "duplicate", "replace budget peak/limit",
             "breaker", "wall s"]]  # fmt: skip
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools")
    # The Lambdas' JSON logs go nowhere: one sink for the whole run, since their logger keeps the stream it saw.
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        for name, raw in scenarios.items():
            rows.append(row(name, run(raw, template)))
            print(f"ran {name}", file=sys.stderr)
    table(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
