"""What the controller knows about a node's instance group: its policy, whether it is a worker group, HyperPod's
on-start checks for it, the operator's result patterns, and the settle and revisit times its cluster's measured
result-log lag gives it."""

from __future__ import annotations

from dataclasses import dataclass

from hyperpod_dhc.deephealth.domain.policy import GroupPolicy, Mode
from hyperpod_dhc.deephealth.evidence.rules import NO_OPERATOR_RULES, OperatorRules


@dataclass(frozen=True)
class GroupContext:
    """What the controller needs to know about a node's instance group."""

    policy: GroupPolicy
    worker: bool = True  # Slurm controller/login groups are never checked or recovered
    on_start_checks: tuple[str, ...] = ()  # HyperPod's OnStartDeepHealthChecks for the group
    rules: OperatorRules = NO_OPERATOR_RULES  # the operator patterns its nodes' records are classified with
    # The settle and revisit times the cluster's measured result-log lag gives this group's policy
    # (domain/readings.py); None: the policy's own, as before any lag was measured.
    measured_settle_s: float | None = None
    measured_revisit_s: float | None = None

    @property
    def settle_s(self) -> float:
        """How long after a node left its check its result lines are read."""
        return self.policy.log_settle_s if self.measured_settle_s is None else self.measured_settle_s

    @property
    def revisit_s(self) -> float:
        """How long a passed node's check window is read again for a late failure line."""
        return self.policy.revisit_s if self.measured_revisit_s is None else self.measured_revisit_s

    @property
    def watched(self) -> bool:
        return self.worker and self.policy.mode != Mode.OFF

    @property
    def isolating(self) -> bool:
        """The Slurm bridge drains the group's new nodes until their check passes (never a controller/login
        group's)."""
        return self.worker and self.policy.isolating

    @property
    def observe_only(self) -> bool:
        # A group with HyperPod's own on-start checks must not get a duplicate on-demand check.
        return bool(self.on_start_checks) or self.policy.mode == Mode.OBSERVE_ON_START
