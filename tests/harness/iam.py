"""IAM as AWS enforces it: every request the controller makes is evaluated against its role, as synthesized.

moto ignores IAM, so without this a missing grant only shows once deployed. `Authorizer` reads each role's
policies from the synthesized template (every `AWS::IAM::Policy` attached to the role and the role's inline
`Policies`), resolves the CloudFormation intrinsics (`Ref`, `Fn::GetAtt`, `Fn::Join`, `Fn::Sub`, pseudo
parameters) to the physical names and ARNs the harness really uses (`PhysicalNames`), and decides each
request on its action *and* resource ARN: an explicit Deny wins, then an Allow, else the implicit deny.
Statements are matched by moto's own evaluator (`moto.iam.access_control.IAMPolicyStatement`) with two
corrections: wildcards are matched as IAM does (`*`, `?`, every other character literal; moto turns the
pattern into an unescaped regex) and action names are case-insensitive. Conditions are evaluated here (moto's
only know `StringEquals`, and it answers DENIED when an Allow's condition is unmet): `String{Equals,Like}` and
`Arn{Equals,Like}` against the request context given; any other operator, `NotResource` or a managed policy
fails loudly when the template is read.

Who is authorized, and where (`tests/harness/moto_patches.py` wraps moto's botocore stubber):
- a request made inside a Lambda invocation: the function's role, per request (`requests` maps each
  operation to its IAM action(s) and resource ARN(s); an operation not mapped raises `UnmappedRequest`);
- the state machine invoking a Task Lambda: its role's `lambda:InvokeFunction` on the function ARN;
- EventBridge delivering to Intake or Reconcile: an `AWS::Lambda::Permission` for `events.amazonaws.com`
  on the function whose `SourceArn` is a rule that delivers the event (its pattern matches it, or it is the
  schedule rule and the event a Scheduled Event);
- each invocation, the Lambda service with the function's role: `logs:CreateLogStream` + `logs:PutLogEvents`
  on the function's own log group (its `LoggingConfig`) and, tracing being active, `xray:PutTraceSegments` +
  `xray:PutTelemetryRecords`;
- an asynchronous invocation given up: `sqs:SendMessage` on the function's dead-letter queue and
  `kms:GenerateDataKey` + `kms:Decrypt` on the queue's key.
A denied request is answered as AWS answers it (`AccessDeniedException` in the service's own error shape;
SNS: `AuthorizationError`, or `KMSAccessDenied` when the topic's key is not usable), so the controller's own
error handling runs. Decisions are cached per (principal, action, resource).

What it cannot see: conditions beyond the four operators above (and context keys nobody supplies), service
control policies, permission boundaries, session policies, KMS key policies (taken as delegating to IAM, as
the stack's keys do), resource policies other than the Lambda permissions, and what a service does on its
own behalf beyond the calls listed.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from moto.iam.access_control import IAMPolicyStatement, PermissionResult

from tests.harness.asl import construct_id

STACK_NAME = "HyperPodDhc"
STATE_MACHINE_PRINCIPAL = "RoundWorkflow"  # the report's key for the state machine's role
EVENTBRIDGE_PRINCIPAL = "EventBridge"  # the report's key for EventBridge deliveries (Lambda permissions)
EVENTS_SERVICE = "events.amazonaws.com"
LOG_STREAM = "twin"  # one stream name for every invocation: the decision is cached once per function
SUPPORTED_CONDITIONS = ("StringEquals", "StringLike", "ArnEquals", "ArnLike")
SERVICE_PREFIX = {"sfn": "states", "cloudwatch-logs": "logs"}  # botocore service id -> IAM prefix, where they differ


class UnmappedRequest(AssertionError):
    """A request whose IAM action/resource this module does not know: map it before calling it."""


class UnsupportedPolicy(AssertionError):
    """A policy element this evaluator cannot decide (an unknown condition operator, NotResource...)."""


@dataclass(frozen=True)
class Access:
    """One authorization AWS makes for a request: an IAM action on a resource ARN."""

    action: str
    resource: str


@dataclass(frozen=True)
class PhysicalNames:
    """The names the harness gave the resources it created (by resource type, one of each); every other
    resource gets `<stack>-<logical id>` as CloudFormation would generate one."""

    account: str = "123456789012"
    region: str = "us-east-1"
    table: str | None = None
    parameter: str | None = None
    topic: str | None = None
    # FunctionName = construct id; a function's log group = /aws/lambda/<FunctionName> (what it logs to).


# ---------------------------------------------------------------------------------------------- resolution


class Resolver:
    """CloudFormation intrinsics -> the physical values the harness uses."""

    def __init__(self, template: Mapping[str, Any], names: PhysicalNames) -> None:
        self.resources = template["Resources"]
        self.names = names
        self.pseudo = {
            "AWS::Region": names.region,
            "AWS::AccountId": names.account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": STACK_NAME,
        }
        self._log_group_of: dict[str, str] = {}  # log group logical id -> the function logging to it
        for lid, res in self.resources.items():
            if res["Type"] == "AWS::Lambda::Function":
                ref = res["Properties"].get("LoggingConfig", {}).get("LogGroup")
                if isinstance(ref, dict) and "Ref" in ref:
                    self._log_group_of[ref["Ref"]] = lid

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.value(v) for v in node]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((fn, arg),) = node.items()
            if fn == "Ref":
                return self.pseudo[arg] if arg in self.pseudo else self.ref(arg)
            if fn == "Fn::GetAtt":
                lid, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(lid, attribute)
            if fn == "Fn::Join":
                return arg[0].join(str(self.value(part)) for part in arg[1])
            if fn == "Fn::Sub":
                text, local = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
                return re.sub(r"\$\{([^}]+)\}", lambda m: self._sub(m.group(1), local), text)
            if fn.startswith("Fn::"):
                raise UnsupportedPolicy(f"cannot resolve {fn}")
        return {k: self.value(v) for k, v in node.items()}

    def _sub(self, name: str, local: Mapping[str, Any]) -> str:
        if name in local:
            return str(self.value(local[name]))
        if name in self.pseudo:
            return self.pseudo[name]
        if "." in name:
            lid, attribute = name.split(".", 1)
            return str(self.get_att(lid, attribute))
        return str(self.ref(name))

    def _type(self, lid: str) -> str:
        return self.resources[lid]["Type"]

    def name(self, lid: str) -> str:
        """The physical name of a resource."""
        res, n = self.resources[lid], self.names
        type_, props = res["Type"], res.get("Properties", {})
        if type_ == "AWS::Lambda::Function":
            return construct_id(self.resources, lid)  # FunctionName = construct id in the harness
        if type_ in ("AWS::DynamoDB::GlobalTable", "AWS::DynamoDB::Table") and n.table:
            return n.table
        if type_ == "AWS::SSM::Parameter" and n.parameter:
            return n.parameter
        if type_ == "AWS::SNS::Topic" and n.topic:
            return n.topic
        if type_ == "AWS::Logs::LogGroup" and lid in self._log_group_of:
            return f"/aws/lambda/{self.name(self._log_group_of[lid])}"
        explicit = {
            "AWS::StepFunctions::StateMachine": "StateMachineName",
            "AWS::SNS::Topic": "TopicName",
            "AWS::SQS::Queue": "QueueName",
            "AWS::Logs::LogGroup": "LogGroupName",
            "AWS::DynamoDB::GlobalTable": "TableName",
            "AWS::DynamoDB::Table": "TableName",
            "AWS::SSM::Parameter": "Name",
            "AWS::Events::Rule": "Name",
            "AWS::IAM::Role": "RoleName",
        }.get(type_)
        if explicit and explicit in props:
            return str(self.value(props[explicit]))
        return f"{STACK_NAME}-{lid}"  # what CloudFormation generates, less its random suffix

    def ref(self, lid: str) -> str:
        type_ = self._type(lid)
        if type_ in ("AWS::SNS::Topic", "AWS::StepFunctions::StateMachine"):
            return self.arn(lid)
        if type_ == "AWS::SQS::Queue":
            return f"https://sqs.{self.names.region}.amazonaws.com/{self.names.account}/{self.name(lid)}"
        if type_ == "AWS::KMS::Key":
            return self._key_id(lid)
        return self.name(lid)

    def get_att(self, lid: str, attribute: str) -> str:
        if attribute in ("Arn", "TopicArn"):
            return self.arn(lid)
        if attribute in ("Name", "TopicName", "QueueName", "KeyId"):
            return self._key_id(lid) if attribute == "KeyId" else self.name(lid)
        raise UnsupportedPolicy(f"Fn::GetAtt {lid}.{attribute}")

    def _key_id(self, lid: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{STACK_NAME}/{lid}"))

    def arn(self, lid: str) -> str:
        a, r, name, type_ = self.names.account, self.names.region, self.name(lid), self._type(lid)
        return {
            "AWS::Lambda::Function": f"arn:aws:lambda:{r}:{a}:function:{name}",
            "AWS::DynamoDB::GlobalTable": f"arn:aws:dynamodb:{r}:{a}:table/{name}",
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{r}:{a}:table/{name}",
            "AWS::SNS::Topic": f"arn:aws:sns:{r}:{a}:{name}",
            "AWS::SQS::Queue": f"arn:aws:sqs:{r}:{a}:{name}",
            "AWS::KMS::Key": f"arn:aws:kms:{r}:{a}:key/{self._key_id(lid)}",
            "AWS::Logs::LogGroup": f"arn:aws:logs:{r}:{a}:log-group:{name}:*",  # GetAtt Arn ends in :*
            "AWS::IAM::Role": f"arn:aws:iam::{a}:role/{name}",
            "AWS::Events::Rule": f"arn:aws:events:{r}:{a}:rule/{name}",
            "AWS::StepFunctions::StateMachine": f"arn:aws:states:{r}:{a}:stateMachine:{name}",
        }.get(type_) or _raise(UnsupportedPolicy(f"no ARN for {type_} {lid}"))


def _raise(err: Exception) -> Any:
    raise err


# ---------------------------------------------------------------------------------------------- evaluation


def wildcard(pattern: str) -> re.Pattern[str]:
    """An IAM wildcard pattern: `*` any run of characters, `?` one character, the rest literal."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.S)


