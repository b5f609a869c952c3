"""The deploy configuration: one small TOML file (``infra/hyperpod_dhc/infra/deploy.example.toml``) read by ``make
plan`` and ``deploy``.

It holds what differs between deployments (region, clusters, who gets told, who may act) and becomes CDK context
(``-c key=<json>``) over ``cdk.json``'s. The whole file is validated by one pydantic model (``DeployFile``) before
any AWS call, with synth's own rules rather than copies of them: ``[policy]`` merged over ``cdk.json``'s
``hyperpod-dhc`` by the controller's ``ControllerConfig``, the principal maps by ``principal_map``, the chat channels
by ``SlackChannel`` / ``TeamsChannel``, the webhooks by ``webhook_urls``, the email by ``notification_email``.
Unknown keys are refused at every level. A refusal is one line naming the file's key (``deploy.toml:
policy.defaults.max_attempts: ...``) and what is allowed, never synth's context key; synth would refuse nothing
that passes here.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import botocore.session
from pydantic import (
    BaseModel,
    ConfigDict,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from hyperpod_dhc.infra.controller_config import (
    BREAKER_RESETTERS_KEY,
    CHECK_REQUESTERS_KEY,
    CONTEXT_KEY,
    DELETION_PROTECTION_KEY,
    NOTIFICATION_EMAIL_KEY,
    REPO_ROOT,
    SLACK_KEY,
    SLURM_BRIDGES_KEY,
    TEAMS_KEY,
    WEBHOOKS_KEY,
    ConfigError,
    ControllerConfig,
    notification_email,
    principal_map,
)
from hyperpod_dhc.infra.notifications import SlackChannel, TeamsChannel, webhook_urls

# The partitions whose principal ARNs the principal maps accept (controller_config._PRINCIPAL_HEAD).
PARTITIONS = ("aws", "aws-cn", "aws-us-gov")
_GROUP = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9-]*/)?[A-Za-z0-9][A-Za-z0-9-]*")
_PRINCIPAL_MAPS = {
    "breaker_resetters": BREAKER_RESETTERS_KEY,
    "slurm_bridges": SLURM_BRIDGES_KEY,
    "check_requesters": CHECK_REQUESTERS_KEY,
}
_REFUSED = "deploy_file"  # the error type of a refusal whose message already names the file's key
_SHOWN = 80  # characters of a refused value quoted in a refusal
_T = typing.TypeVar("_T")
_UNION_MEMBER = re.compile(r"[\[\]']")  # how pydantic tags a union member in a location: literal['all'], tuple[...]


class DeployConfigError(ConfigError):
    """A deploy configuration that cannot be used; the message is one line naming the file and the key.

    A ``ConfigError`` (a ``ValueError``), as synth raises for the same value given as context."""


@functools.cache
def sagemaker_regions() -> tuple[str, ...]:
    """The regions with a SageMaker endpoint in botocore's endpoint data (offline: no AWS call)."""
    session = botocore.session.get_session()
    return tuple(r for p in PARTITIONS for r in session.get_available_regions("sagemaker", partition_name=p))


def _refusal(message: str) -> PydanticCustomError:
    return PydanticCustomError(_REFUSED, "{message}", {"message": message})


def _checked(check: Callable[[], _T]) -> _T:
    """Runs one of synth's checks; its ConfigError (a message naming the file's key) becomes this model's refusal."""
    try:
        return check()
    except ConfigError as err:
        raise _refusal(str(err)) from None


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SlackTable(_Table):
    """``[slack]``: a channel of a workspace authorized in the AWS Chatbot console."""

    workspace_id: str
    channel_id: str

    @model_validator(mode="after")
    def _chatbot_ids(self) -> SlackTable:
        _checked(lambda: SlackChannel(self.workspace_id, self.channel_id))
        return self


class TeamsTable(_Table):
    """``[teams]``: a channel of a team authorized in the AWS Chatbot console."""

    team_id: str
    channel_id: str
    tenant_id: str

    @model_validator(mode="after")
    def _chatbot_ids(self) -> TeamsTable:
        _checked(lambda: TeamsChannel(self.team_id, self.channel_id, self.tenant_id))
        return self


