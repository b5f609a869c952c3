"""Controller configuration: which clusters to watch and the per-instance-group policy.

The same model validates `cdk.json` context at synth time and the JSON the Lambdas read from the
configuration parameter at run time, so a typo fails `cdk synth`, not a 3 a.m. round.
"""

from __future__ import annotations

import functools
import json
import math
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator, model_validator

from hyperpod_dhc.deephealth.evidence.rules import (
    NO_OPERATOR_RULES,
    OperatorRules,
    PatternError,
    compile_patterns,
    merge_patterns,
)

CHECK_TYPES = ("InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation")
GROUP_NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"


class Mode(StrEnum):
    ON_DEMAND = "on-demand"  # the controller starts checks
    OBSERVE_ON_START = "observe-on-start"  # HyperPod's OnStartDeepHealthChecks run; we only watch
    OFF = "off"  # the controller ignores the group


class Recovery(StrEnum):
    AUTO = "auto"  # HyperPod's NodeRecovery=Automatic acts; reboot-then-replace only as fallback
    REBOOT_THEN_REPLACE = "reboot-then-replace"
    REPLACE = "replace"
    NONE = "none"  # record the verdict, never act


class NodeRecovery(StrEnum):
    """The cluster's own NodeRecovery setting (DescribeCluster), not ours: does HyperPod act on failed nodes?"""

    AUTOMATIC = "Automatic"  # HyperPod reboots or replaces a node that fails; the controller waits its grace first
    NONE = "None"  # HyperPod leaves failed nodes alone; the controller's ladder acts at once