class _Statement(IAMPolicyStatement):
    """moto's statement evaluator, with IAM's wildcard semantics (moto's pattern is an unescaped regex)."""

    @staticmethod
    def _match(pattern: str, string: str) -> re.Match[str] | None:
        return wildcard(pattern).fullmatch(string)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@dataclass
class Policy:
    """The identity policy of one role: its statements, resolved."""

    statements: list[dict[str, Any]]

    def __post_init__(self) -> None:
        self._matchers = []
        for s in self.statements:
            if "NotResource" in s or "NotPrincipal" in s:
                raise UnsupportedPolicy(f"statement {s.get('Sid')}: NotResource/NotPrincipal")
            for operator in s.get("Condition", {}):
                if operator not in SUPPORTED_CONDITIONS:
                    raise UnsupportedPolicy(f"statement {s.get('Sid')}: condition operator {operator}")
            key = "NotAction" if "NotAction" in s else "Action"
            plain = {k: v for k, v in s.items() if k != "Condition"}
            plain[key] = [a.lower() for a in _as_list(s[key])]  # action names are case-insensitive
            self._matchers.append((_Statement(plain), s.get("Condition", {})))

    def decide(self, action: str, resource: str, context: Mapping[str, str] | None = None) -> str:
        """ "allow", "explicit-deny" or "implicit-deny"."""
        allowed = False
        for matcher, condition in self._matchers:
            result = matcher.is_action_permitted(action.lower(), resource)
            if result == PermissionResult.NEUTRAL or not conditions_hold(condition, context or {}):
                continue  # an unmet condition makes the statement not apply, whatever its effect
            if result == PermissionResult.DENIED:
                return "explicit-deny"
            allowed = True
        return "allow" if allowed else "implicit-deny"


