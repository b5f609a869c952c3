"""The controller configuration at synth time: read from context, validated, stored in SSM.

The configuration lives under the ``hyperpod-dhc`` context key (``cdk.json``, or ``-c`` on the command
line). Its schema is ``hyperpod_dhc.deephealth.domain.policy.ControllerConfig``, the same model the Lambdas use to
read it back at run time, so a typo fails ``cdk synth`` instead of a round:

- ``clusters``: ``"all"`` or a list of cluster names. A list also scopes the EventBridge rules and
  drops ``sagemaker:ListClusters`` from the reconciler.
- ``defaults``: the policy of every instance group (mode, checks, recovery, timers, attempt limits).
- ``groups``: overrides keyed ``"<group>"`` (every cluster) or ``"<cluster>/<group>"`` (one cluster).
- ``reconcile_every_minutes``, ``max_round_nodes``, ``log_retention_days``.

The validated model is written as JSON to an SSM String parameter whose name every Lambda gets in
``CONFIG_PARAMETER_NAME``: changing the policy is a parameter update, not a code deployment.

The construct takes these values as ``HyperPodDhcProps`` (``infra/hyperpod_dhc/infra/construct.py``): ``from_context``
reads them with the ``read_*`` functions here, and props built in code go through the same checks
(``deletion_protection``, ``notification_email``, ``principal_map``), which name what they were given as (a context key,
a props field).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from hyperpod_dhc.deephealth.domain.policy import (
    GROUP_NAME_PATTERN,
    ConfigError,
    ControllerConfig,
    parse_config,
)

# In a checkout, the repository; installed from the wheel, site-packages (nothing of the checkout is there: what infra
# reads of it ships beside infra's modules, see controller_functions.py and operator_api.py here).
REPO_ROOT = Path(__file__).resolve().parents[3]  # infra/hyperpod_dhc/infra/<this file>
# A checkout's portion of the namespace under functions/: the Lambda code (deephealth) and the operator CLI (hpdhc).
FUNCTIONS_DIR = REPO_ROOT / "functions" / "hyperpod_dhc"
INFRA_DIR = Path(__file__).resolve().parent  # this package: the construct, and the data it ships (deploy.example.toml)
DEPLOY_EXAMPLE = INFRA_DIR / "deploy.example.toml"
# The Lambda asset is the deephealth package without bytecode, never the operator CLI (hpdhc ships as a wheel).
ASSET_EXCLUDE = ("__pycache__", "*.pyc", "*.egg-info", "hpdhc")
CONTEXT_KEY = "hyperpod-dhc"
# Separate key, not part of ControllerConfig: it is about the stack, not the controller's policy.
DELETION_PROTECTION_KEY = "hyperpod-dhc:table-deletion-protection"
# Optional: an address that gets an email subscription to the notifications topic (alarms, quarantines).
NOTIFICATION_EMAIL_KEY = "hyperpod-dhc:notification-email"
# Deliberately loose (SNS sends a confirmation mail anyway): one @, no spaces, a dot in the domain.
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")
# Who may reset a cluster's breaker or lift a capacity hold through the API: cluster name (or "*", every
# cluster) -> IAM role or user ARN patterns (``principal_pattern_problem`` says which). Unset or {}: nobody.
BREAKER_RESETTERS_KEY = "hyperpod-dhc:breaker-resetters"
# Whose Slurm bridge a cluster's is: cluster name (or "*") -> the execution role(s) of its Slurm controller group.
# Only they may read the cluster's desired Slurm state and report its occupancy; a cluster named here also gets
# an alarm when its bridge goes silent. Unset or {}: no bridge may call the API.
SLURM_BRIDGES_KEY = "hyperpod-dhc:slurm-bridges"
# Who may queue on-demand checks of a cluster (POST /clusters/{cluster}/checks): same shape. Unset or {}: nobody.
CHECK_REQUESTERS_KEY = "hyperpod-dhc:check-requesters"
# Where notifications are also delivered (infra/hyperpod_dhc/infra/notifications.py): an AWS Chatbot Slack channel
# {"workspace_id", "channel_id"}, a Teams channel {"team_id", "channel_id", "tenant_id"}, HTTPS webhooks [urls].
# Unset, {} or []: none.
SLACK_KEY = "hyperpod-dhc:slack"
TEAMS_KEY = "hyperpod-dhc:teams"
WEBHOOKS_KEY = "hyperpod-dhc:webhooks"
EVERY_CLUSTER = "*"
# What `aws:PrincipalArn` is for a role (its path included) or a user of one account; an assumed-role
# session ARN (arn:aws:sts::...:assumed-role/...) never is, so it is refused rather than never matching.
# The strict reading (issue 29): partition, service, account and resource type spelled out; a path segment or
# name of IAM's characters; the one wildcard a whole last segment `*` after a spelled-out path (role/PATH/*).
_SEGMENT = r"[A-Za-z0-9_+=,.@-]+"
_PRINCIPAL_HEAD = r"arn:aws(?:-cn|-us-gov)?:iam::[0-9]{12}:(?:role|user)/"
_PRINCIPAL_PATTERN = re.compile(rf"{_PRINCIPAL_HEAD}(?:(?:{_SEGMENT}/)*{_SEGMENT}|(?:{_SEGMENT}/)+\*)")
_PRINCIPAL_RESOURCE = re.compile(rf"{_PRINCIPAL_HEAD}(.+)")
_SESSION = re.compile(r"arn:[^:]*:sts::[^:]*:assumed-role/.*")
PRINCIPAL_PATTERNS_ALLOWED = (
    "allowed: an exact IAM role or user ARN, its path included (arn:aws:iam::123456789012:role/PATH/NAME), "
    "or every role or user under a spelled-out path (arn:aws:iam::123456789012:role/PATH/*, which also admits "
    "that path's sub-paths)"
)

__all__ = [
    "CONTEXT_KEY",
    "ConfigError",
    "ControllerConfig",
    "config_parameter",
    "deletion_protection",
    "notification_email",
    "principal_map",
    "principal_pattern_problem",
    "prop_name",
    "read_breaker_resetters",
    "read_check_requesters",
    "read_controller_config",
    "read_notification_email",
    "read_slurm_bridges",
    "retention",
]

# Standard-tier parameters hold 4 KB; only a very large `groups` map needs the (paid) advanced tier.
STANDARD_TIER_LIMIT = 4096

_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
}


def read_controller_config(scope: Construct) -> ControllerConfig:
    """Validate the ``hyperpod-dhc`` context; raises ``ConfigError`` naming every offending key."""
    raw = scope.node.try_get_context(CONTEXT_KEY)
    if raw is None:
        raise ConfigError(
            f'missing context key "{CONTEXT_KEY}": run from the repository root (cdk.json), '
            f"pass it with -c {CONTEXT_KEY}='{{...}}', or build HyperPodDhcProps in code"
        )
    if isinstance(raw, str):  # `-c hyperpod-dhc='{"clusters": [...]}'` arrives as a string
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ConfigError(f'context key "{CONTEXT_KEY}" is not valid JSON: {err}') from None
    return parse_config(raw)


def context_key(key: str) -> str:
    """How an error names a context key."""
    return f'context key "{key}"'


def prop_name(key: str) -> str:
    """The ``HyperPodDhcProps`` field of a ``hyperpod-dhc:<name>`` context key: ``<name>`` in snake case."""
    return key.removeprefix(f"{CONTEXT_KEY}:").replace("-", "_")


def read_deletion_protection(scope: Construct) -> bool:
    raw = scope.node.try_get_context(DELETION_PROTECTION_KEY)
    return deletion_protection(raw, context_key(DELETION_PROTECTION_KEY))


def deletion_protection(raw: object, where: str) -> bool:
    """True or false (also as the strings a command line gives); unset (None): true."""
    if raw is None:
        return True
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise ConfigError(f"{where} must be true or false, got {raw!r}")


def read_notification_email(scope: Construct) -> str | None:
    """The address of ``hyperpod-dhc:notification-email``; None when unset or empty."""
    raw = scope.node.try_get_context(NOTIFICATION_EMAIL_KEY)
    return notification_email(raw, context_key(NOTIFICATION_EMAIL_KEY))


def _context_json(scope: Construct, key: str) -> object:
    """A context value; a string is parsed as JSON (`-c <key>='{...}'` arrives as one)."""
    raw = scope.node.try_get_context(key)
    if isinstance(raw, str) and raw.strip():
        try:
            return json.loads(raw)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{context_key(key)} is not valid JSON: {err}") from None
    return raw


def read_table(scope: Construct, key: str, fields: tuple[str, ...]) -> dict[str, str] | None:
    """A context key holding exactly ``fields`` (strings), e.g. ``hyperpod-dhc:slack``; None when unset or empty."""
    raw = _context_json(scope, key)
    if raw is None or raw == "" or raw == {}:
        return None
    if not isinstance(raw, dict) or set(raw) != set(fields) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"{context_key(key)} must be {{{', '.join(fields)}}} (strings), got {raw!r}")
    return dict(raw)


def read_webhooks(scope: Construct) -> tuple[str, ...]:
    """``hyperpod-dhc:webhooks``: a list of URLs (checked by infra/notifications.webhook_urls); () when unset."""
    raw = _context_json(scope, WEBHOOKS_KEY)
    if raw is None or raw == "":
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{context_key(WEBHOOKS_KEY)} must be a list of https:// URLs, got {raw!r}")
    return tuple(raw)


def notification_email(raw: object, where: str) -> str | None:
    """An email address, stripped; None for None or ""; raises ``ConfigError`` naming ``where`` for anything else."""
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or not EMAIL.fullmatch(raw.strip()):
        raise ConfigError(f"{where} must be an email address, got {raw!r}")
    return raw.strip()


def read_breaker_resetters(scope: Construct, config: ControllerConfig) -> dict[str, tuple[str, ...]]:
    """``hyperpod-dhc:breaker-resetters``: cluster (or ``"*"``) -> principal ARN patterns; {} when unset."""
    return read_principal_map(scope, config, BREAKER_RESETTERS_KEY)


def read_slurm_bridges(scope: Construct, config: ControllerConfig) -> dict[str, tuple[str, ...]]:
    """``hyperpod-dhc:slurm-bridges``: cluster (or ``"*"``) -> its bridge's role ARN patterns; {} when unset."""
    return read_principal_map(scope, config, SLURM_BRIDGES_KEY)


