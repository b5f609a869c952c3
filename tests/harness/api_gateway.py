"""API Gateway REST (v1) as the IAM-authorized operator API behaves: what it answers itself, read from the
synthesized template, and the Lambda-proxy events it delivers otherwise.

``refusal(template, method, path, caller)`` is what API Gateway answers before the integration runs, in its
order: no such method (403 ``Missing Authentication Token``), an explicit deny of the API's resource policy
for the caller's ``aws:PrincipalArn`` on the method ARN (403), no ``AWS::Lambda::Permission`` letting
API Gateway invoke the integration's function from that method ARN (500). ``None``: the request reaches
the function. IAM authentication itself (a SigV4 signature, the identity policy's allow) is assumed.

The policy evaluator covers what the template's policy uses, and refuses anything else: Allow/Deny,
Resource/NotResource, Principal ``*`` or ARNs, and the ArnLike, ArnNotLike, StringLike, StringNotLike,
StringEquals and StringNotEquals operators with ``*``/``?`` wildcards. (moto's ``IAMPolicy`` only knows
StringEquals.)
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

ACCOUNT = "123456789012"
REGION = "us-east-1"
API_ID = "local"
STAGE = "v1"
PSEUDO_PARAMETERS = {
    "AWS::Partition": "aws",
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::URLSuffix": "amazonaws.com",
}
MISSING_ROUTE = (403, {"message": "Missing Authentication Token"})
BROKEN_INTEGRATION = (500, {"message": "Internal server error"})


# ---------------------------------------------------------------- the template, resolved as deployed


def _of_type(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {lid: res for lid, res in template["Resources"].items() if res["Type"] == type_}


def _refs(template: dict[str, Any]) -> dict[str, str]:
    """What ``Ref`` resolves to in the twin: pseudo parameters, the API's id and the stage's name."""
    refs = dict(PSEUDO_PARAMETERS)
    refs.update({lid: API_ID for lid in _of_type(template, "AWS::ApiGateway::RestApi")})
    refs.update(
        {lid: res["Properties"]["StageName"] for lid, res in _of_type(template, "AWS::ApiGateway::Stage").items()}
    )
    return refs


def resolve(value: Any, refs: dict[str, str]) -> Any:
    """Ref, Fn::Join and Fn::GetAtt (as ``<Logical.Attr>``) resolved in strings, lists and maps."""
    if isinstance(value, list):
        return [resolve(v, refs) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        return refs.get(value["Ref"], f"<{value['Ref']}>")
    if set(value) == {"Fn::GetAtt"}:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(str(resolve(part, refs)) for part in parts)
    return {k: resolve(v, refs) for k, v in value.items()}


def methods(template: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(HTTP method, resource path such as ``/clusters/{cluster}``) -> the method's properties."""
    resources = _of_type(template, "AWS::ApiGateway::Resource")

    def path(resource_id: Any) -> str:
        if "Fn::GetAtt" in resource_id:  # the API's RootResourceId
            return ""
        props = resources[resource_id["Ref"]]["Properties"]
        return f"{path(props['ParentId'])}/{props['PathPart']}"

    return {
        (m["Properties"]["HttpMethod"], path(m["Properties"]["ResourceId"]) or "/"): m["Properties"]
        for m in _of_type(template, "AWS::ApiGateway::Method").values()
    }


def match_route(template: dict[str, Any], method: str, path: str) -> tuple[str, str] | None:
    """The (method, resource path) API Gateway routes the request to, or None."""
    segments = [s for s in path.split("/") if s]
    for http_method, resource_path in methods(template):
        parts = [s for s in resource_path.split("/") if s]
        if (
            http_method in (method, "ANY")
            and len(parts) == len(segments)
            and all(p == s or re.fullmatch(r"\{\w+\}", p) for p, s in zip(parts, segments, strict=True))
        ):
            return http_method, resource_path
    return None


def method_arn(method: str, path: str) -> str:
    return f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{API_ID}/{STAGE}/{method}/{path.lstrip('/')}"


def principal_arn(caller: str) -> str:
    """``aws:PrincipalArn`` of a caller: an assumed-role session is its role (the role's path is not in a
    session ARN; AWS knows it, the twin does not, so the twin's roles have none)."""
    session = re.fullmatch(r"arn:([\w-]+):sts::(\d{12}):assumed-role/([^/]+)/.+", caller)
    return f"arn:{session[1]}:iam::{session[2]}:role/{session[3]}" if session else caller


# ---------------------------------------------------------------- a small policy evaluator