def conditions_hold(condition: Mapping[str, Mapping[str, Any]], context: Mapping[str, str]) -> bool:
    """Every operator, every key of it holds (a key absent from the context does not)."""
    for operator, tests in condition.items():
        for key, expected in tests.items():
            actual = context.get(key)
            if actual is None:
                return False
            if operator.endswith("Like"):
                if not any(wildcard(str(p)).fullmatch(actual) for p in _as_list(expected)):
                    return False
            elif actual not in [str(v) for v in _as_list(expected)]:
                return False
    return True


# ---------------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class World:
    """What the request mapping needs to know beyond the request."""

    account: str
    region: str
    cluster_arn: Callable[[str], str]  # a cluster name (or ARN) -> its ARN (cluster/<id>)
    key_of: Callable[[str], str | None]  # a topic or queue ARN -> the customer-managed key encrypting it


def _body(request: Any) -> bytes:
    body = request.body or b""
    if hasattr(body, "read"):  # a streamed body: not one of ours
        return b""
    return body.encode() if isinstance(body, str) else bytes(body)


def requests(service: str, operation: str, request: Any, world: World) -> list[Access]:
    """The authorizations AWS makes for one botocore request (`service` is botocore's service id)."""
    action = f"{SERVICE_PREFIX.get(service, service)}:{operation}"
    mapper = _MAPPERS.get(service)
    found = mapper(action, operation, request, world) if mapper else None
    if found is None:
        raise UnmappedRequest(f"{action}: no IAM mapping in tests/harness/iam.py `requests` (add it, then grant it)")
    return found