class DeployFile(BaseModel):
    """``deploy.toml``, every key of it. Validate with ``context={"base": <cdk.json's context>}``: ``[policy]`` is
    checked merged over ``base``'s ``hyperpod-dhc``, as synth will read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: str
    clusters: Literal["all"] | tuple[str, ...]
    notification_email: str | None = None
    webhooks: tuple[str, ...] = ()
    isolating_groups: tuple[str, ...] | None = None
    table_deletion_protection: StrictBool = True
    policy: dict[str, Any] = {}
    slack: SlackTable | None = None
    teams: TeamsTable | None = None
    breaker_resetters: Any = None  # the shape is principal_map's to check (it names the cluster and the pattern)
    slurm_bridges: Any = None
    check_requesters: Any = None

    @field_validator("region")
    @classmethod
    def _a_sagemaker_region(cls, region: str) -> str:
        known = sagemaker_regions()
        if region not in known:
            close = difflib.get_close_matches(region, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise _refusal(
                f"region: {_shown(region)} is not an AWS region with SageMaker: {hint}allowed: {', '.join(known)}"
            )
        return region

    @field_validator("clusters", mode="before")
    @classmethod
    def _all_or_names(cls, clusters: object) -> object:
        # Each name's pattern is ControllerConfig's to check (below): here only the shape.
        if clusters == "all" or (isinstance(clusters, list) and clusters and all(isinstance(c, str) for c in clusters)):
            return clusters if clusters == "all" else tuple(dict.fromkeys(clusters))
        raise _refusal(f'clusters: must be "all" or a non-empty list of cluster names, got {_shown(clusters)}')

    @field_validator("notification_email")
    @classmethod
    def _an_address(cls, email: str | None) -> str | None:
        return _checked(lambda: notification_email(email, "notification_email:"))

    @field_validator("webhooks", mode="before")
    @classmethod
    def _https_urls(cls, urls: object) -> object:
        if not isinstance(urls, list):  # never quoted: a URL may carry a token
            raise _refusal(f"webhooks: must be a list of https:// URLs, got a {type(urls).__name__}")
        _checked(lambda: webhook_urls(urls))
        return urls

    @field_validator("isolating_groups")
    @classmethod
    def _group_names(cls, groups: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for index, group in enumerate(groups or ()):
            if not _GROUP.fullmatch(group):
                raise _refusal(
                    f'isolating_groups[{index}]: {_shown(group)} is not "<group>" or "<cluster>/<group>" '
                    "(letters, digits and hyphens)"
                )
        return groups

    @field_validator("policy")
    @classmethod
    def _no_clusters_in_policy(cls, policy: dict[str, Any]) -> dict[str, Any]:
        if "clusters" in policy:
            raise _refusal("policy.clusters: set clusters at the top level of the file, not under [policy]")
        return policy

    @model_validator(mode="after")
    def _as_synth_reads_it(self, info: ValidationInfo) -> DeployFile:
        """The merged controller configuration and the principal maps, by synth's own models and checks."""
        if self.isolating_groups is not None and _sets_isolation(self.policy):
            raise _refusal("policy: sets isolate_until_checked beside isolating_groups: say it in one place")
        base = (info.context or {}).get("base", {})
        try:
            config = ControllerConfig.model_validate(
                controller_context(base, self.policy, self.clusters, self.isolating_groups)
            )
        except ValidationError as err:
            raise _refusal(_first_problem(err, ControllerConfig, _policy_key)) from None
        _checked(lambda: self.principals(config))
        return self

    def principals(self, config: ControllerConfig) -> dict[str, dict[str, tuple[str, ...]]]:
        """Each principal map, by synth's ``principal_map``: its clusters must be ``config``'s (or "*")."""
        maps = {name: getattr(self, name) for name in _PRINCIPAL_MAPS}
        return {name: principal_map({} if raw is None else raw, config, name) for name, raw in maps.items()}


