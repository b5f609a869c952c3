"""Exceptions whose class names are the contract with the round workflow's ASL `Retry`/`Catch`.

Keep these names in step with `infra/statemachines/check_round.asl.json`.
"""


class Throttled(Exception):
    """A control-plane call was throttled; the workflow retries with back-off."""


class TransientError(Exception):
    """A 5xx or network failure; the workflow retries with back-off."""


class ClusterBusy(Exception):
    """Another deep health check is active on the cluster (one on-demand check per cluster)."""


class ClusterNotFound(Exception):
    """The cluster no longer exists (deleted, or never did)."""


class StaleRecord(Exception):
    """A node record changed under us (optimistic lock); re-read and re-decide."""


class LeaseLost(Exception):
    """This round no longer holds its cluster's lease (superseded or expired and taken)."""