CheckType = Literal["InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


NotificationKind = Literal[
    "node-failed",
    "node-recovered",
    "node-quarantined",
    "node-inconclusive",
    "round-finished",
    "dry-run",
    "recovery-held",
    "capacity-hold",
    "breaker-tripped",
    "breaker-reset",
    "reading-observed",
    "check-overdue",
    "job-deferral",
    "check-waiting",
    "bridge-take-over",
    "cluster-not-slurm",
]
NOTIFICATION_KINDS: tuple[str, ...] = NotificationKind.__args__  # type: ignore[attr-defined]
LadderStep = Literal["reboot", "replace"]


class Budget(_Strict):
    """Controller replacements allowed per rolling window: the smaller of an absolute and a percentage limit.

    The percentage is of the nodes the controller knows in the group (or cluster), rounded up, so a small
    group still gets one replacement; `null` disables that limit.
    """

    max_nodes: Annotated[int, Field(ge=0, le=100_000)] | None = None
    max_pct: Annotated[int, Field(ge=0, le=100)] | None = 25
    window_h: Annotated[int, Field(ge=1, le=24 * 90)] = 24

    def limit(self, size: int) -> int:
        limits = [self.max_nodes] if self.max_nodes is not None else []
        if self.max_pct is not None:
            limits.append(math.ceil(size * self.max_pct / 100))
        return min(limits) if limits else size


class Lemon(_Strict):
    """A node (by logical id, across instance ids) that keeps failing, or flips between pass and fail."""

    max_failures: Annotated[int, Field(ge=1, le=50)] = 3  # failed verdicts in the window -> quarantine
    max_flaps: Annotated[int, Field(ge=1, le=50)] = 4  # pass <-> fail changes in the window -> quarantine
    window_days: Annotated[int, Field(ge=1, le=365)] = 30


class BadCapacity(_Strict):
    """Replacements that fail their own check point at bad capacity (same type, often the same AZ)."""

    failed_replacements: Annotated[int, Field(ge=1, le=1000)] = 3
    window_h: Annotated[int, Field(ge=1, le=24 * 30)] = 24


class Breaker(_Strict):
    """Stops every automated action on a cluster when failures are systemic (bad AMI, driver, fabric).

    Trips when, within the window, `max_failures` distinct nodes failed, or at least `min_verdicts` nodes got
    a verdict and `max_failure_pct` percent of them failed. Only an operator closes it again.
    """

    max_failures: Annotated[int, Field(ge=1, le=100_000)] | None = None
    max_failure_pct: Annotated[int, Field(ge=1, le=100)] | None = 50
    min_verdicts: Annotated[int, Field(ge=1, le=100_000)] = 10
    window_h: Annotated[int, Field(ge=1, le=24 * 30)] = 6


def _patterns(raw: dict[str, Any]) -> dict[str, Any]:
    """`result_patterns` as written, refused (naming each bad pattern) unless every one compiles and is safe."""
    try:
        compile_patterns(raw)
    except PatternError as err:
        raise ValueError(str(err)) from None
    return raw


class GroupPolicy(_Strict):
    """What the controller does with the nodes of one instance group."""

    mode: Mode = Mode.ON_DEMAND
    # Shadow mode: decide and record (audit + notification) without starting checks or rebooting/replacing.
    dry_run: bool = False
    checks: tuple[CheckType, ...] = ("InstanceStress",)
    recovery: Recovery = Recovery.REBOOT_THEN_REPLACE
    # Explicit ladder (e.g. ["reboot", "replace"]); unset: derived from `recovery`. Every step is re-checked.
    ladder: Annotated[tuple[LadderStep, ...], Field(min_length=1, max_length=10)] | None = None
    max_attempts: Annotated[int, Field(ge=0, le=10)] = 2  # recovery actions per node (per window) before quarantine
    attempt_window_h: Annotated[int, Field(ge=1, le=24 * 365)] | None = None  # unset: attempts never expire
    max_inconclusive: Annotated[int, Field(ge=0, le=10)] = 2  # re-checks after skipped/inconclusive
    # A round waits for more arrivals while they keep coming (each within gather_quiet_s of the last), at most
    # until its oldest node has waited gather_window_s (domain/rounds.gather_delay).
    gather_window_s: Annotated[int, Field(ge=0, le=3600)] = 3600
    gather_quiet_s: Annotated[int, Field(ge=0, le=3600)] = 300
    poll_interval_s: Annotated[int, Field(ge=30, le=3600)] = 60
    check_timeout_s: Annotated[int, Field(ge=600, le=6 * 3600)] = 3 * 3600
    recovery_grace_s: Annotated[int, Field(ge=0, le=6 * 3600)] = 1800  # wait for HyperPod's own recovery
    # A node's result lines are read this long after it left its check (CloudWatch Logs delivers lines late, and a
    # pass needs them) while the controller has not measured the cluster's lag yet; then the settle time follows
    # the lag it measures (domain/readings.py), within [`log_settle_floor_s`, `log_settle_max_s`]. CloudWatch
    # documents no bound; a line later than the settle time is caught by the revisit below.
    log_settle_s: Annotated[int, Field(ge=0, le=3600)] = 300
    log_settle_floor_s: Annotated[int, Field(ge=0, le=3600)] = 30
    log_settle_max_s: Annotated[int, Field(ge=0, le=3600)] = 3600
    # A passed node's check window is read again for this long (or twice the largest lag measured, if longer): a
    # failure line that arrives after the pass reverses it.
    revisit_s: Annotated[int, Field(ge=600, le=14 * 86400)] = 3600
    # For clusters that log no pass line: a node seen in its check, Running again with HyperPod's operation over,
    # and no line about it through `revisit_s` passes. Off: such a node is never passed (docs/FIDELITY.md).
    pass_on_silence: bool = False
    # Re-check passed nodes whose last verdict is older than this, only while the Slurm bridge reports them idle
    # (no bridge: never), at most `revalidate_max_fraction` of the group out for it at once; 0 (or null): off.
    revalidate_every_days: Annotated[int, Field(ge=0, le=365)] = 28
    revalidate_max_fraction: Annotated[float, Field(gt=0, le=1)] = 0.1
    # Concurrency: nodes of this group in one round, and the share of the group the controller may hold out
    # of service at once (re-checks of nodes that had passed, plus reboots/replacements in flight).
    max_nodes_per_round: Annotated[int, Field(ge=1, le=99 * 500)] | None = None
    max_out_of_service_pct: Annotated[int, Field(ge=1, le=100)] = 100
    replace_budget: Budget = Budget()
    lemon: Lemon = Lemon()
    bad_capacity: BadCapacity = BadCapacity()
    # Notification routing: the kinds published for this group, and a `route` message attribute that SNS
    # subscription filter policies can match (e.g. one team's queue per group).
    notify: tuple[NotificationKind, ...] = NOTIFICATION_KINDS  # type: ignore[assignment]
    notify_route: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")] | None = None
    # The Slurm bridge drains a new node (a reason the controller owns) until its check passes; unset: `isolating`.
    isolate_until_checked: bool | None = None
    # How long a Slurm job on a node (the bridge's report) may defer its check; past it the node is checked when a
    # round next claims it, whether or not a job runs, and a job-deferral notification says so.
    job_defer_max_s: Annotated[int, Field(ge=0, le=7 * 86400)] = 6 * 3600
    # Nodes the controller found at its first look at a cluster (adopted): "check-when-idle" keeps them in service
    # (no drain) and checks each when the bridge reports it idle, within job_defer_max_s; "isolate" drains them
    # like new nodes until they pass.
    adopt: Literal["check-when-idle", "isolate"] = "check-when-idle"
    # Result lines the built-in rules do not know, taught without a release (docs/OPERATIONS.md): `pass` per test,
    # `neutral`, `failure`, each a list of RE2 patterns anchored ^...$ that match a record's whole message. Layers
    # (defaults, a cluster's, "<group>", "<cluster>/<group>") add to each other; none removes another's.
    result_patterns: dict[str, Any] = Field(default_factory=dict)
    # EFA devices a node of the group must show an EFA pass line for; unset: its instance type's (evidence/efa.py).
    efa_devices: Annotated[int, Field(ge=0, le=64)] | None = None
    # A node that has waited this long for a check (ready, not held back by a job) is announced (`check-waiting`).
    wait_alert_s: Annotated[int, Field(ge=600, le=7 * 86400)] = 4 * 3600

    @field_validator("result_patterns")
    @classmethod
    def _patterns_compile(cls, raw: dict[str, Any]) -> dict[str, Any]:
        return _patterns(raw)

    @field_validator("revalidate_every_days", mode="before")
    @classmethod
    def _null_is_off(cls, days: object) -> object:
        return 0 if days is None else days  # configurations written before the default: null was off

    @field_validator("checks")
    @classmethod
    def _checks_not_empty(cls, checks: tuple[str, ...]) -> tuple[str, ...]:
        if not checks:
            raise ValueError("checks must name at least one of " + ", ".join(CHECK_TYPES))
        if len(set(checks)) != len(checks):
            raise ValueError("checks must not repeat a check type")
        return checks

    @model_validator(mode="after")
    def _settle_bounds_in_order(self) -> GroupPolicy:
        if not self.log_settle_floor_s <= self.log_settle_s <= self.log_settle_max_s:
            raise ValueError("log_settle_floor_s <= log_settle_s <= log_settle_max_s must hold")
        return self

    @model_validator(mode="after")
    def _ladder_fits_recovery(self) -> GroupPolicy:
        if self.ladder is not None and self.recovery == Recovery.NONE:
            raise ValueError('ladder has no effect with recovery "none"; remove one of them')
        if self.ladder is not None and self.recovery == Recovery.REPLACE and "reboot" in self.ladder:
            raise ValueError('ladder reboots but recovery is "replace"; use "reboot-then-replace" or drop reboot')
        return self

    @model_validator(mode="after")
    def _isolates_only_checked_nodes(self) -> GroupPolicy:
        if self.isolate_until_checked and (self.mode == Mode.OFF or self.dry_run):
            # Its nodes are never checked, so they would stay drained for good.
            why = 'mode is "off"' if self.mode == Mode.OFF else "dry_run never starts a check"
            raise ValueError(f"isolate_until_checked would drain nodes that are never checked ({why}); set it false")
        return self

    @property
    def isolating(self) -> bool:
        """`isolate_until_checked` as it applies: unset, the groups whose new nodes the controller checks itself."""
        if self.isolate_until_checked is not None:
            return self.isolate_until_checked
        return self.mode == Mode.ON_DEMAND and not self.dry_run

    def steps(self) -> tuple[str, ...]:
        """The recovery ladder, capped at `max_attempts`; quarantine follows its last step."""
        if self.ladder is not None:
            return self.ladder[: self.max_attempts]
        if self.recovery == Recovery.REPLACE:
            return ("replace",) * self.max_attempts
        return (("reboot",) + ("replace",) * max(0, self.max_attempts - 1))[: self.max_attempts]


class ClusterPolicy(_Strict):
    """Safety limits for a whole cluster, across its instance groups, and the result patterns of all its groups."""

    replace_budget: Budget = Budget(max_pct=20)
    breaker: Breaker = Breaker()
    result_patterns: dict[str, Any] = Field(default_factory=dict)  # as GroupPolicy's: every group of the cluster

    @field_validator("result_patterns")
    @classmethod
    def _patterns_compile(cls, raw: dict[str, Any]) -> dict[str, Any]:
        return _patterns(raw)


class ControllerConfig(_Strict):
    """The whole configuration, as written under the `hyperpod-dhc` key of `cdk.json` context."""

    clusters: Literal["all"] | tuple[Annotated[str, Field(pattern=GROUP_NAME_PATTERN)], ...] = "all"
    defaults: GroupPolicy = GroupPolicy()
    # Keys: "<group>" applies in every cluster, "<cluster>/<group>" in one cluster and wins. An override names
    # only what differs; nested objects (replace_budget, lemon, ...) merge key by key.
    groups: dict[str, GroupPolicy] = {}
    cluster_defaults: ClusterPolicy = ClusterPolicy()
    cluster_overrides: dict[Annotated[str, Field(pattern=GROUP_NAME_PATTERN)], ClusterPolicy] = {}
    reconcile_every_minutes: Annotated[int, Field(ge=1, le=60)] = 5
    max_round_nodes: Annotated[int, Field(ge=1, le=99 * 500)] = 3000
    log_retention_days: Literal[1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731] = 30

    @field_validator("clusters")
    @classmethod
    def _clusters_not_empty(cls, clusters: object) -> object:
        if clusters != "all" and not clusters:
            raise ValueError('clusters must be "all" or a non-empty list of cluster names')
        return clusters

    @model_validator(mode="after")
    def _group_keys_are_names(self) -> ControllerConfig:
        for key in self.groups:
            parts = key.split("/")
            if len(parts) > 2 or not all(re.match(GROUP_NAME_PATTERN, p) for p in parts):
                raise ValueError(f'groups key "{key}" must be "<group>" or "<cluster>/<group>"')
        for key in self.groups:  # every merged policy must hold together (e.g. a ladder against "replace")
            cluster, _, group = key.rpartition("/")
            self.policy_for(cluster or "*", group)
        return self

    @field_serializer("groups", "cluster_overrides")
    def _only_what_was_set(self, overrides: dict[str, BaseModel]) -> dict[str, Any]:
        # An override names only what differs: dumping its defaults too would override the configured defaults
        # once the Lambdas read the stored configuration back.
        return {key: value.model_dump(mode="json", exclude_unset=True) for key, value in overrides.items()}

    def watches(self, cluster: str) -> bool:
        return self.clusters == "all" or cluster in self.clusters

    def policy_for(self, cluster: str, group: str) -> GroupPolicy:
        merged = self.defaults.model_dump()
        for key in (group, f"{cluster}/{group}"):
            override = self.groups.get(key)
            if override is not None:
                merged = _deep_merge(merged, override.model_dump(exclude_unset=True))
        try:
            return GroupPolicy.model_validate(merged)
        except ValidationError as err:
            raise ValueError(f"policy of {cluster}/{group}: {_problems(err)}") from None

    def cluster_policy(self, cluster: str) -> ClusterPolicy:
        override = self.cluster_overrides.get(cluster)
        if override is None:
            return self.cluster_defaults
        merged = _deep_merge(self.cluster_defaults.model_dump(), override.model_dump(exclude_unset=True))
        return ClusterPolicy.model_validate(merged)

    def result_rules(self, cluster: str, group: str | None) -> OperatorRules:
        """The operator patterns that apply to a record of `group`'s nodes in `cluster` (None: a record on a stream
        that is no node's: the cluster's and the defaults'), compiled once per process."""
        layers = [self.cluster_policy(cluster).result_patterns, self.defaults.result_patterns]
        if group is not None:
            layers[1] = self.policy_for(cluster, group).result_patterns
        return operator_rules(json.dumps(merge_patterns(*layers), sort_keys=True))


@functools.lru_cache(maxsize=64)
def operator_rules(patterns_json: str) -> OperatorRules:
    patterns = json.loads(patterns_json)
    return compile_patterns(patterns) if patterns else NO_OPERATOR_RULES


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if key == "result_patterns":
            out[key] = merge_patterns(out.get(key), value)  # patterns add up; a layer never drops another's
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _problems(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in err.errors())


class ConfigError(ValueError):
    """The configuration is invalid; the message names every offending key."""


def parse_config(raw: object) -> ControllerConfig:
    try:
        return ControllerConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError("invalid hyperpod-dhc configuration: " + _problems(err)) from None
