"""What the harness needs from the synthesized CloudFormation template, read exactly as deployed."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from tests.harness.asl import construct_id, round_definition

HANDLER_PREFIX = "hyperpod_dhc.deephealth.handlers."


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    construct_id: str
    handler: str
    literal_env: dict[str, str]  # resolved-at-deploy values (Refs) are replaced by the harness
    starts_rounds: bool
    notifies: bool


@dataclass(frozen=True)
class ControllerTemplate:
    template: dict[str, Any]

    @property
    def resources(self) -> dict[str, Any]:
        return self.template["Resources"]

    def _of_type(self, type_: str) -> dict[str, Any]:
        return {k: v for k, v in self.resources.items() if v["Type"] == type_}

    @functools.cached_property
    def functions(self) -> list[FunctionSpec]:
        out = []
        for lid, res in self._of_type("AWS::Lambda::Function").items():
            props = res["Properties"]
            if not str(props.get("Handler", "")).startswith(HANDLER_PREFIX):
                continue  # CDK's own helper functions, if any
            env = props.get("Environment", {}).get("Variables", {})
            out.append(
                FunctionSpec(
                    logical_id=lid,
                    construct_id=construct_id(self.resources, lid),
                    handler=props["Handler"],
                    literal_env={k: v for k, v in env.items() if isinstance(v, str)},
                    starts_rounds="ROUND_STATE_MACHINE_ARN" in env,
                    notifies="NOTIFICATIONS_TOPIC_ARN" in env,
                )
            )
        return out

    def _function(self, module: str) -> str:
        (lid,) = [f.logical_id for f in self.functions if f.handler == f"{HANDLER_PREFIX}{module}.lambda_handler"]
        return lid

    @property
    def intake_logical_id(self) -> str:
        return self._function("intake")

    @property
    def api_logical_id(self) -> str:
        return self._function("api")

    @property
    def reconcile_logical_id(self) -> str:
        return self._function("reconcile")

    @property
    def state_machine_name(self) -> str:
        (machine,) = self._of_type("AWS::StepFunctions::StateMachine").values()
        name = machine["Properties"]["StateMachineName"]
        return name if isinstance(name, str) else name["Fn::Join"][1][-1].lstrip("-")

    def definition(self, function_arns: dict[str, str]) -> str:
        return round_definition(self.template, function_arns)

    @property
    def event_patterns(self) -> list[dict]:
        """Patterns of the rules that target Intake (the schedule rule has none)."""
        intake = self.intake_logical_id
        return [
            r["Properties"]["EventPattern"]
            for r in self._of_type("AWS::Events::Rule").values()
            if "EventPattern" in r["Properties"]
            and any(intake in str(t.get("Arn")) for t in r["Properties"].get("Targets", []))
        ]

    @property
    def reconcile_every_minutes(self) -> int:
        for r in self._of_type("AWS::Events::Rule").values():
            expr = r["Properties"].get("ScheduleExpression", "")
            if expr.startswith("rate("):
                return int(expr[5:].split()[0])
        raise ValueError("no schedule rule in the template")
