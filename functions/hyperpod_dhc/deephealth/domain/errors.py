"""Exceptions whose class names are the contract with the round workflow's ASL `Retry`/`Catch`.

Keep these names in step with `infra/hyperpod_dhc/infra/statemachines/check_round.asl.json`.
"""


class Throttled(Exception):
    """A control-plane call was throttled; the workflow retries with back-off."""


class TransientError(Exception):
    """A 5xx or network failure; the workflow retries with back-off."""


class RecoveryFirst(Exception):
    """A check operation is active and a node due for recovery still shows DeepHealthCheckInProgress: isolated
    after failing, it may be what holds the operation open, so the round recovers it before asking again (the
    workflow's "Recover before check")."""


class ClusterBusy(Exception):
    """Another deep health check is active on the cluster (one on-demand check per cluster). `refusal`: HyperPod's
    (code, message) when it said so itself, for the cluster's readings."""

    def __init__(self, message: str, refusal: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


class ClusterNotFound(Exception):
    """The cluster no longer exists (deleted, or never did)."""


class ClusterNotSlurm(ClusterNotFound):
    """The cluster exists but is not orchestrated by Slurm (EKS, or an orchestrator this code does not know): to the
    controller it is not there. Every function treats it as a cluster not found; one alert says so."""

    def __init__(self, cluster: str, orchestrators: tuple[str, ...]) -> None:
        super().__init__(
            f"cluster {cluster} is orchestrated by {', '.join(orchestrators)}, not Slurm: hyperpod-dhc drives Slurm "
            "clusters only"
        )
        self.cluster = cluster
        self.orchestrators = orchestrators


class StaleRecord(Exception):
    """A node record changed under us (optimistic lock); re-read and re-decide."""


class LeaseLost(Exception):
    """This round no longer holds its cluster's lease (superseded or expired and taken)."""


class CheckRefused(Exception):
    """HyperPod refused a StartClusterHealthCheck while no check was active: the request itself (an instance type
    it will not check, ...). Start check takes the refused group's nodes out of the round; were it to reach the
    workflow, the round would be abandoned (States.ALL)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
