"""What one pass of the Slurm bridge did (`SyncResult`: hyperpod_dhc.hpdhc.sync's pass and hyperpod_dhc.hpdhc.apply's
writes fill it in), and what stopped it, as the agent's exit code (hyperpod_dhc.hpdhc.bridge exits with it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperpod_dhc.hpdhc.client import Json
from hyperpod_dhc.hpdhc.lock import LockPlan

# What stopped a pass, as the agent's exit code (an admin, or systemd's RestartPreventExitStatus, tells them apart).
EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_AUTH, EXIT_API, EXIT_SLURM, EXIT_CONFIG, EXIT_LOCKED = range(8)


@dataclass
class SyncResult:
    """What one pass did (or, dry, would do): the updates (a tuple of nodes -> arguments), the occupancy
    reported, the nodes held by someone else's claim, and what went wrong (`failure`: the kind that stopped it)."""

    applied: dict[str, list[str]] = field(default_factory=dict)  # node -> arguments
    commands: list[list[str]] = field(default_factory=list)  # each `scontrol` write run (or, dry, to run)
    reported: list[Json] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    failure: int = EXIT_OK  # EXIT_AUTH, EXIT_API, EXIT_SLURM when the pass could not be made
    interval_s: float | None = None  # the controller's suggested sync_interval_s
    stale: bool = False  # the controller's answer was older than the document applied last: not applied
    lock: LockPlan | None = None  # the lock as this pass planned it
    writes: int = 0  # scontrol writes slurmctld took
    refused: int = 0  # scontrol writes slurmctld refused
