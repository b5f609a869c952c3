"""Check rounds: which pending nodes go into the next check, the request that checks them, and when to
poll next. One round per cluster at a time, because HyperPod allows one active on-demand check per cluster.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypedDict, TypeVar, get_args

from pydantic import BaseModel, ConfigDict

from hyperpod_dhc.deephealth.domain.group_context import GroupContext
from hyperpod_dhc.deephealth.domain.listing_windows import ListingWindow
from hyperpod_dhc.deephealth.domain.nodes import IN_PROGRESS, NodeRecord, NodeSnapshot, NodeState, round_seq_of

# API limits from the botocore model, which botocore itself does not enforce client-side.
MAX_CONFIGS_PER_CHECK = 99
MAX_IDS_PER_CONFIG = 500
MAX_NODES_PER_ACTION_CALL = 25
MULTI_NODE_CHECKS = frozenset({"InstanceConnectivity", "MultiNodeTrainingValidation"})
# Lower ends of the documented durations: polling speeds up from 80 % of this onwards.
EXPECTED_CHECK_S = {
    "InstanceStress": 45 * 60,
    "InstanceConnectivity": 5 * 60,
    "MultiNodeTrainingValidation": 10 * 60,
}
FIRST_POLL_S = 90  # the first look confirms the nodes entered the check
MAX_WAIT_S = 3600
LEASE_TTL_S = 6 * 3600  # renewed on every step; a dead round's lease frees itself
# A poll lists only the round's members (one launch-time window, usually one page). It looks at the whole cluster
# when an event said a node changed since its last whole look, at most this often...
FULL_OBSERVE_S = 300
# ...and at least this often whatever the events say (one can be lost), as a resting cluster is listed whole
# (quiet_sweep.WHOLE_SWEEP_S): the members are listed on their own, and Reconcile still looks for arrivals.
QUIET_OBSERVE_S = 3600
# Start check lists only the claimed members' windows when the Claim's whole look is younger than this and nothing
# changed since (a retry after ClusterBusy waits longer and looks again).
CLAIM_LOOK_S = 60
# HyperPod waits up to 10 minutes for a running job before it skips a node; allow for our poll spacing.
SKIP_GRACE_S = 15 * 60
# A node whose lines were due but are not all there yet is looked at again this often by another round's polls.
LATE_LINES_LOOK_S = 120
DEFAULT_POLL_S = 60  # a cluster whose groups are unknown (none described) is polled this often
# A round's polls ask HyperPod whether its check operation still runs at most this often: the answer only moves a
# node that stays in DeepHealthCheckInProgress past its checks' time (isolated?) or was never seen in it
# (skipped?), and a failure line judges the first kind without it.
OPERATIONS_LOOK_S = 600
# Between whole looks, a poll lists the round's members only when something says one of them moved: new result
# lines in the cluster's log (a node writes them as it leaves its check), or this long since the last listing (a
# node that leaves its check silently, or whose lines are slow).
MEMBERS_LIST_S = 600

# The check round's steps in workflow order: each is one Lambda (its construct id), handler module and ASL Task.
RoundStep = Literal["ClaimRound", "StartCheck", "PollCheck", "RecoverNodes", "FinishRound"]
ROUND_STEPS: tuple[RoundStep, ...] = get_args(RoundStep)

T = TypeVar("T")


class RoundState(BaseModel):
    """The round workflow's whole payload: identity and timers only (nodes live in DynamoDB)."""

    model_config = ConfigDict(extra="ignore")

    cluster: str
    round_seq: int
    round_id: str = ""
    claimed: int = 0
    recovery_due: int = 0
    gather_s: int = 0
    gathered: bool = False
    started_at: float | None = None
    wait_s: int = 0
    polls: int = 0
    windows: list[ListingWindow] | None = None  # where the members are listed; None: list the whole cluster
    observed_at: float | None = None  # the last time a step observed the whole cluster
    # When nodes another round left settling have their result lines due: a poll then judges them (`unchanged_since`).
    judge_at: float | None = None
    operations_at: float | None = None  # the last time a poll asked ListClusterOperations
    listed_at: float | None = None  # the last time a poll listed the members (or the whole cluster)
    lines_from: float | None = None  # where the members' result lines begin (epoch s, skew allowed)
    lines_seen: int | None = None  # result-log events from `lines_from` on, counted just before that listing
    members_due_at: float | None = None  # when the next member seen out of its check has its lines settled
    acting: int = 0  # nodes being recovered at the last whole look (`acting_on`): the polls look at them too
    done: bool = False
    error: dict[str, Any] | None = None  # set by the workflow's Catch before "Abandon round"


class CheckConfiguration(TypedDict):
    """One entry of StartClusterHealthCheck's DeepHealthCheckConfigurations."""

    InstanceGroupName: str
    InstanceIds: list[str]
    DeepHealthChecks: list[str]


