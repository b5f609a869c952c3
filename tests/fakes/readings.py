"""Readings of what HyperPod does not document: one key per undocumented behaviour the controller can notice.

The fake plays whichever reading it is given; the defaults are the fake's historical choices, so a scenario
without a `fidelity` block behaves as before. Sources and what the controller does under each reading:
docs/FIDELITY.md. Key names are a contract with the scenario files (`fidelity` block) and `make fidelity`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Seconds = Annotated[float, Field(ge=0.0, le=86400.0)]
Range = tuple[Seconds, Seconds]  # [lo, hi], drawn uniformly (seeded)

BUSY_MESSAGE = (
    "A deep health check is already in progress for cluster {cluster}. Only one on-demand "
    "deep health check request can be active per cluster."
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BusyError(_Strict):
    """The error a second StartClusterHealthCheck gets under `second_check_request: reject` (undocumented)."""

    code: str = "ValidationException"
    message: str = BUSY_MESSAGE  # `{cluster}` is replaced by the cluster's name
    status: Annotated[int, Field(ge=400, le=599)] = 400


class AutoRecovery(_Strict):
    """What HyperPod does to a node that failed an on-demand check under NodeRecovery=Automatic."""

    reboot_fraction: Rate = 0.0  # the rest are replaced
    delay_s: Range = (0.0, 0.0)  # check end -> HyperPod starts its reboot or replacement
    reboot_s: Range = (600.0, 600.0)  # a HyperPod reboot: Pending for this long (3P observed 1-3 min)

    @field_validator("delay_s", "reboot_s")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        return _ordered(value)


class UnsupportedTypes(_Strict):
    """Instance types HyperPod will not deep-health-check (fnmatch patterns, e.g. "ml.trn*", "ml.m*")."""

    patterns: tuple[str, ...] = ()
    behaviour: Literal["reject", "skip"] = "reject"  # the whole request fails, or those nodes are skipped silently


class Readings(_Strict):
    # Result log stream name: DeepHealthCheckResults/<instance id | opaque id per node and check | hostname>.
    result_stream: Literal["instance-id", "opaque", "hostname"] = "instance-id"
    # Where a result line names the instance: an `instance_id` field, the message text, or nowhere.
    result_line_instance: Literal["field", "message", "none"] = "none"
    # Lines per node and check: one verdict line, or one line per test (stress-ng, DCGM, EFA), each ingested with
    # its own lag, so a faulty node's pass lines may be readable before its error line (DCGM and EFA output has
    # many lines [D-DHC]; how HyperPod condenses it is not documented).
    result_lines: Literal["one", "per-test"] = "one"
    # CloudWatch ingestion: a result line becomes readable this long after its timestamp (the check's end).
    log_lag_s: Range = (0.0, 0.0)
    # Node status after a failed on-demand check under NodeRecovery=None.
    failed_status: Literal["Running", "DeepHealthCheckInProgress", "Failure"] = "Running"
    # Under failed_status Failure (and after a transient launch failure): Failure -> HyperPod retries with a
    # new instance after this long.
    failure_retry_s: Range = (600.0, 600.0)
    # A StartClusterHealthCheck while another is active: refused (busy_error), merged into it, or supersedes it
    # (the old operation becomes Superseded and its unfinished nodes return to Running with no result).
    second_check_request: Literal["reject", "merge", "supersede"] = "reject"
    busy_error: BusyError = BusyError()
    # Status of a node queued behind a running job (then skipped after 10 min with no result line).
    queued_status: Literal["Running", "DeepHealthCheckInProgress"] = "Running"
    auto_recovery: AutoRecovery = AutoRecovery()
    unsupported_types: UnsupportedTypes = UnsupportedTypes()
    # A launch (a new node or a replacement) fails: Failure, then HyperPod retries with a new instance.
    transient_failure_rate: Rate = 0.0
    # A node in Failure waiting for HyperPod's retry is missing from ListClusterNodes for this long.
    vanish_s: Range = (0.0, 0.0)
    # What ListClusterNodes' CreationTimeAfter/Before compare: the instance's LaunchTime or the logical node's creation.
    creation_time_filter: Literal["launch", "logical"] = "launch"
    # Request accepted -> a node shows DeepHealthCheckInProgress (drawn per node).
    check_start_delay_s: Range = (30.0, 30.0)
    # EventBridge detail's EventDetails.EventMetadata: populated, or null (ListClusterEvents stays populated).
    event_metadata: Literal["populated", "null"] = "populated"
    # Replacement event descriptions: the fake's historical text, or the events reference's wording.
    event_wording: Literal["fake", "reference"] = "fake"

    @field_validator("log_lag_s", "failure_retry_s", "vanish_s", "check_start_delay_s")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        return _ordered(value)


def _ordered(value: tuple[float, float]) -> tuple[float, float]:
    if value[0] > value[1]:
        raise ValueError(f"the range [{value[0]}, {value[1]}] is reversed")
    return value
