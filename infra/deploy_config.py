"""The deploy configuration: one small TOML file (``infra/deploy.example.toml``) read by ``make plan`` and ``deploy``.

It holds what differs between deployments (region, clusters, who gets told, who may act) and becomes CDK context
(``-c key=<json>``) over ``cdk.json``'s, so the stack reads it through the same validating readers as any other
context (``infra/controller_config.py``): one source of truth for what a value may be. This module checks the
file's shape, and the principal ARN patterns with synth's own check (``principal_pattern_problem``: a pattern that
admits more than it spells out is refused), so a typo stops before any AWS call with a one-line reason naming the key.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.controller_config import (
    BREAKER_RESETTERS_KEY,
    CHECK_REQUESTERS_KEY,
    CONTEXT_KEY,
    DELETION_PROTECTION_KEY,
    NOTIFICATION_EMAIL_KEY,
    SLACK_KEY,
    SLURM_BRIDGES_KEY,
    TEAMS_KEY,
    WEBHOOKS_KEY,
    ConfigError,
    principal_pattern_problem,
)

_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d")
_GROUP = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9-]*/)?[A-Za-z0-9][A-Za-z0-9-]*")
_PRINCIPAL_MAPS = {
    "breaker_resetters": BREAKER_RESETTERS_KEY,
    "slurm_bridges": SLURM_BRIDGES_KEY,
    "check_requesters": CHECK_REQUESTERS_KEY,
}
_CHANNELS = {"slack": ("workspace_id", "channel_id"), "teams": ("team_id", "channel_id", "tenant_id")}
KEYS = (
    "region",
    "clusters",
    "notification_email",
    "webhooks",
    "isolating_groups",
    "table_deletion_protection",
    "policy",
    *_CHANNELS,
    *_PRINCIPAL_MAPS,
)


class DeployConfigError(ConfigError):
    """A deploy configuration that cannot be used; the message is one line naming the file and the key.

    A ``ConfigError`` (a ``ValueError``), as synth raises for the same value given as context."""


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
        controller = json.loads(json.dumps(base.get(CONTEXT_KEY) or {}))  # a deep copy
        _merge(controller, dict(self.policy))
        controller["clusters"] = list(self.clusters) if self.clusters is not None else "all"
        if self.isolating_groups is not None:
            # Exactly these groups are drained in Slurm until checked; every other group is left to jobs.
            controller.setdefault("defaults", {})["isolate_until_checked"] = False
            groups = controller.setdefault("groups", {})
            for group in self.isolating_groups:
                groups.setdefault(group, {})["isolate_until_checked"] = True
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


def load(path: str | Path) -> DeployConfig:
    """Read and check ``path``; raises DeployConfigError with a one-line reason."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise DeployConfigError(
            f"{path}: no such file (copy infra/deploy.example.toml to {path.name} and edit it)"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise DeployConfigError(f"{path}: not valid TOML: {err}") from None
    return parse(raw, path)


def parse(raw: Mapping[str, Any], path: Path) -> DeployConfig:
    def fail(key: str, why: str) -> DeployConfigError:
        return DeployConfigError(f"{path}: {key}: {why}")

    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise fail(unknown[0], f"unknown key (known: {', '.join(KEYS)})")
    region = raw.get("region")
    if not isinstance(region, str) or not _REGION.fullmatch(region):
        raise fail("region", f"must be an AWS region name such as us-west-2, got {region!r}")
    clusters = raw.get("clusters")
    if clusters == "all":
        cluster_names = None
    elif isinstance(clusters, list) and clusters and all(isinstance(c, str) and c for c in clusters):
        cluster_names = tuple(dict.fromkeys(clusters))
    else:
        raise fail("clusters", f'must be "all" or a non-empty list of cluster names, got {clusters!r}')
    email = raw.get("notification_email")
    if email is not None and not isinstance(email, str):
        raise fail("notification_email", f"must be a string, got {email!r}")
    webhooks = raw.get("webhooks", [])
    if not isinstance(webhooks, list) or not all(
        isinstance(url, str) and url.startswith("https://") for url in webhooks
    ):
        raise fail("webhooks", f"must be a list of https:// URLs, got {webhooks!r}")
    isolating = raw.get("isolating_groups")
    if isolating is not None and (
        not isinstance(isolating, list) or not all(isinstance(g, str) and _GROUP.fullmatch(g) for g in isolating)
    ):
        raise fail("isolating_groups", f'must be a list of "<group>" or "<cluster>/<group>" names, got {isolating!r}')
    protection = raw.get("table_deletion_protection", True)
    if not isinstance(protection, bool):
        raise fail("table_deletion_protection", f"must be true or false, got {protection!r}")
    policy = raw.get("policy", {})
    if not isinstance(policy, dict):
        raise fail("policy", "must be a table of controller configuration (docs/CONFIGURATION.md)")
    if "clusters" in policy:
        raise fail("policy.clusters", "set clusters at the top level")
    if isolating is not None and _sets_isolation(policy):
        raise fail("policy", "sets isolate_until_checked beside isolating_groups: say it in one place")
    channels = {name: _channel(raw, name, fail) for name in _CHANNELS}
    principals = {name: _principals(raw, name, fail) for name in _PRINCIPAL_MAPS}
    return DeployConfig(
        path=path,
        region=region,
        clusters=cluster_names,
        notification_email=email or None,
        slack=channels["slack"],
        teams=channels["teams"],
        webhooks=tuple(webhooks),
        isolating_groups=tuple(isolating) if isolating is not None else None,
        table_deletion_protection=protection,
        policy=policy,
        principals=principals,
    )


def _channel(raw: Mapping[str, Any], name: str, fail: Callable[[str, str], DeployConfigError]) -> dict[str, str] | None:
    value = raw.get(name)
    if value is None:
        return None
    fields = _CHANNELS[name]
    if (
        not isinstance(value, dict)
        or set(value) != set(fields)
        or not all(isinstance(v, str) and v for v in value.values())
    ):
        raise fail(name, f"must be a table of exactly {', '.join(fields)} (strings), got {value!r}")
    return dict(value)


def _principals(
    raw: Mapping[str, Any], name: str, fail: Callable[[str, str], DeployConfigError]
) -> dict[str, tuple[str, ...]]:
    value = raw.get(name, {})
    if not isinstance(value, dict) or not all(
        isinstance(arns, list) and arns and all(isinstance(a, str) for a in arns) for arns in value.values()
    ):
        raise fail(name, f'must be a table of cluster name (or "*") = [role ARN patterns], got {value!r}')
    for cluster, arns in value.items():  # synth checks them too (principal_map); here, before any AWS call
        for arn in arns:
            problem = principal_pattern_problem(arn)
            if problem is not None:
                raise fail(name, f'"{cluster}" has {arn!r}: {problem}')
    return {cluster: tuple(arns) for cluster, arns in value.items()}


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
