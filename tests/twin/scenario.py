"""The twin's scenario file (JSON, versioned): the cluster, its arrivals, its hardware and its faults.

`policy` overrides the controller configuration with the same keys as the `hyperpod-dhc` context of
`cdk.json`; the result is validated by the controller's own config model. Any unknown key or bad value is a
`ScenarioError` naming the key. `faults` are drawn per call or event from the seed; `incidents` are single
events fired at the first moment after `after_s` when their condition holds (see `tests/twin/incidents.py`).
`fidelity` is the reading the fake plays of each behaviour AWS does not document (`tests/fakes/readings.py`;
the defaults are the fake's historical choices); `workload` puts jobs on nodes (a node busy with a job when a
check is requested is waited for up to 10 min, then skipped with no result): one per node at ready
(`busy_rate`), or a steady arrival of jobs on every schedulable node (`utilisation`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hyperpod_dhc.deephealth.domain.policy import GROUP_NAME_PATTERN, CheckType, ConfigError, parse_config
from hyperpod_dhc.deephealth.domain.rounds import RoundStep
from tests.fakes.readings import Readings

CONTROLLER_GROUP = "controller"  # the Slurm controller group the twin adds to every cluster
Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Seconds = Annotated[float, Field(ge=0.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Arrival(_Strict):
    start_s: Seconds = 0.0
    spread_s: Seconds = 0.0  # arrivals are spread uniformly (seeded) over [start_s, start_s + spread_s]


class GroupScenario(_Strict):
    name: Annotated[str, Field(pattern=GROUP_NAME_PATTERN)]
    instance_type: str = "ml.p5.48xlarge"
    count: Annotated[int, Field(ge=0, le=20_000)]
    arrival: Arrival = Arrival()
    on_start_deep_health_checks: tuple[CheckType, ...] = ()
    lifecycle_s: Annotated[float, Field(gt=0)] = 600.0  # provisioning + lifecycle script


class ClusterScenario(_Strict):
    name: Annotated[str, Field(pattern=GROUP_NAME_PATTERN)]
    node_recovery: Literal["None", "Automatic"] = "Automatic"


class FaultyNodes(_Strict):
    """Exactly this many of the scenario's arrivals are faulty (which ones: a seeded shuffle)."""

    transient: Annotated[int, Field(ge=0, le=20_000)] = 0
    persistent: Annotated[int, Field(ge=0, le=20_000)] = 0


class Hardware(_Strict):
    transient_fault_rate: Rate = 0.0  # fails a check; a reboot cures it
    persistent_fault_rate: Rate = 0.0  # fails a check; only new hardware cures it
    replacement_fault_rate: Rate = 0.0  # a replacement instance is itself faulty
    # Exact counts instead of rates: the scenario's arrivals get these truths by a seeded shuffle.
    faulty_nodes: FaultyNodes | None = None

    @model_validator(mode="after")
    def _rates_add_up(self) -> Hardware:
        if self.transient_fault_rate + self.persistent_fault_rate > 1.0:
            raise ValueError("transient_fault_rate + persistent_fault_rate must not exceed 1")
        if self.faulty_nodes is not None and (self.transient_fault_rate or self.persistent_fault_rate):
            raise ValueError("faulty_nodes replaces transient_fault_rate and persistent_fault_rate: set one")
        return self


class Faults(_Strict):
    duplicate_event_rate: Rate = 0.0
    dropped_event_rate: Rate = 0.0
    # Per AWS API call a Lambda makes (DynamoDB, Step Functions, Logs, SSM, SageMaker, SNS): throttling
    # (DynamoDB: ProvisionedThroughputExceededException) or HTTP 500. botocore retries them as in AWS.
    throttle_rate: Rate = 0.0
    server_error_rate: Rate = 0.0
    delayed_event_rate: Rate = 0.0  # an event reaches Intake late, so events arrive out of order
    max_event_delay_s: Annotated[float, Field(gt=0, le=86400)] = 900.0  # a late event's delay: uniform up to this

    @model_validator(mode="after")
    def _api_rates_add_up(self) -> Faults:
        if self.throttle_rate + self.server_error_rate > 1.0:
            raise ValueError("throttle_rate + server_error_rate must not exceed 1")
        return self