def round_name(cluster: str, seq: int) -> str:
    """Deterministic execution name: a duplicate start of the same round is a no-op in Standard."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "-", cluster)[:63]
    return f"{safe}-r{seq:06d}"


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def claimable(records: Iterable[NodeRecord], groups: dict[str, GroupContext]) -> list[NodeRecord]:
    """Pending, ready worker nodes, oldest first.

    Groups with HyperPod's on-start checks included: their new nodes are watched (never pending), so a pending
    node of such a group is one HyperPod will not check again (after the controller's reboot, a health event,
    a skipped check) and gets an on-demand check like any other.
    """
    out = [
        r
        for r in records
        if r.state == NodeState.PENDING
        and r.ready_at is not None
        and (ctx := groups.get(r.group)) is not None
        and ctx.watched
    ]
    return sorted(out, key=lambda r: (r.ready_at or 0, r.key))


def watchable(records: Iterable[NodeRecord], round_seq: int | None = None) -> list[NodeRecord]:
    """Nodes in HyperPod's on-start check that no live round watches: a round takes them as members and polls
    them as it polls its own check (no request: HyperPod checks them), so their verdicts come a poll and a settle
    time after their check ends, not at Reconcile's next looks. A round that ended leaves its own to the next;
    `round_seq` None: no round is live, so every round has ended."""
    return [
        r
        for r in records
        if r.state == NodeState.CHECKING
        and r.observe_only
        and (r.round_id is None or round_seq is None or (seq := round_seq_of(r.round_id)) is None or seq < round_seq)
    ]


def select_for_round(candidates: list[NodeRecord], max_nodes: int) -> list[NodeRecord]:
    """Take candidates in order while the request stays within 99 configurations of 500 ids."""
    chosen: list[NodeRecord] = []
    per_group: dict[str, int] = {}
    for record in candidates:
        if len(chosen) >= max_nodes:
            break
        counts = {**per_group, record.group: per_group.get(record.group, 0) + 1}
        if sum(math.ceil(n / MAX_IDS_PER_CONFIG) for n in counts.values()) > MAX_CONFIGS_PER_CHECK:
            continue
        per_group = counts
        chosen.append(record)
    return chosen


def gather_delay(candidates: list[NodeRecord], groups: dict[str, GroupContext], now: float) -> int:
    """Seconds to wait before claiming: while nodes keep arriving (each within `gather_quiet_s` of the last) and
    the oldest has waited less than `gather_window_s`.

    One active check per cluster makes a small round expensive: every node that arrives while it runs waits for
    its slowest node. So a round gathers while arrivals are dense, and starts once they pause or the oldest has
    waited the window; a lone node waits only `gather_quiet_s`. Called again after each wait, so a burst that
    goes on is followed; the window bounds it.
    """
    if not candidates:
        return 0
    ready = [now if r.ready_at is None else r.ready_at for r in candidates]
    policy = groups[candidates[0].group].policy  # candidates come oldest first
    until = min(ready[0] + policy.gather_window_s, max(ready) + policy.gather_quiet_s)
    return max(0, math.ceil(until - now))


def check_over(members: Sequence[NodeRecord], records: Iterable[NodeRecord]) -> bool:
    """Whether a round may end before its members are judged: every member is out of the check and only waits for
    its result line to settle, so HyperPod's check is over, and the next round need not wait out the settle time
    (its looks judge these nodes when their lines are due). Not while a failed node still shows
    DeepHealthCheckInProgress (a reading the docs allow): it can only be told isolated from busy, and recovered,
    once no check operation runs, so the next check must wait for it."""
    if not members or any(r.check_left_at is None for r in members):
        return False
    return not any(
        r.status == IN_PROGRESS
        and (r.state == NodeState.RECOVERY_DUE or (r.state == NodeState.CHECKING and r.check_left_at is not None))
        for r in records
    )


def group_checks(checks: Sequence[str], nodes_in_group: int) -> list[str]:
    """Multi-node checks need at least 2 nodes of the group; a lone node gets the single-node checks."""
    kept = [c for c in checks if nodes_in_group >= 2 or c not in MULTI_NODE_CHECKS]
    return kept or ["InstanceStress"]


def build_check_request(claimed: list[NodeRecord], groups: dict[str, GroupContext]) -> list[CheckConfiguration]:
    """DeepHealthCheckConfigurations for one StartClusterHealthCheck, chunked to the API limits.

    One configuration per (group, check types): the group's policy, or an operator's on-demand choice.
    """
    by_config: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for record in claimed:
        if record.instance_id:
            checks = record.requested_checks or groups[record.group].policy.checks
            by_config.setdefault((record.group, tuple(checks)), []).append(record.instance_id)
    configs: list[CheckConfiguration] = []
    for (group, checks), ids in sorted(by_config.items()):
        kept = group_checks(checks, len(ids))
        configs += [
            {"InstanceGroupName": group, "InstanceIds": part, "DeepHealthChecks": kept}
            for part in chunks(sorted(ids), MAX_IDS_PER_CONFIG)
        ]
    if len(configs) > MAX_CONFIGS_PER_CHECK:
        raise ValueError(f"{len(configs)} configurations exceed the limit of {MAX_CONFIGS_PER_CHECK}")
    return configs


def expected_check_s(configs: list[CheckConfiguration]) -> int:
    return max((expected_for(cfg["DeepHealthChecks"]) for cfg in configs), default=0)


def expected_for(checks: Iterable[str]) -> int:
    """How long a node's checks of these types take, as HyperPod documents them."""
    return sum(EXPECTED_CHECK_S[c] for c in checks)


