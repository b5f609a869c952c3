"""Controller configuration: which clusters to watch and the per-instance-group policy.

The same model validates `cdk.json` context at synth time and the JSON the Lambdas read from the
configuration parameter at run time, so a typo fails `cdk synth`, not a 3 a.m. round.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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


CheckType = Literal["InstanceStress", "InstanceConnectivity", "MultiNodeTrainingValidation"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GroupPolicy(_Strict):
    """What the controller does with the nodes of one instance group."""

    mode: Mode = Mode.ON_DEMAND
    checks: tuple[CheckType, ...] = ("InstanceStress",)
    recovery: Recovery = Recovery.REBOOT_THEN_REPLACE
    max_attempts: Annotated[int, Field(ge=0, le=10)] = 2  # recovery actions per node before quarantine
    max_inconclusive: Annotated[int, Field(ge=0, le=10)] = 2  # re-checks after skipped/inconclusive
    gather_window_s: Annotated[int, Field(ge=0, le=3600)] = 300
    poll_interval_s: Annotated[int, Field(ge=30, le=3600)] = 60
    check_timeout_s: Annotated[int, Field(ge=600, le=6 * 3600)] = 3 * 3600
    recovery_grace_s: Annotated[int, Field(ge=0, le=6 * 3600)] = 1800  # wait for HyperPod's own recovery
    # Re-check passed nodes whose last verdict is older than this (idle nodes go stale); off by default.
    revalidate_every_days: Annotated[int, Field(ge=1, le=365)] | None = None

    @field_validator("checks")
    @classmethod
    def _checks_not_empty(cls, checks: tuple[str, ...]) -> tuple[str, ...]:
        if not checks:
            raise ValueError("checks must name at least one of " + ", ".join(CHECK_TYPES))
        if len(set(checks)) != len(checks):
            raise ValueError("checks must not repeat a check type")
        return checks


class PolicyOverride(_Strict):
    """Per-group override: every field optional, unset fields come from the defaults."""

    mode: Mode | None = None
    checks: tuple[CheckType, ...] | None = None
    recovery: Recovery | None = None
    max_attempts: Annotated[int, Field(ge=0, le=10)] | None = None
    max_inconclusive: Annotated[int, Field(ge=0, le=10)] | None = None
    gather_window_s: Annotated[int, Field(ge=0, le=3600)] | None = None
    poll_interval_s: Annotated[int, Field(ge=30, le=3600)] | None = None
    check_timeout_s: Annotated[int, Field(ge=600, le=6 * 3600)] | None = None
    recovery_grace_s: Annotated[int, Field(ge=0, le=6 * 3600)] | None = None
    revalidate_every_days: Annotated[int, Field(ge=1, le=365)] | None = None


class ControllerConfig(_Strict):
    """The whole configuration, as written under the `hyperpod-dhc` key of `cdk.json` context."""

    clusters: Literal["all"] | tuple[Annotated[str, Field(pattern=GROUP_NAME_PATTERN)], ...] = "all"
    defaults: GroupPolicy = GroupPolicy()
    # Keys: "<group>" applies in every cluster, "<cluster>/<group>" in one cluster and wins.
    groups: dict[str, PolicyOverride] = {}
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
        import re

        for key in self.groups:
            parts = key.split("/")
            if len(parts) > 2 or not all(re.match(GROUP_NAME_PATTERN, p) for p in parts):
                raise ValueError(f'groups key "{key}" must be "<group>" or "<cluster>/<group>"')
        return self

    def watches(self, cluster: str) -> bool:
        return self.clusters == "all" or cluster in self.clusters

    def policy_for(self, cluster: str, group: str) -> GroupPolicy:
        merged = self.defaults.model_dump()
        for key in (group, f"{cluster}/{group}"):
            override = self.groups.get(key)
            if override is not None:
                merged.update(override.model_dump(exclude_none=True))
        return GroupPolicy.model_validate(merged)


class ConfigError(ValueError):
    """The configuration is invalid; the message names every offending key."""


def parse_config(raw: object) -> ControllerConfig:
    try:
        return ControllerConfig.model_validate(raw)
    except ValidationError as err:
        problems = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in err.errors()]
        raise ConfigError("invalid hyperpod-dhc configuration: " + "; ".join(problems)) from None
