"""Resolve the synthesized check-round definition into the exact ASL a deployment would run.

Importable as ``tests.harness.asl`` (the repository root is on ``sys.path``), e.g. by a simulator that
creates the state machine in moto::

    from tests.harness.asl import round_definition, round_task_functions
    tasks = round_task_functions(template)  # {"ClaimRound": "FunctionsClaimRound657A99EB", ...}
    asl = round_definition(template, {"ClaimRound": claim_round_arn, ...})

The template is a plain dict (``Template.to_json()`` or ``cdk.out/<stack>.template.json``). The
state machine's ``DefinitionString`` may be a string or an ``Fn::Join``/``Fn::GetAtt``/``Ref``/``Fn::Sub``
tree, and CloudFormation's ``DefinitionSubstitutions`` (``${Name}`` placeholders) are applied.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

STATE_MACHINE = "AWS::StepFunctions::StateMachine"
FUNCTION = "AWS::Lambda::Function"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_:.]+)\}")
_CDK_HASH = re.compile(r"[0-9A-F]{8}$")


class UnresolvedReference(KeyError):
    """The definition refers to a resource nobody gave a value for."""


def round_definition(
    template: Mapping[str, Any],
    function_arns: Mapping[str, str],
    *,
    region: str = "us-east-1",
    account: str = "123456789012",
    partition: str = "aws",
    url_suffix: str = "amazonaws.com",
    stack_name: str = "HyperPodDhc",
    state_machine: str | None = None,
) -> str:
    """The state machine's definition as the exact ASL string, every reference resolved.

    ``function_arns`` maps each task function to the ARN to put in its place. A key is either the
    function's logical id (``FunctionsClaimRound657A99EB``) or its construct id (``ClaimRound``; the
    last element of its ``aws:cdk:path`` before ``/Resource``). ``Fn::GetAtt [<function>, Arn]`` and
    ``Ref <function>`` resolve to the ARN; pseudo parameters to the keyword arguments.
    ``state_machine`` picks one by logical id or construct id when the template holds several.
    """
    resources = template["Resources"]
    values: dict[str, str] = {
        "AWS::Region": region,
        "AWS::AccountId": account,
        "AWS::Partition": partition,
        "AWS::URLSuffix": url_suffix,
        "AWS::StackName": stack_name,
    }
    for key, arn in function_arns.items():
        values[_logical_id(resources, key, FUNCTION)] = arn
    machine = resources[_pick_state_machine(resources, state_machine)]["Properties"]
    if "DefinitionString" not in machine:
        raise ValueError("the state machine has no DefinitionString (DefinitionS3Location is not supported)")
    definition = _resolve(machine["DefinitionString"], values)
    substitutions = {
        name: _resolve(value, values) for name, value in machine.get("DefinitionSubstitutions", {}).items()
    }
    missing = sorted(set(_PLACEHOLDER.findall(definition)) - substitutions.keys())
    if missing:
        raise UnresolvedReference(f"placeholders without a DefinitionSubstitutions entry: {missing}")
    return _PLACEHOLDER.sub(lambda m: substitutions[m.group(1)], definition)


def round_task_functions(template: Mapping[str, Any], *, state_machine: str | None = None) -> dict[str, str]:
    """Task name -> logical id of every Lambda function the state machine's definition refers to.

    The name is the placeholder without ``FunctionArn`` (``${ClaimRoundFunctionArn}`` -> ``ClaimRound``)
    for substituted ARNs, else the function's construct id.
    """
    resources = template["Resources"]
    machine = resources[_pick_state_machine(resources, state_machine)]["Properties"]
    tasks: dict[str, str] = {}
    for placeholder, value in machine.get("DefinitionSubstitutions", {}).items():
        for logical in _references(value):
            if resources.get(logical, {}).get("Type") == FUNCTION:
                tasks[placeholder.removesuffix("FunctionArn")] = logical
    for logical in _references(machine.get("DefinitionString")):
        if resources.get(logical, {}).get("Type") == FUNCTION and logical not in tasks.values():
            tasks[construct_id(resources, logical)] = logical
    return tasks


def construct_id(resources: Mapping[str, Any], logical: str) -> str:
    path = resources[logical].get("Metadata", {}).get("aws:cdk:path")
    if path:
        parts = path.split("/")
        return parts[-2] if parts[-1] == "Resource" and len(parts) > 1 else parts[-1]
    return _CDK_HASH.sub("", logical)


def _pick_state_machine(resources: Mapping[str, Any], wanted: str | None) -> str:
    if wanted is not None:
        return _logical_id(resources, wanted, STATE_MACHINE)
    machines = [lid for lid, res in resources.items() if res.get("Type") == STATE_MACHINE]
    if len(machines) != 1:
        raise ValueError(f"expected one {STATE_MACHINE}, found {machines}; pass state_machine=")
    return machines[0]


def _logical_id(resources: Mapping[str, Any], key: str, type_: str) -> str:
    if resources.get(key, {}).get("Type") == type_:
        return key
    candidates = [lid for lid, res in resources.items() if res.get("Type") == type_]
    by_path = [lid for lid in candidates if construct_id(resources, lid) == key]
    if not by_path:  # no aws:cdk:path metadata: CDK logical ids end in <construct id><8 hex digits>
        by_path = [lid for lid in candidates if re.fullmatch(rf"[A-Za-z0-9]*{re.escape(key)}[0-9A-F]{{8}}", lid)]
    if len(by_path) == 1:
        return by_path[0]
    raise UnresolvedReference(
        f"{key!r} is not the logical id or construct id of exactly one {type_} (matches: {by_path})"
    )


def _resolve(node: Any, values: Mapping[str, str]) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, dict) and len(node) == 1:
        ((fn, arg),) = node.items()
        if fn == "Fn::Join":
            separator, parts = arg
            return separator.join(_resolve(part, values) for part in parts)
        if fn == "Ref":
            return _lookup(values, arg, f"Ref {arg}")
        if fn == "Fn::GetAtt":
            logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            if attribute != "Arn":
                raise UnresolvedReference(f"Fn::GetAtt {logical}.{attribute}: only Arn is supported")
            return _lookup(values, logical, f"Fn::GetAtt {logical}.Arn")
        if fn == "Fn::Sub":
            text, local = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
            scope = {**values, **{k: _resolve(v, values) for k, v in local.items()}}
            return _PLACEHOLDER.sub(lambda m: _lookup(scope, m.group(1).removesuffix(".Arn"), m.group(0)), text)
    raise ValueError(f"cannot resolve {node!r}")


def _lookup(values: Mapping[str, str], key: str, what: str) -> str:
    try:
        return values[key]
    except KeyError:
        raise UnresolvedReference(f"no value for {what}: pass its ARN in function_arns") from None


def _references(node: Any) -> list[str]:
    if isinstance(node, dict):
        if "Fn::GetAtt" in node:
            arg = node["Fn::GetAtt"]
            return [arg[0] if isinstance(arg, list) else arg.split(".", 1)[0]]
        if "Ref" in node:
            return [node["Ref"]]
        return [ref for value in node.values() for ref in _references(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _references(value)]
    return []