class Workload(_Strict):
    """Jobs on nodes, of a length drawn from `job_s`. A check requested while a job runs waits up to 10 min for
    it, then skips the node.

    `busy_rate`: when a node becomes ready it starts one job with that probability (nothing else).
    `utilisation` (0 = off): jobs keep arriving on every schedulable node (`Running` in the fake and not drained
    by the twin), alternating a job with a seeded exponential idle gap of mean `mean(job_s) * (1 - u) / u`, so
    that each node is busy about `u` of the time it is schedulable. A job never starts on a node that is not
    `Running`, is drained, or is already claimed by the active check (requested, not yet begun); a job in
    progress when its node leaves `Running` for a reboot, a replacement, a move or `Failure` ends then.
    `slurm_bridge`: the controller's Slurm bridge runs (the real agent's sync, every `sync_interval_s` at a
    seeded phase) against the twin's Slurm: its drains and resumes decide where jobs may start.
    """

    busy_rate: Rate = 0.0
    job_s: tuple[Seconds, Seconds] = (3600.0, 3600.0)
    utilisation: Rate = 0.0
    slurm_bridge: bool = False
    sync_interval_s: Annotated[float, Field(ge=10.0, le=3600.0)] = 60.0

    @field_validator("job_s")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        if value[0] > value[1]:
            raise ValueError(f"the range [{value[0]}, {value[1]}] is reversed")
        return value

    @model_validator(mode="after")
    def _jobs_take_time(self) -> Workload:
        if self.utilisation and self.job_s[1] <= 0:
            raise ValueError("utilisation needs jobs that take time: job_s must end above 0")
        return self


class _Incident(_Strict):
    after_s: Seconds = 0.0  # virtual seconds from the start before the incident may fire


class HyperPodReplacesMidCheck(_Incident):
    """HyperPod replaces nodes in a running on-demand check on its own (its health agent found a fault)."""

    kind: Literal["hyperpod-replaces-mid-check"]
    nodes: Annotated[int, Field(ge=1, le=500)] = 1


class ClusterDeletedMidRound(_Incident):
    """The cluster is deleted while a round runs and its nodes are in the check."""

    kind: Literal["cluster-deleted-mid-round"]


class LambdaCrash(_Incident):
    """The next `times` invocations of a round step die after `after_writes` node writes (timeout, OOM)."""

    kind: Literal["lambda-crash"]
    function: RoundStep  # the construct id of the step's function
    after_writes: Annotated[int, Field(ge=0, le=10_000)] = 1
    times: Annotated[int, Field(ge=1, le=100)] = 1


class RedeployMidRound(_Incident):
    """`cdk deploy` while a round runs: the state machine is updated and every Lambda cold-starts."""

    kind: Literal["redeploy-mid-round"]


class LeaseExpiry(_Incident):
    """A live round's lease is found expired (as if the round had stalled) and Reconcile runs."""

    kind: Literal["lease-expiry"]


class ForeignCheck(_Incident):
    """Someone else (an operator in the console) starts a deep health check while none is active."""

    kind: Literal["foreign-check"]
    group: Annotated[str, Field(pattern=GROUP_NAME_PATTERN)]
    nodes: Annotated[int, Field(ge=1, le=500)] = 1
    # idle: while no check is active; ours: while the controller's check runs (what it meets depends on the
    # `second_check_request` reading: refused, merged into ours, or superseding ours)
    during: Literal["idle", "ours"] = "idle"


class MoveNodes(_Incident):
    """MoveClusterNodes: `nodes` Running nodes of `from_group` (not in a check) move to `to_group`, keeping their
    instance and logical ids (DetachInProgress -> AttachInProgress -> Running in the new group)."""

    kind: Literal["move-nodes"]
    from_group: Annotated[str, Field(pattern=GROUP_NAME_PATTERN)]
    to_group: Annotated[str, Field(pattern=GROUP_NAME_PATTERN)]
    nodes: Annotated[int, Field(ge=1, le=500)] = 1


class EksClusterCreated(_Incident):
    """An EKS-orchestrated HyperPod cluster is created after deploy, with `nodes` arrivals (continuous provisioning).
    The controller must ignore it under `clusters = "all"`: no SageMaker action on it, one alert."""

    kind: Literal["eks-cluster-created"]
    nodes: Annotated[int, Field(ge=1, le=500)] = 4