def controller_context(
    base: Mapping[str, Any],
    policy: Mapping[str, Any],
    clusters: str | tuple[str, ...],
    isolating_groups: tuple[str, ...] | None,
) -> dict[str, Any]:
    """The ``hyperpod-dhc`` context value a file makes: cdk.json's (``base``), ``[policy]`` merged over it key by
    key, ``clusters`` and ``isolating_groups`` set."""
    controller = json.loads(json.dumps(base.get(CONTEXT_KEY) or {}))  # a deep copy
    _merge(controller, policy)
    controller["clusters"] = list(clusters) if clusters != "all" else "all"
    if isolating_groups is not None:
        # Exactly these groups are drained in Slurm until checked; every other group is left to jobs.
        controller.setdefault("defaults", {})["isolate_until_checked"] = False
        groups = controller.setdefault("groups", {})
        for group in isolating_groups:
            groups.setdefault(group, {})["isolate_until_checked"] = True
    return controller


@dataclass(frozen=True)
class DeployConfig:
    path: Path
    region: str
    clusters: tuple[str, ...] | None  # None: every cluster of the region ("all")
    notification_email: str | None = None
    slack: Mapping[str, str] | None = None
    teams: Mapping[str, str] | None = None
    webhooks: tuple[str, ...] = ()
    isolating_groups: tuple[str, ...] | None = None  # None: the policy's default (on-demand groups isolate)
    table_deletion_protection: bool = True
    policy: Mapping[str, Any] = field(default_factory=dict)
    principals: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)

    def context(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The CDK context values this file sets, over ``base`` (cdk.json's context): key -> JSON-able value."""
        clusters = self.clusters if self.clusters is not None else "all"
        controller = controller_context(base, self.policy, clusters, self.isolating_groups)
        out: dict[str, Any] = {
            CONTEXT_KEY: controller,
            DELETION_PROTECTION_KEY: self.table_deletion_protection,
            NOTIFICATION_EMAIL_KEY: self.notification_email or "",
            SLACK_KEY: dict(self.slack) if self.slack else {},
            TEAMS_KEY: dict(self.teams) if self.teams else {},
            WEBHOOKS_KEY: list(self.webhooks),
        }
        for name, key in _PRINCIPAL_MAPS.items():
            out[key] = {cluster: list(arns) for cluster, arns in self.principals.get(name, {}).items()}
        return out

    def cdk_context_args(self, base: Mapping[str, Any]) -> list[str]:
        """``-c key=value`` for the CDK CLI: a string as it is, anything else as the JSON the context readers parse."""
        args: list[str] = []
        for key, value in self.context(base).items():
            text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            args += ["-c", f"{key}={text}"]
        return args


def cdk_json_context() -> dict[str, Any]:
    """``cdk.json``'s context: what the file's values go over."""
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return context


def load(path: str | Path, base: Mapping[str, Any] | None = None) -> DeployConfig:
    """Read and check ``path``; raises DeployConfigError with a one-line reason."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise DeployConfigError(
            f"{path}: no such file (copy infra/hyperpod_dhc/infra/deploy.example.toml to {path.name} and edit it)"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise DeployConfigError(f"{path}: not valid TOML: {err}") from None
    return parse(raw, path, base)


def parse(raw: Mapping[str, Any], path: Path, base: Mapping[str, Any] | None = None) -> DeployConfig:
    """``raw`` (the parsed file) checked whole by ``DeployFile`` over ``base`` (default: cdk.json's context)."""
    base = cdk_json_context() if base is None else base
    try:
        checked = DeployFile.model_validate(raw, context={"base": base})
    except ValidationError as err:
        raise DeployConfigError(f"{path}: {_first_problem(err, DeployFile, _file_key)}") from None
    controller = controller_context(base, checked.policy, checked.clusters, checked.isolating_groups)
    config = ControllerConfig.model_validate(controller)  # valid: the model checked it so
    principals = checked.principals(config)
    return DeployConfig(
        path=path,
        region=checked.region,
        clusters=None if checked.clusters == "all" else tuple(checked.clusters),
        notification_email=checked.notification_email,
        slack=checked.slack.model_dump() if checked.slack else None,
        teams=checked.teams.model_dump() if checked.teams else None,
        webhooks=checked.webhooks,
        isolating_groups=checked.isolating_groups,
        table_deletion_protection=checked.table_deletion_protection,
        policy=checked.policy,
        principals=principals,
    )


# --- one line per refusal -------------------------------------------------------------------------------------


def _first_problem(err: ValidationError, root: type[BaseModel], key: Callable[[tuple[int | str, ...]], str]) -> str:
    """The first problem of ``err`` as one line: the file's key, what is wrong, what is allowed; "(and N more)"."""
    problems = err.errors()
    # A union's members each report (``clusters.literal['all']``, ``clusters.tuple[...].0``): the deepest says most.
    first = max((p for p in problems if p["loc"][:1] == problems[0]["loc"][:1]), key=lambda p: len(p["loc"]))
    siblings = [p for p in problems if p["loc"][:1] == first["loc"][:1] and _tagged(p["loc"])] or [first]
    others = len(problems) - len(siblings) + (first not in siblings)
    first["loc"] = tuple(part for part in first["loc"] if not _UNION_MEMBER.search(str(part)))
    more = f" (and {others} more)" if others else ""
    if first["type"] == _REFUSED:
        return f"{first['msg']}{more}"
    return f"{key(first['loc'])}: {_why(first, root)}{more}"


def _tagged(loc: tuple[int | str, ...]) -> bool:
    return any(_UNION_MEMBER.search(str(part)) for part in loc)


def _why(problem: ErrorDetails, root: type[BaseModel]) -> str:
    loc = problem["loc"]
    if problem["type"] == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        if model is None:
            return "unknown key (none is allowed here)"
        close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"unknown key: {hint}allowed: {', '.join(model.model_fields)}"
    if problem["type"] == "missing":
        return "required, and missing"
    message = problem["msg"].removeprefix("Value error, ")
    # Validators' own messages say what they got; a URL may carry a token; a whole table says nothing.
    if problem["type"] == "value_error" or "webhooks" in loc or not loc:
        return message
    return f"{message}, got {_shown(problem['input'])}"


def _file_key(loc: tuple[int | str, ...]) -> str:
    return _dotted(loc)


def _policy_key(loc: tuple[int | str, ...]) -> str:
    """A ControllerConfig location as the file names it: ``clusters`` is the file's top-level key, the rest is
    ``[policy]``'s (or cdk.json's under it)."""
    if loc and loc[0] == "clusters":
        return _dotted(loc)
    return _dotted(("policy", *loc))


def _dotted(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<the file>"


def _model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model whose keys are allowed at ``loc`` under ``root`` (through dicts, lists and optionals), if any."""
    annotation: Any = root
    for part in loc:
        options = _options(annotation)
        model = next((o for o in options if _is_model(o) and part in o.model_fields), None)
        if model is not None:
            annotation = model.model_fields[str(part)].annotation
            continue
        container = next((o for o in options if typing.get_origin(o) in (dict, list, tuple)), None)
        if container is None:
            return None
        annotation = typing.get_args(container)[-1] if typing.get_args(container) else Any
        if annotation is Ellipsis:  # tuple[X, ...]
            annotation = typing.get_args(container)[0]
    return next((o for o in _options(annotation) if _is_model(o)), None)


def _options(annotation: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _options(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return tuple(o for arg in typing.get_args(annotation) for o in _options(arg))
    return (annotation,)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}…"


def _sets_isolation(policy: Mapping[str, Any]) -> bool:
    groups = policy.get("groups")
    tables = [policy.get("defaults"), *(groups.values() if isinstance(groups, dict) else ())]
    return any(isinstance(table, dict) and "isolate_until_checked" in table for table in tables)


def _merge(into: dict[str, Any], over: Mapping[str, Any]) -> None:
    """Tables merge key by key; anything else (lists included) replaces."""
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = json.loads(json.dumps(value))