def read_check_requesters(scope: Construct, config: ControllerConfig) -> dict[str, tuple[str, ...]]:
    """``hyperpod-dhc:check-requesters``: cluster (or ``"*"``) -> principal ARN patterns; {} when unset."""
    return read_principal_map(scope, config, CHECK_REQUESTERS_KEY)


def read_principal_map(scope: Construct, config: ControllerConfig, key: str) -> dict[str, tuple[str, ...]]:
    """A context key of the breaker-resetters shape (``principal_map``), also as a JSON string; {} when unset."""
    raw = scope.node.try_get_context(key)
    if isinstance(raw, str) and raw:  # `-c <key>='{...}'` arrives as a string
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{context_key(key)} is not valid JSON: {err}") from None
    return principal_map(raw, config, context_key(key))


def principal_map(raw: object, config: ControllerConfig, where: str) -> dict[str, tuple[str, ...]]:
    """Cluster name (or ``"*"``) -> principal ARN patterns, deduplicated; {} for None or "".

    Raises ``ConfigError`` naming ``where`` for anything but a map of cluster names (watched ones, when
    ``clusters`` is a list) to non-empty lists of IAM role or user ARN patterns ``principal_pattern_problem``
    allows.
    """
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a map of cluster name to principal ARN patterns, got {raw!r}")
    out: dict[str, tuple[str, ...]] = {}
    for cluster, patterns in raw.items():
        if cluster != EVERY_CLUSTER and not (isinstance(cluster, str) and re.fullmatch(GROUP_NAME_PATTERN, cluster)):
            raise ConfigError(f'{where}: "{cluster}" is neither a cluster name nor "{EVERY_CLUSTER}"')
        if cluster != EVERY_CLUSTER and config.clusters != "all" and cluster not in config.clusters:
            raise ConfigError(
                f'{where}: cluster "{cluster}" is not one of the watched clusters {list(config.clusters)}'
            )
        if not isinstance(patterns, list | tuple) or not patterns:
            raise ConfigError(f'{where}: "{cluster}" must be a non-empty list of principal ARN patterns')
        for pattern in patterns:
            problem = principal_pattern_problem(pattern)
            if problem is not None:
                raise ConfigError(f'{where}: "{cluster}" has {pattern!r}: {problem}')
        out[cluster] = tuple(dict.fromkeys(patterns))
    return out


