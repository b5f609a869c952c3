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
Offset = Annotated[float, Field(ge=-86400.0, le=86400.0)]
SignedRange = tuple[Offset, Offset]  # [lo, hi] that may be negative (a clock behind)

BUSY_MESSAGE = (
    "A deep health check is already in progress for cluster {cluster}. Only one on-demand "
    "deep health check request can be active per cluster."
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BusyError(_Strict):
    """The error a second StartClusterHealthCheck gets under `second_check_request: reject` (undocumented)."""

    code: str = "ValidationException"
    message: str = BUSY_MESSAGE  # `{cluster}` is replaced by the cluster's name (nothing else is a placeholder)
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
    # Result log stream name: DeepHealthCheckResults/<instance id | opaque id per node and check | hostname |
    # NodeLogicalId>.
    result_stream: Literal["instance-id", "opaque", "hostname", "logical-id"] = "instance-id"
    # Line format: the fake's JSON lines; the on-node lines of the Slurm deep-health-checks page, trimmed
    # (`doc-plain`: one line per test, no progress line, the EFA line without its figures, the DCGM record on one
    # line: what the controller was first built on); or the page's lines verbatim (tests/corpus/aws_doc.py):
    # `doc-2024` (its 2024 rendering, one event per physical line), `doc-2026-lines` (the 2026 rendering, one event per
    # physical line: the DCGM record over three events, the EFA figures on a second, the failure JSON over five) and
    # `doc-2026-records` (the 2026 rendering, one event per record). Every EFA device writes its line.
    result_format: Literal["json", "doc-plain", "doc-2024", "doc-2026-lines", "doc-2026-records"] = "json"
    # When a node's lines are stamped: all at the check's end, or each when its test ran (stress-ng at the start,
    # DCGM 5 min before the end, the EFA devices one after another in the last 2 min), all shipped at the end.
    line_stamps: Literal["check-end", "test-time"] = "check-end"
    # The lag of failure lines alone (the JSON failure line, a DCGM record with a flag true, an EFA device that failed)
    # when it differs from the other lines' (`log_lag_s`): a node whose shipping is slow because it is faulty.
    failure_line_lag_s: Range | None = None
    # How far a node's clock runs from the real time (drawn per node and check; negative: behind): every line it
    # stamps is that much off.
    node_clock_skew_s: SignedRange = (0.0, 0.0)
    # EFA devices per instance type (the controller's table, deephealth/evidence/efa.py, for any type not named).
    efa_devices: dict[str, Annotated[int, Field(ge=0, le=64)]] = Field(default_factory=dict)
    # A stream that belongs to no node (anyone with the instance role may write into the log group): at each check's
    # first result, an anonymous error line and a forged summary naming one of the check's nodes in a field.
    foreign_lines: bool = False
    # Lines every node's check writes besides its results (a real cluster's unrecognised shapes, as `hpdhc readings
    # --as-fidelity` exports them), at level info.
    extra_lines: tuple[str, ...] = ()
    # A failing node's failure line: the JSON error line (the page's one example, naming no instance), the same
    # line at level warn, or none (the failure then shows only in the DCGM summary, if at all).
    failure_line: Literal["error", "warn", "none"] = "error"
    # doc-plain: the test a faulty node fails. dcgm: its DCGM summary says replacementRequired (cured by a
    # replacement) or rebootRequired (by a reboot). efa: DCGM says both false and its last EFA device's line says
    # failed, the other device's passed (a faulty node's lines then prove every test but one device's).
    faulty_test: Literal["dcgm", "efa"] = "dcgm"
    # Pass lines: written, or none at all (the page shows no pass line for the CloudWatch stream): a healthy
    # node writes nothing, a faulty one only its failure evidence.
    pass_line: Literal["yes", "none"] = "yes"
    # Where a result line names the instance: an `instance_id` field, the message text, or nowhere.
    result_line_instance: Literal["field", "message", "none"] = "none"
    # Lines per node and check: one verdict line, or one line per test (stress-ng, DCGM, EFA), each ingested with
    # its own lag, so a faulty node's pass lines may be readable before its error line (DCGM and EFA output has
    # many lines [D-DHC]; how HyperPod condenses it is not documented).
    result_lines: Literal["one", "per-test"] = "one"
    # CloudWatch ingestion: a result line becomes readable this long after its timestamp (the check's end).
    log_lag_s: Range = (0.0, 0.0)
    # Node status after a failed on-demand check under NodeRecovery=None. Failed (the API model's doc string,
    # where the enum says Failure) and DeepHealthCheckFailed (cf. the EKS label `deep-health-check-status:
    # Failed`) are outside the enum; like DeepHealthCheckInProgress they isolate the node until rebooted/replaced.
    failed_status: Literal["Running", "DeepHealthCheckInProgress", "Failure", "Failed", "DeepHealthCheckFailed"] = (
        "Running"
    )
    # A failed node left isolated (the three statuses above) keeps its DeepHealthCheck operation InProgress
    # until someone reboots or replaces it ("remains isolated": whether the operation waits is not documented).
    isolated_holds_operation: bool = False
    # Under failed_status Failure (and after a transient launch failure): Failure -> HyperPod retries with a
    # new instance after this long.
    failure_retry_s: Range = (600.0, 600.0)
    # Whether HyperPod retries a node out of Failure by itself at all ([D-CPE] says so; an AWS sample of July
    # 2026 says it does not): false leaves the node in Failure until someone reboots or replaces it.
    failure_retried: bool = True
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
    # InstanceConnectivity: each node also writes, into its own stream, one pass line per peer of its
    # configuration naming that peer (an NCCL pair test's output; adversarial: never evidence about the peer).
    peer_lines: bool = False
    # Nodes answer to an agent-network address ListClusterNodes does not list (192.168.x.y, stable per
    # instance): stream `hostname` uses it, and every result line ends " host: ip-192-168-x-y".
    foreign_hostnames: bool = False
    # InstanceConnectivity's outcome is one anonymous NCCL summary line per configuration (`NcclNodes: 2`
    # summaries name no node) in its own opaque stream, GPU faults aside; per-node lines vouch only for the rest.
    nccl_summary: bool = False

    @field_validator("log_lag_s", "failure_retry_s", "vanish_s", "check_start_delay_s", "node_clock_skew_s")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        return _ordered(value)

    @field_validator("failure_line_lag_s")
    @classmethod
    def _ordered_or_none(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        return None if value is None else _ordered(value)


def _ordered(value: tuple[float, float]) -> tuple[float, float]:
    if value[0] > value[1]:
        raise ValueError(f"the range [{value[0]}, {value[1]}] is reversed")
    return value