def wildcard_match(pattern: str, value: str) -> bool:
    """``*`` any run of characters, ``?`` one character, everything else literal (case-sensitive)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def arn_like(pattern: str, arn: str) -> bool:
    """ArnLike: each of the six colon-separated parts matched on its own."""
    pattern_parts, arn_parts = pattern.split(":", 5), arn.split(":", 5)
    if len(pattern_parts) != 6 or len(arn_parts) != 6:
        return False
    return all(wildcard_match(p, a) for p, a in zip(pattern_parts, arn_parts, strict=True))


_OPERATORS = {
    "ArnLike": arn_like,
    "ArnEquals": arn_like,
    "StringLike": wildcard_match,
    "StringEquals": str.__eq__,
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def condition_holds(operator: str, key_values: dict[str, Any], context: dict[str, str]) -> bool:
    """One condition operator: every key must hold; a key matches if any value does. ``*Not*`` operators
    hold when no value matches (and when the key is absent from the request)."""
    negated = operator.replace("Not", "", 1) if "Not" in operator else None
    test = _OPERATORS.get(negated or operator)
    if test is None:
        raise NotImplementedError(f"condition operator {operator} is not evaluated by the twin")
    for key, values in key_values.items():
        actual = context.get(key)
        matched = actual is not None and any(test(str(v), actual) for v in _as_list(values))
        if matched == bool(negated):
            return False
    return True


def _principal_matches(principal: Any, principal_arn: str) -> bool:
    if principal == "*":
        return True
    arns = _as_list(principal.get("AWS", [])) if isinstance(principal, dict) else []
    account = principal_arn.split(":")[4]
    return any(a in ("*", principal_arn, account, f"arn:aws:iam::{account}:root") for a in arns)


def statement_applies(statement: dict[str, Any], action: str, resource: str, context: dict[str, str]) -> bool:
    unsupported = {"NotPrincipal", "NotAction"} & set(statement)
    if unsupported:
        raise NotImplementedError(f"{sorted(unsupported)} is not evaluated by the twin")
    if not _principal_matches(statement.get("Principal"), context["aws:PrincipalArn"]):
        return False
    if not any(wildcard_match(a.lower(), action.lower()) for a in _as_list(statement["Action"])):
        return False
    if "NotResource" in statement:
        if any(wildcard_match(r, resource) for r in _as_list(statement["NotResource"])):
            return False
    elif not any(wildcard_match(r, resource) for r in _as_list(statement["Resource"])):
        return False
    return all(condition_holds(op, kv, context) for op, kv in statement.get("Condition", {}).items())


def evaluate(policy: dict[str, Any] | None, action: str, resource: str, context: dict[str, str]) -> str | None:
    """``Deny`` (an explicit deny), ``Allow``, or None (the policy says nothing) for one request."""
    applying = [
        s["Effect"] for s in (policy or {}).get("Statement", []) if statement_applies(s, action, resource, context)
    ]
    return "Deny" if "Deny" in applying else "Allow" if applying else None


# ---------------------------------------------------------------- what API Gateway answers itself


def refusal(template: dict[str, Any], method: str, path: str, caller: str) -> tuple[int, dict[str, Any]] | None:
    """API Gateway's own answer to ``caller`` (an IAM user or assumed-role ARN), or None to invoke."""
    route = match_route(template, method, path)
    if route is None:
        return MISSING_ROUTE
    refs = _refs(template)
    arn = method_arn(method, path)
    context = {"aws:PrincipalArn": principal_arn(caller)}
    for api in _of_type(template, "AWS::ApiGateway::RestApi").values():
        policy = resolve(api["Properties"].get("Policy"), refs)
        if evaluate(policy, "execute-api:Invoke", arn, context) == "Deny":
            denied = f"User: {caller} is not authorized to perform: execute-api:Invoke on resource: {arn}"
            return 403, {"Message": f"{denied} with an explicit deny"}
    uri = str(resolve(methods(template)[route].get("Integration", {}).get("Uri"), refs))
    for permission in _of_type(template, "AWS::Lambda::Permission").values():
        props = resolve(permission["Properties"], refs)
        if (
            props["Principal"] == "apigateway.amazonaws.com"
            and props["Action"] == "lambda:InvokeFunction"
            and f"/functions/{props['FunctionName']}/" in uri  # the integration's function
            and wildcard_match(props.get("SourceArn", "*"), arn)
        ):
            return None
    return BROKEN_INTEGRATION


# ---------------------------------------------------------------- the events it delivers


def proxy_event(
    method: str,
    path: str,
    body: Any = None,
    query: dict[str, str] | None = None,
    principal: str = f"arn:aws:iam::{ACCOUNT}:user/operator",
) -> dict[str, Any]:
    request_id = str(uuid.uuid4())
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": "application/json", "Host": "api.local"},
        "multiValueHeaders": {},
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in (query or {}).items()} or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": path,
            "httpMethod": method,
            "path": f"/v1{path}",
            "stage": STAGE,
            "requestId": request_id,
            "accountId": ACCOUNT,
            "apiId": API_ID,
            "protocol": "HTTP/1.1",
            "requestTimeEpoch": 0,
            "identity": {
                "userArn": principal,
                "caller": principal.rsplit("/", 1)[-1],
                "sourceIp": "127.0.0.1",
                "accountId": ACCOUNT,
                "user": principal.rsplit("/", 1)[-1],
            },
        },
        "body": None if body is None else (body if isinstance(body, str) else json.dumps(body)),
        "isBase64Encoded": False,
    }
