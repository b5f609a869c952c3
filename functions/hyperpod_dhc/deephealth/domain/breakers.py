"""A cluster's breaker and bad-capacity holds as stored (one DynamoDB item per cluster, versioned), and an
operator's reset of them (kept, for the audit)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hyperpod_dhc.deephealth.domain.policy import GROUP_NAME_PATTERN

RESET_LIMIT = 20  # resets kept on the item


class Trip(BaseModel):
    at: float
    reason: str
    trigger: str | None = None


class Reset(BaseModel):
    at: float
    # "breaker", or "capacity-hold" with `group` set. (Entries written before `group` existed hold "cluster" or
    # the group's name here.)
    scope: str
    by: str
    reason: str
    group: str | None = None


class SafetyState(BaseModel):
    """A cluster's breaker and bad-capacity holds (one DynamoDB item per cluster, versioned)."""

    cluster: str
    # The cluster's id (its ARN's last part): a cluster deleted and recreated under the same name is another
    # cluster, whose breaker, holds and budgets start afresh.
    cluster_id: str | None = None
    breaker: Trip | None = None  # open while set
    capacity_holds: dict[str, Trip] = Field(default_factory=dict)  # instance group -> hold
    # Evidence before a reset does not count again, or the breaker would re-trip on the same failures.
    breaker_reset_at: float = 0.0
    capacity_reset_at: dict[str, float] = Field(default_factory=dict)
    resets: list[Reset] = Field(default_factory=list)
    version: int = 0


class BreakerReset(BaseModel):
    """POST /clusters/{cluster}/breakers/reset: which breaker an operator closes, and why (kept for the audit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str | None = Field(
        default=None,
        pattern=GROUP_NAME_PATTERN,
        description="an instance group: lift its bad-capacity hold; absent: close the cluster's breaker",
    )
    reason: str = Field(min_length=3, max_length=500)

    @field_validator("reason")
    @classmethod
    def _printable(cls, reason: str) -> str:
        # It reaches logs and notifications: no control, bidirectional-override or zero-width characters (Cc, Cf,
        # separators other than the space), which could hide or reorder what an operator reads.
        if not reason.isprintable():
            raise ValueError("reason must be printable text: no control, bidirectional or zero-width characters")
        return reason


def reset(state: SafetyState, group: str | None, now: float, by: str, reason: str) -> SafetyState:
    """Close the breaker (`group` None) or lift a group's bad-capacity hold; the reset is kept."""
    scope = "breaker" if group is None else "capacity-hold"
    entry = Reset(at=now, scope=scope, group=group, by=by, reason=reason)
    update: dict[str, Any] = {"resets": [*state.resets, entry][-RESET_LIMIT:]}
    if group is None:
        update |= {"breaker": None, "breaker_reset_at": now}
    else:
        update |= {
            "capacity_holds": {g: t for g, t in state.capacity_holds.items() if g != group},
            "capacity_reset_at": {**state.capacity_reset_at, group: now},
        }
    return state.model_copy(update=update)