def check_overdue(created_at: float | None, checks: Iterable[str], now: float) -> bool:
    """A check operation that may hold checks of these types has stayed InProgress too long: longer than twice the
    documented lower end of its checks (HyperPod's own ranges reach about that) plus HyperPod's wait for jobs."""
    return created_at is not None and now - created_at > 2 * expected_for(checks) + SKIP_GRACE_S


# -- the round's clock: when a node's result lines are read, and when a round looks again -------------------
def settled(record: NodeRecord, settle_s: float, now: float) -> bool:
    """The one settle rule: a node's result lines are read `settle_s` after the look that found it out of its
    check (CloudWatch ingests them late; `settle_s` follows the lag the cluster was measured to have)."""
    return record.check_left_at is not None and now - record.check_left_at >= settle_s


def lines_due(
    record: NodeRecord, snapshot: NodeSnapshot | None, now: float, settle_s: float, expected_s: float
) -> bool:
    """Whether a checking node's result lines are read in a look at `now`: it has settled, or it is overdue in its
    check (below)."""
    if record.check_left_at is not None:
        return settled(record, settle_s, now)
    return overdue(record, snapshot, now, expected_s + settle_s)


def overdue(record: NodeRecord, snapshot: NodeSnapshot | None, now: float, expected_s: float) -> bool:
    """The node has shown `DeepHealthCheckInProgress` for longer than its checks take: it may be isolated after a
    failure while HyperPod's operation stays open, so its lines are read anyway (a failure line fails it)."""
    return (
        snapshot is not None
        and snapshot.status == IN_PROGRESS
        and record.seen_in_progress
        and record.check_left_at is None
        and record.check_started_at is not None
        and now - record.check_started_at >= expected_s
    )


def settling_elsewhere(
    records: Iterable[NodeRecord], groups: dict[str, GroupContext], round_id: str, now: float
) -> float | None:
    """When a poll should next judge nodes out of another check (an earlier round's, or HyperPod's on-start
    check; `unchanged_since` says whether on a new whole look): the earliest `check_left_at + settle_s` still
    ahead of `now` among the checking nodes that are not this round's, or, for one whose lines were due and that
    still waits (some tests' lines are late), a look LATE_LINES_LOOK_S from now."""
    due = []
    for r in records:
        group = groups.get(r.group)
        if r.state != NodeState.CHECKING or r.round_id == round_id or r.check_left_at is None or group is None:
            continue
        settled_at = r.check_left_at + group.settle_s
        due.append(settled_at if settled_at > now else now + LATE_LINES_LOOK_S)
    return min(due, default=None)


def members_due_at(members: Sequence[NodeRecord], groups: dict[str, GroupContext], now: float) -> float | None:
    """When the next member found out of its check has its lines settled (`settled`), after `now`; None: none
    will (a member already settled and still waiting has late lines: new lines or MEMBERS_LIST_S bring it)."""
    due = [
        r.check_left_at + groups[r.group].settle_s for r in members if r.check_left_at is not None and r.group in groups
    ]
    return min((t for t in due if t > now), default=None)


MembersLook = Literal["list", "judge", "none"]


def members_look(state: RoundState, lines: int | None, changed_at: float | None, now: float) -> MembersLook:
    """What a poll between whole looks does about the round's members: not list them while nothing can have moved.
    A member leaves its check writing result lines (`lines`, the events counted from `state.lines_from`, changed
    since the last listing): "list". Its lines settle (`members_due_at`): "judge" it, on the status the listing
    that found it out of its check showed, when nothing said anything moved since (no new lines, no event:
    `changed_at`), or "list" if something did. MEMBERS_LIST_S after the last listing, for one that leaves
    silently: "list". Only a listing finds a node out of its check: judging changes no other."""
    if state.listed_at is None or lines is None or lines != state.lines_seen:
        return "list"
    if now - state.listed_at >= MEMBERS_LIST_S:
        return "list"
    if state.members_due_at is None or now < state.members_due_at:
        return "none"
    return "list" if changed_at is not None and changed_at >= state.listed_at else "judge"