Incident = Annotated[
    HyperPodReplacesMidCheck
    | ClusterDeletedMidRound
    | LambdaCrash
    | RedeployMidRound
    | LeaseExpiry
    | ForeignCheck
    | MoveNodes
    | EksClusterCreated,
    Field(discriminator="kind"),
]


class Scenario(_Strict):
    version: Literal[1]
    name: str = "scenario"
    seed: int = 0
    horizon_s: Annotated[float, Field(gt=0, le=30 * 86400)]
    cluster: ClusterScenario
    groups: Annotated[tuple[GroupScenario, ...], Field(min_length=1)]
    hardware: Hardware = Hardware()
    check_duration_s: dict[CheckType, tuple[Seconds, Seconds]] = {
        "InstanceStress": (2700.0, 5400.0),
        "InstanceConnectivity": (300.0, 900.0),
        "MultiNodeTrainingValidation": (600.0, 1200.0),
    }
    faults: Faults = Faults()
    fidelity: Readings = Readings()
    workload: Workload = Workload()
    incidents: tuple[Incident, ...] = ()
    policy: dict[str, Any] = {}
    # Run to `horizon_s` even once every node has its verdict (what happens to passed nodes over time: revalidation).
    run_to_horizon: bool = False

    @field_validator("check_duration_s")
    @classmethod
    def _ranges_ordered(cls, ranges: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        for check, (lo, hi) in ranges.items():
            if lo > hi:
                raise ValueError(f"{check}: the range [{lo}, {hi}] is reversed")
        return ranges

    @field_validator("groups")
    @classmethod
    def _unique_groups(cls, groups: tuple[GroupScenario, ...]) -> tuple[GroupScenario, ...]:
        names = [g.name for g in groups]
        if len(set(names)) != len(names) or CONTROLLER_GROUP in names:
            raise ValueError('group names must be unique and not "controller" (the twin adds that group)')
        return groups

    @model_validator(mode="after")
    def _incidents_consistent(self) -> Scenario:
        names = {g.name for g in self.groups}
        crashing: set[str] = set()
        for i, incident in enumerate(self.incidents):
            if isinstance(incident, ForeignCheck) and incident.group not in names:
                raise ValueError(f"incidents.{i}.group: no group {incident.group!r} in groups")
            if isinstance(incident, MoveNodes):
                for key in ("from_group", "to_group"):
                    if getattr(incident, key) not in names:
                        raise ValueError(f"incidents.{i}.{key}: no group {getattr(incident, key)!r} in groups")
                if incident.from_group == incident.to_group:
                    raise ValueError(f"incidents.{i}.to_group: the same group as from_group")
                types = {g.name: g.instance_type for g in self.groups}
                if types.get(incident.from_group) != types.get(incident.to_group):  # NodeInstanceTypeMismatch
                    raise ValueError(f"incidents.{i}.to_group: another instance type than from_group")
            if isinstance(incident, LambdaCrash):
                if incident.function in crashing:  # one plan per function: use `times` for repeated crashes
                    raise ValueError(f"incidents.{i}.function: a second lambda-crash of {incident.function}")
                crashing.add(incident.function)
        faulty = self.hardware.faulty_nodes
        if faulty is not None and faulty.transient + faulty.persistent > self.nodes:
            raise ValueError(
                f"hardware.faulty_nodes: {faulty.transient + faulty.persistent} faulty of {self.nodes} nodes"
            )
        return self

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    def controller_config(self, base: dict[str, Any]) -> dict[str, Any]:
        """`base` (cdk.json's `hyperpod-dhc`) with `policy` merged over it, watching only this cluster."""
        merged = {**base, "clusters": [self.cluster.name]}
        for key, value in self.policy.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return merged


class ScenarioError(ValueError):
    """The scenario is invalid; the message names every offending key."""


def load_scenario(path: str | Path, base_config: dict[str, Any]) -> tuple[Scenario, dict[str, Any]]:
    """The scenario and the controller configuration it runs with."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ScenarioError(f"{path}: cannot read a JSON scenario: {err}") from None
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        raise ScenarioError(f"{path}: " + "; ".join(problems)) from None
    config = scenario.controller_config(base_config)
    try:
        parse_config(config)
    except ConfigError as err:
        raise ScenarioError(f"{path}: policy: {str(err).split(': ', 1)[-1]}") from None
    return scenario, config
