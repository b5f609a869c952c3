"""What Slurm should make of a node, from its record: the Slurm bridge's desired state, and the `scontrol`
changes that get a node there.

A new node takes no job before its check passes: until then it is drained with a reason the controller owns
(`hpdhc: ...`), and only such drains are ever resumed; anyone else's drain (an admin's, HyperPod's
`Action:Reboot|Replace`) is left alone. A drain never kills a running job: Slurm lets it finish. The node
feature `HealthCheck:InProgress|Passed|Failed|Skipped` follows the awsome-distributed-training HyperPod
health_check sample's contract, so its tooling and ours read the same labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from deephealth.domain.nodes import NodeRecord, NodeState, Verdict

OWNED_PREFIX = "hpdhc: "
AWAITING = OWNED_PREFIX + "awaiting deep health check"
RUNNING_CHECK = OWNED_PREFIX + "deep health check running"
FEATURE_KEY = "HealthCheck"


class Feature(StrEnum):
    IN_PROGRESS = "HealthCheck:InProgress"
    PASSED = "HealthCheck:Passed"
    FAILED = "HealthCheck:Failed"
    SKIPPED = "HealthCheck:Skipped"  # the sample's word for inconclusive: no remediation


@dataclass(frozen=True)
class Desired:
    """A node's desired Slurm state: drained with `reason` (owned), or not drained by us (`reason` None)."""

    reason: str | None
    feature: Feature


@dataclass(frozen=True)
class Actual:
    """A node as `scontrol show node` reports it."""

    drained: bool  # DRAIN (draining or drained)
    reason: str | None
    features: tuple[str, ...]  # ActiveFeatures

    @property
    def owned(self) -> bool:
        return bool(self.reason and self.reason.startswith(OWNED_PREFIX))


def desired_state(record: NodeRecord, isolate_until_checked: bool) -> Desired | None:
    """What Slurm should make of the node now; None: nothing (gone, or a dry-run group that only records)."""
    state = record.state
    if state in (NodeState.GONE, NodeState.SHADOWED):
        return None
    if state == NodeState.PASSED:
        return Desired(None, Feature.PASSED)
    if state in (NodeState.RECOVERY_DUE, NodeState.RECOVERING, NodeState.FAILED, NodeState.QUARANTINED):
        return Desired(f"{OWNED_PREFIX}{state.value} after a failed deep health check", Feature.FAILED)
    if state == NodeState.INCONCLUSIVE:
        return Desired(f"{OWNED_PREFIX}deep health check inconclusive", Feature.SKIPPED)
    # Pending or in a check: a node whose current instance passed its last check keeps taking jobs while it is
    # re-checked (revalidation); one never validated is isolated if its group says so.
    if _validated(record) or not isolate_until_checked:
        return Desired(None, Feature.PASSED if _validated(record) else Feature.IN_PROGRESS)
    return Desired(RUNNING_CHECK if state == NodeState.CHECKING else AWAITING, Feature.IN_PROGRESS)


def _validated(record: NodeRecord) -> bool:
    """The node's current instance passed its last check."""
    mine = [o for o in record.outcomes if o.instance_id and o.instance_id == record.instance_id]
    return bool(mine) and mine[-1].verdict == Verdict.PASSED


def changes(desired: Desired, actual: Actual) -> list[str]:
    """`scontrol update` arguments (after `NodeName=<node>`) that take `actual` to `desired`; [] when it is there.

    Only our own drains are resumed or re-worded; a drain someone else set is never touched (their reason stays),
    and features other than `HealthCheck:*` are kept."""
    out: list[str] = []
    if desired.reason is not None:
        if not actual.drained or (actual.owned and actual.reason != desired.reason):
            out += ["State=DRAIN", f"Reason={desired.reason}"]
    elif actual.drained and actual.owned:
        out.append("State=RESUME")
    kept = [f for f in actual.features if not f.startswith(FEATURE_KEY + ":")]
    features = (*kept, desired.feature.value)
    if set(features) != set(actual.features):
        listed = ",".join(features)
        out += [f"AvailableFeatures={listed}", f"ActiveFeatures={listed}"]
    return out