def principal_pattern_problem(pattern: object) -> str | None:
    """None when ``pattern`` may name principals (an ``aws:PrincipalArn`` pattern), else why not and what is allowed.

    Allowed (the strict reading, issue 29): ``arn:<aws|aws-cn|aws-us-gov>:iam::<12-digit account>:<role|user>/``
    then path segments and a name (letters, digits, ``_+=,.@-``), all spelled out: an exact principal, path
    included, as IAM gives a role's ``aws:PrincipalArn``; or a spelled-out path then a whole last segment ``*``
    (``role/team/*``): every role under /team/, and, as ``*`` matches across ``/``, under its sub-paths too.
    Refused: ``*``, ``role/*``, a ``*`` within a segment (``role/dev-*`` also admits ``dev-prod-controller-exec``)
    or before the last, ``?`` anywhere, a wildcard in the partition, service, account or resource type, an
    assumed-role session ARN (never an ``aws:PrincipalArn``: name its role) and anything but a role or a user.
    """
    if isinstance(pattern, str) and _PRINCIPAL_PATTERN.fullmatch(pattern):
        return None
    if isinstance(pattern, str) and _SESSION.fullmatch(pattern):
        why = "a session ARN is never a caller's aws:PrincipalArn: name its role (arn:aws:iam::ACCOUNT:role/NAME)"
    elif isinstance(pattern, str) and "?" in pattern:
        why = "? is not allowed anywhere"
    elif not isinstance(pattern, str) or not (resource := _PRINCIPAL_RESOURCE.fullmatch(pattern)):
        why = (
            "not an IAM role or user ARN pattern with its partition, service (iam), 12-digit account and resource "
            "type (role/ or user/) spelled out"
        )
    elif "*" in resource.group(1):
        why = "* may only be a whole last path segment after a spelled-out path (role/PATH/*)"
    else:
        why = "an empty path segment or name, or a character IAM names do not have"
    return f"{why}; {PRINCIPAL_PATTERNS_ALLOWED}"


def retention(config: ControllerConfig) -> logs.RetentionDays:
    return _RETENTION[config.log_retention_days]


def config_parameter(scope: Construct, id: str, config: ControllerConfig) -> ssm.StringParameter:
    value = config.model_dump_json()
    return ssm.StringParameter(
        scope,
        id,
        description="hyperpod-dhc controller configuration (validated ControllerConfig JSON)",
        string_value=value,
        tier=ssm.ParameterTier.STANDARD if len(value.encode()) <= STANDARD_TIER_LIMIT else ssm.ParameterTier.ADVANCED,
    )