def unchanged_since(looked_at: float | None, changed_at: float | None) -> bool:
    """Whether a whole look at `looked_at` still tells the cluster's statuses: no event Intake stamped as a change
    came since (`changed_at`). A round's polls judge the nodes another check left settling on it (a whole look ends
    each round and starts the next, and found them out of that check); Start check lists only the members when
    the Claim's is that fresh (`CLAIM_LOOK_S`). Only a look finds a node out of its check: this changes no other."""
    return looked_at is not None and (changed_at is None or changed_at < looked_at)


def whole_look_due(observed_at: float | None, changed_at: float | None, acting: bool, now: float) -> bool:
    """Whether a live round's poll looks at the whole cluster rather than only its members: nothing outside them
    can have changed unless an event said so (`changed_at`) or a node outside them is being recovered (`acting`:
    a reboot or replacement ends with no event the controller is sure to get); else now and then, in case an event
    was lost (QUIET_OBSERVE_S)."""
    if observed_at is None:
        return True
    since = now - observed_at
    changed = acting or (changed_at is not None and changed_at >= observed_at)
    return since >= QUIET_OBSERVE_S or (changed and since >= FULL_OBSERVE_S)


def acting_on(records: Iterable[NodeRecord]) -> int:
    """How many nodes are being recovered, or are due to be: their next state comes from a look, not an event."""
    return sum(1 for r in records if r.state in (NodeState.RECOVERING, NodeState.RECOVERY_DUE))


def operations_look_due(asked_at: float | None, now: float) -> bool:
    """Whether a poll may ask about the cluster's check operation (when a verdict hangs on it)."""
    return asked_at is None or now - asked_at >= OPERATIONS_LOOK_S


def poll_interval(groups: dict[str, GroupContext]) -> int:
    """A round polls as often as its most demanding group asks."""
    return min((g.policy.poll_interval_s for g in groups.values()), default=DEFAULT_POLL_S)


def wake_for(wait: int, judge_at: float | None, now: float) -> int:
    """`wait`, cut short to wake when nodes another round left settling are due (`judge_at`), and never below 1 s."""
    if judge_at is None:
        return wait
    return max(1, min(wait, math.ceil(judge_at - now)))


def split_dry_run(
    records: Iterable[NodeRecord], groups: dict[str, GroupContext]
) -> tuple[list[NodeRecord], list[NodeRecord]]:
    """(dry-run groups' nodes, which only record the check they would get; the others, which get one)."""
    records = list(records)
    return [r for r in records if groups[r.group].policy.dry_run], [
        r for r in records if not groups[r.group].policy.dry_run
    ]


def next_look(
    members: Sequence[NodeRecord],
    groups: dict[str, GroupContext],
    started_at: float,
    now: float,
    expected_s: int,
    judge_at: float | None,
) -> int:
    """Seconds until a live round's next poll: the adaptive spacing (`next_wait`); once every member is out of the
    check, not before the first one's lines have settled (nothing can change a verdict sooner); cut short to
    judge a member the moment its lines settle (`members_due_at`), and for an earlier round's nodes due first
    (`wake_for`)."""
    wait = next_wait(
        started_at, now, expected_s, poll_interval(groups), awaiting_start=any(not r.seen_in_progress for r in members)
    )
    due = members_due_at(members, groups, now)
    if due is not None:
        everyone_out = all(r.check_left_at is not None for r in members)
        wait = max(wait, math.ceil(due - now)) if everyone_out else min(wait, math.ceil(due - now))
    return wake_for(wait, judge_at, now)


def next_wait(started_at: float, now: float, expected_s: int, poll_interval_s: int, awaiting_start: bool) -> int:
    """Adaptive poll spacing: confirm the start, sleep through the bulk, poll near the end.

    Nodes still waiting for a job to finish are looked at once more when HyperPod must have started or skipped
    them (SKIP_GRACE_S), not every interval: nothing in between changes a verdict, and every poll is a
    ListClusterNodes pass and three state transitions.
    """
    elapsed = now - started_at
    if elapsed < FIRST_POLL_S:
        return math.ceil(FIRST_POLL_S - elapsed)
    wake_at = started_at + 0.8 * expected_s
    if awaiting_start and elapsed < SKIP_GRACE_S:
        wake_at = min(wake_at, started_at + SKIP_GRACE_S)
    if now + poll_interval_s < wake_at:
        return min(MAX_WAIT_S, math.ceil(wake_at - now))
    return poll_interval_s