def _lambda(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    if operation != "Invoke":
        return None
    path = urlparse(request.url).path  # /2015-03-31/functions/<name or ARN>/invocations
    name = unquote(path.split("/functions/", 1)[1].rsplit("/invocations", 1)[0])
    return [Access("lambda:InvokeFunction", function_arn(name, world.account, world.region))]


def _sns(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    params = {k: v[0] for k, v in parse_qs(_body(request).decode()).items()}
    if operation != "Publish":
        return None
    topic = params.get("TopicArn") or params.get("TargetArn") or _raise(UnmappedRequest(f"{action} {params}"))
    # SNS encrypts with the topic's key on the publisher's behalf: the publisher needs both
    return [Access("sns:Publish", topic), *_key_use(world.key_of(topic))]


def _key_use(key: str | None) -> list[Access]:
    return [Access("kms:GenerateDataKey", key), Access("kms:Decrypt", key)] if key else []


def _json(request: Any) -> Any:
    return json.loads(_body(request) or b"{}")


def _sagemaker(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    if operation == "ListClusters":
        return [Access(action, "*")]  # no resource type: "*" is the only resource
    if operation in (
        "DescribeCluster", "ListClusterNodes", "DescribeClusterNode", "StartClusterHealthCheck",
        "BatchRebootClusterNodes", "BatchReplaceClusterNodes", "ListClusterEvents", "DescribeClusterEvent",
        "ListClusterOperations", "DescribeClusterOperation",
    ):  # fmt: skip
        return [Access(action, world.cluster_arn(_json(request)["ClusterName"]))]
    return None


def _dynamodb(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    p, a, r = _json(request), world.account, world.region
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [Access(action, table_arn(t, a, r)) for t in p["RequestItems"]]
    if operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "DescribeTable"):
        arn = table_arn(p["TableName"], a, r)
        return [Access(action, f"{arn}/index/{p['IndexName']}" if p.get("IndexName") else arn)]
    return None


def _sfn(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    if operation in ("StartExecution", "ListExecutions"):
        return [Access(action, _json(request)["stateMachineArn"])]
    if operation in ("DescribeExecution", "StopExecution", "GetExecutionHistory"):
        return [Access(action, _json(request)["executionArn"])]
    return None


def _logs(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    if operation not in ("FilterLogEvents", "GetLogEvents", "DescribeLogStreams"):
        return None
    p = _json(request)
    group = p.get("logGroupIdentifier") or p.get("logGroupName", "")
    arn = group if group.startswith("arn:") else f"arn:aws:logs:{world.region}:{world.account}:log-group:{group}"
    return [Access(action, arn)]


def _ssm(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    p, a, r = _json(request), world.account, world.region
    if operation == "GetParameter":
        return [Access(action, parameter_arn(p["Name"], a, r))]
    if operation == "GetParameters":
        return [Access(action, parameter_arn(n, a, r)) for n in p["Names"]]
    return None


def _sqs(action: str, operation: str, request: Any, world: World) -> list[Access] | None:
    if operation != "SendMessage":
        return None
    queue = queue_arn(_json(request)["QueueUrl"], world.region)
    return [Access(action, queue), *_key_use(world.key_of(queue))]


# botocore service id -> what one request of it authorizes; a service or operation not here stops the run.
_MAPPERS: dict[str, Callable[[str, str, Any, World], list[Access] | None]] = {
    "lambda": _lambda,
    "sns": _sns,
    "sagemaker": _sagemaker,
    "dynamodb": _dynamodb,
    "sfn": _sfn,
    "cloudwatch-logs": _logs,
    "ssm": _ssm,
    "sqs": _sqs,
}


def function_arn(name: str, account: str, region: str) -> str:
    return name if name.startswith("arn:") else f"arn:aws:lambda:{region}:{account}:function:{name}"


def table_arn(name: str, account: str, region: str) -> str:
    return name if name.startswith("arn:") else f"arn:aws:dynamodb:{region}:{account}:table/{name}"


def parameter_arn(name: str, account: str, region: str) -> str:
    """A parameter's ARN: `parameter/<name>`, the leading slash of a path name not doubled."""
    if name.startswith("arn:"):
        return name
    return f"arn:aws:ssm:{region}:{account}:parameter/{name.removeprefix('/')}"


def queue_arn(url: str, region: str) -> str:
    *_, account, name = urlparse(url).path.split("/")
    return f"arn:aws:sqs:{region}:{account}:{name}"


# ---------------------------------------------------------------------------------------------- responses


def denial_message(role: str, session: str, access: Access, decision: str, account: str) -> str:
    why = (
        "with an explicit deny in an identity-based policy"
        if decision == "explicit-deny"
        else f"because no identity-based policy allows the {access.action} action"
    )
    return (
        f"User: arn:aws:sts::{account}:assumed-role/{role}/{session} is not authorized to perform: "
        f"{access.action} on resource: {access.resource} {why}"
    )


def error_response(service: str, request: Any, message: str, kms: bool = False) -> tuple[int, dict[str, str], str]:
    """AccessDenied as the service sends it: (status, headers, body)."""
    request_id = str(uuid.uuid4())
    if service == "sns":
        code, status = ("KMSAccessDenied", 400) if kms else ("AuthorizationError", 403)
        body = (
            '<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">'
            f"<Error><Type>Sender</Type><Code>{code}</Code><Message>{_xml(message)}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return status, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, body
    if service == "lambda":  # REST-JSON: the code is in the header
        headers = {"Content-Type": "application/json", "x-amzn-ErrorType": "AccessDeniedException"}
        return 403, {**headers, "x-amzn-RequestId": request_id}, json.dumps({"Type": "User", "Message": message})
    content_type = str(request.headers.get("Content-Type", "application/x-amz-json-1.0"))
    headers = {"Content-Type": content_type, "x-amzn-RequestId": request_id}
    return 400, headers, json.dumps({"__type": "AccessDeniedException", "message": message})


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# ---------------------------------------------------------------------------------------------- the authorizer

_CALLER = threading.local()  # who sends the Lambda Invoke requests made on this thread outside any invocation


@dataclass(frozen=True)
class Principal:
    key: str  # the report's name: a function's construct id, RoundWorkflow
    role: str  # the role's physical name (in denial messages)
    policy: Policy


@dataclass(frozen=True)
class Permission:
    """An `AWS::Lambda::Permission`, resolved."""

    function: str  # ARN (or name)
    principal: str
    source_arn: str | None
    source_account: str | None
    action: str


@dataclass
class Authorizer:
    template: Mapping[str, Any]
    names: PhysicalNames
    cluster_arn_of: Callable[[str], str | None] = lambda ref: None  # the fake's name -> ARN
    calls: dict[str, Counter[str]] = field(default_factory=dict)  # principal -> IAM action -> requests
    denials: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (principal, action, resource)
    unmapped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.resolver = Resolver(self.template, self.names)
        res = self.template["Resources"]
        self.functions: dict[str, Principal] = {}  # FunctionName -> its role
        self._function_lid: dict[str, str] = {}
        for lid, r in res.items():
            if r["Type"] == "AWS::Lambda::Function" and "Role" in r["Properties"]:
                name = self.resolver.name(lid)
                self.functions[name] = self._principal(report_key(r["Properties"]), _role_lid(r["Properties"]["Role"]))
                self._function_lid[name] = lid
        machines = [r for r in res.values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
        self.state_machine = (
            self._principal(STATE_MACHINE_PRINCIPAL, _role_lid(machines[0]["Properties"]["RoleArn"]))
            if len(machines) == 1
            else None
        )
        self.permissions = [
            Permission(
                function=str(self.resolver.value(p["FunctionName"])),
                principal=str(self.resolver.value(p["Principal"])),
                source_arn=self.resolver.value(p["SourceArn"]) if "SourceArn" in p else None,
                source_account=self.resolver.value(p["SourceAccount"]) if "SourceAccount" in p else None,
                action=p["Action"],
            )
            for r in res.values()
            if r["Type"] == "AWS::Lambda::Permission" and (p := r["Properties"])["Principal"] == EVENTS_SERVICE
        ]
        self._keys: dict[str, str] = {}  # topic / queue ARN -> customer-managed key ARN
        for lid, r in res.items():
            if r["Type"] in ("AWS::SNS::Topic", "AWS::SQS::Queue") and "KmsMasterKeyId" in r["Properties"]:
                key = str(self.resolver.value(r["Properties"]["KmsMasterKeyId"]))
                if key.startswith("arn:aws:kms:"):
                    self._keys[self.resolver.arn(lid)] = key
        self._clusters: dict[str, str] = {}  # cluster name -> ARN, kept after the cluster is gone
        self._cache: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()
        self.world = World(self.names.account, self.names.region, self._cluster_arn, self._keys.get)

    def _principal(self, key: str, role_lid: str) -> Principal:
        res = self.template["Resources"]
        role = res[role_lid]["Properties"]
        if role.get("ManagedPolicyArns"):
            raise UnsupportedPolicy(f"{role_lid} has managed policies: their documents are not in the template")
        statements = [s for p in role.get("Policies", []) for s in _as_list(p["PolicyDocument"]["Statement"])]
        statements += [
            s
            for p in res.values()
            if p["Type"] == "AWS::IAM::Policy" and {"Ref": role_lid} in p["Properties"].get("Roles", [])
            for s in _as_list(p["Properties"]["PolicyDocument"]["Statement"])
        ]
        return Principal(key, self.resolver.name(role_lid), Policy(self.resolver.value(statements)))

    def _cluster_arn(self, ref: str) -> str:
        if ref.startswith("arn:"):
            return ref
        arn = self.cluster_arn_of(ref) or self._clusters.get(ref)
        if arn is None:  # never existed: AWS cannot know its id; cluster/<name> is what a policy could name
            return f"arn:aws:sagemaker:{self.names.region}:{self.names.account}:cluster/{ref}"
        self._clusters[ref] = arn
        return arn

    # -- deciding ---------------------------------------------------------------------------------
    def authorize(self, principal: Principal, access: Access) -> str:
        """Decide (cached) and count one authorization; returns the decision."""
        key = (principal.key, access.action, access.resource)
        with self._lock:
            decision = self._cache.get(key)
            if decision is None:
                decision = self._cache[key] = principal.policy.decide(access.action, access.resource)
            self.calls.setdefault(principal.key, Counter())[access.action] += 1
            if decision != "allow":
                self.denials[key] += 1
        return decision

    def __call__(self, event_name: str, request: Any) -> tuple[int, dict[str, str], str] | None:
        """The stubber's hook: an AccessDenied response for a request AWS would refuse, else None."""
        if not event_name.startswith("before-send."):
            return None
        from tests.harness.moto_patches import current_function

        _, service, operation = event_name.split(".", 2)
        function = current_function()
        if function is not None:
            principal, session = self.functions[function], function
        elif service == "lambda" and operation == "Invoke" and getattr(_CALLER, "who", None) is not None:
            return self._invoke_from_outside(request)
        else:
            if service == "lambda" and operation == "Invoke":
                self._invoked(self._invoked_name(request))  # a test's own call: the function still runs, logs
            return None  # the harness's own calls are not the controller's
        try:
            accesses = requests(service, operation, request, self.world)
        except Exception as err:
            with self._lock:
                self.unmapped.append(f"{function}: {service}.{operation}: {err}")
            raise UnmappedRequest(f"{function} called {service}.{operation}, unmapped: {err}") from err
        for i, access in enumerate(accesses):
            decision = self.authorize(principal, access)
            if decision != "allow":
                message = denial_message(principal.role, session, access, decision, self.names.account)
                return error_response(service, request, message, kms=i > 0 and access.action.startswith("kms:"))
        if service == "lambda":
            self._invoked(self._invoked_name(request))
        return None

    def _invoked_name(self, request: Any) -> str:
        (access,) = requests("lambda", "Invoke", request, self.world)
        return access.resource.rsplit(":function:", 1)[1].split(":")[0]

    def _invoke_from_outside(self, request: Any) -> tuple[int, dict[str, str], str] | None:
        who, event = _CALLER.who
        (access,) = requests("lambda", "Invoke", request, self.world)
        if who == "states":
            assert self.state_machine is not None
            decision = self.authorize(self.state_machine, access)
            role, session = self.state_machine.role, "states"
        else:  # EventBridge: a Lambda permission must let the delivering rule invoke the function
            decision = self._delivery(access.resource, event)
            role, session = "events", "events"
        if decision != "allow":
            message = denial_message(role, session, access, decision, self.names.account)
            return error_response("lambda", request, message)
        self._invoked(self._invoked_name(request))
        return None

    def _delivery(self, function: str, event: Mapping[str, Any]) -> str:
        rules = self.rules_delivering(function, event)
        allowed = any(
            p.principal == EVENTS_SERVICE
            and wildcard(p.action).fullmatch("lambda:InvokeFunction") is not None
            and function_arn(p.function, self.names.account, self.names.region) == function
            and (p.source_arn is None or wildcard(str(p.source_arn)).fullmatch(rule) is not None)
            and (p.source_account in (None, self.names.account))
            for p in self.permissions
            for rule in rules
        )
        decision = "allow" if allowed else "implicit-deny"
        resource = ",".join(rules) or "(no rule delivers this event)"
        with self._lock:
            self.calls.setdefault(EVENTBRIDGE_PRINCIPAL, Counter())["lambda:InvokeFunction"] += 1
            if not allowed:
                self.denials[(EVENTBRIDGE_PRINCIPAL, f"lambda:InvokeFunction {function}", resource)] += 1
        return decision

    def rules_delivering(self, function: str, event: Mapping[str, Any]) -> list[str]:
        """ARNs of the template's rules that deliver `event` to `function`."""
        from moto.events.models import EventPattern

        out = []
        for lid, r in self.template["Resources"].items():
            if r["Type"] != "AWS::Events::Rule":
                continue
            props = r["Properties"]
            if not any(self.resolver.value(t["Arn"]) == function for t in props.get("Targets", [])):
                continue
            if "EventPattern" in props:
                matches = EventPattern.load(json.dumps(props["EventPattern"])).matches_event(dict(event))  # type: ignore[arg-type]  # moto types events as a TypedDict
            else:
                matches = "ScheduleExpression" in props and event.get("detail-type") == "Scheduled Event"
            if matches:
                out.append(self.resolver.arn(lid))
        return out

    # -- what the Lambda service does with the function's role -------------------------------------
    def _invoked(self, function: str) -> None:
        """One invocation: its log stream and log events, and its trace (tracing is active)."""
        principal = self.functions.get(function)
        if principal is None:
            return
        props = self.template["Resources"][self._function_lid[function]]["Properties"]
        ref = props.get("LoggingConfig", {}).get("LogGroup")
        group = str(self.resolver.value(ref)) if ref else f"/aws/lambda/{function}"
        stream = f"arn:aws:logs:{self.names.region}:{self.names.account}:log-group:{group}:log-stream:{LOG_STREAM}"
        for action in ("logs:CreateLogStream", "logs:PutLogEvents"):
            self.authorize(principal, Access(action, stream))
        if props.get("TracingConfig", {}).get("Mode") == "Active":
            for action in ("xray:PutTraceSegments", "xray:PutTelemetryRecords"):
                self.authorize(principal, Access(action, "*"))

    def dead_letter(self, function: str) -> bool:
        """An asynchronous invocation given up: Lambda sends it to the function's dead-letter queue with the
        function's role. Returns whether it got there."""
        principal = self.functions[function]
        target = self.template["Resources"][self._function_lid[function]]["Properties"].get("DeadLetterConfig")
        if not target:
            return False
        queue = str(self.resolver.value(target["TargetArn"]))
        key = self._keys.get(queue)
        accesses = [Access("sqs:SendMessage", queue)]
        accesses += [Access("kms:GenerateDataKey", key), Access("kms:Decrypt", key)] if key else []
        return all([self.authorize(principal, a) == "allow" for a in accesses])

    # -- report ------------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        with self._lock:
            return {
                "denied": sum(self.denials.values()),
                "calls": {k: dict(sorted(c.items())) for k, c in sorted(self.calls.items())},
                "denials": [f"{p} {a} on {r}: {n}" for (p, a, r), n in sorted(self.denials.items())],
                "unmapped": list(self.unmapped),
            }

    def granted_actions(self) -> dict[str, set[str]]:
        """Report key (`ClaimRound`) -> every action its role allows somewhere (as written)."""
        return {
            p.key: {a for s in p.policy.statements if s["Effect"] == "Allow" for a in _as_list(s.get("Action", []))}
            for p in self.functions.values()
        }


@contextlib.contextmanager
def invoked_by(who: str, event: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Lambda Invoke requests sent meanwhile from this thread (outside any invocation) come from `who`:
    "states" (the state machine's role) or "events" (EventBridge delivering `event`)."""
    previous = getattr(_CALLER, "who", None)
    _CALLER.who = (who, event or {})
    try:
        yield
    finally:
        _CALLER.who = previous


def report_key(function: Mapping[str, Any]) -> str:
    """The name a function goes by in the report: its `hyperpod_dhc.infra.controller_functions.FUNCTIONS` key, i.e. its
    handler module camel-cased (`hyperpod_dhc.deephealth.handlers.claim_round.lambda_handler` -> `ClaimRound`)."""
    module = str(function.get("Handler", "")).rsplit(".", 1)[0].rsplit(".", 1)[-1]
    return "".join(part.capitalize() for part in module.split("_"))


def _role_lid(node: Any) -> str:
    if isinstance(node, dict) and "Fn::GetAtt" in node:
        arg = node["Fn::GetAtt"]
        return arg[0] if isinstance(arg, list) else arg.split(".", 1)[0]
    raise UnsupportedPolicy(f"role {node!r}: only Fn::GetAtt <role>.Arn is supported")
