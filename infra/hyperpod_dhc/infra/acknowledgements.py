"""cdk-nag acknowledgements, each for one exact finding id with the reason it is acceptable.

cdk-nag 3 runs as a policy-validation plugin; ``Validations.of(scope).acknowledge`` applies to the scope
and its children, so every acknowledgement is made on the narrowest construct that owns the finding.
Wildcard findings (AwsSolutions-IAM5) are acknowledged per resource string, never as a blanket rule.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """``rule_id`` as cdk-nag prints it (``AwsSolutions-SQS3``); the ``<pack>::`` prefix is added."""
    if "::" not in rule_id.split("[", 1)[0]:
        rule_id = f"{rule_id.split('-', 1)[0]}::{rule_id}"  # AwsSolutions::AwsSolutions-SQS3
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def acknowledge_wildcard_resource(scope: IConstruct, resource: str, reason: str) -> None:
    """Acknowledge ``AwsSolutions-IAM5[Resource::<resource>]`` for one policy resource string.

    ``resource`` may hold tokens (partition, region, a function ARN); it is rendered the way cdk-nag
    names it: ``Ref`` as ``<Name>``, ``Fn::GetAtt`` as ``<LogicalId.Attr>``, ``Fn::Join`` concatenated.
    """
    rendered = nag_string(Stack.of(scope).resolve(resource))
    acknowledge(scope, f"AwsSolutions-IAM5[Resource::{rendered}]", reason)


def nag_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            return f"<{arg}>"
        if key == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if key == "Fn::Join":
            separator: str
            separator, parts = arg
            return separator.join(nag_string(part) for part in parts)
    raise ValueError(f"cannot render {value!r} as a cdk-nag resource string")
