"""The round item of a cluster (pk CLUSTER#<name>, sk ROUND): the round sequence number and its lease, whether a
check was asked for, when an event last said a node changed, and when the cluster was last looked at for
arrivals. A part of `NodeTable` (a mixin over its table), kept apart because its writes are all conditional
updates of one item."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hyperpod_dhc.deephealth.adapters import aws
from hyperpod_dhc.deephealth.adapters.table_keys import ROUND_SK, Attr, cluster_pk, conditional, written


@dataclass(frozen=True)
class RoundMeta:
    seq: int = 0
    holder: str | None = None
    lease_expires_at: float = 0.0
    check_requested: str | None = None  # the round that asked HyperPod for the check now active, if any
    # When an event last said a node of the cluster changed (Intake): a live round's poll then looks at the whole
    # cluster, not only its members.
    changed_at: float | None = None
    arrivals_looked_at: float | None = None  # the last look for arrivals (`claim_arrivals_look`, `note_whole_look`)
    arrival_noted_at: float | None = None  # the last readiness event that found that look too recent to take one


class RoundItem:
    """The round item's reads and writes, over `t`, the table (NodeTable's)."""

    @property
    def t(self) -> Any:
        raise NotImplementedError

    @aws.translated
    def round_meta(self, cluster: str) -> RoundMeta:
        item = self.t.get_item(Key={"pk": cluster_pk(cluster), "sk": ROUND_SK}, ConsistentRead=True).get("Item")
        if not item:
            return RoundMeta()
        return _round_meta(item)

    @aws.translated
    def acquire_lease(self, cluster: str, seq: int, holder: str, now: float, ttl_s: float) -> RoundMeta | None:
        """Take (or renew) the cluster's lease for round `seq`: the round item as written, None if another round
        holds it."""
        free = Attr("holder").not_exists() | Attr("holder").eq(holder) | Attr("lease_expires_at").lt(int(now))
        answer = conditional(
            lambda: self.t.update_item(
                Key={"pk": cluster_pk(cluster), "sk": ROUND_SK},
                UpdateExpression="SET holder = :h, lease_expires_at = :exp, seq = if_not_exists(seq, :seq)",
                ConditionExpression=_seq_is(seq) & free,
                ExpressionAttributeValues={":h": holder, ":exp": int(now + ttl_s), ":seq": seq},
                ReturnValues="ALL_NEW",  # the same write, and the poll learns whether an event came (changed_at)
            )
        )
        return None if answer is None else _round_meta(answer.get("Attributes") or {})

    @aws.translated
    def note_change(self, cluster: str, now: float) -> None:
        """An event said a node of the cluster changed: a live round's next poll looks at the whole cluster."""
        self._stamp(cluster, "changed_at", now)

    @aws.translated
    def note_arrival(self, cluster: str, now: float) -> None:
        """A readiness event found the last look for arrivals too recent to take its own: Reconcile's next pass
        takes one 5 minutes after that look (usecases/record_arrivals)."""
        self._stamp(cluster, "arrival_noted_at", now)

    @aws.translated
    def claim_arrivals_look(self, cluster: str, now: float, gap_s: float) -> float | None:
        """Take the cluster's look for arrivals (usecases/record_arrivals) unless another was taken within `gap_s`
        (None): one conditional write, so two Lambdas woken together list the cluster once. Returns when the look
        before it was taken (0.0: never), where this one's listing starts."""
        due = Attr("arrivals_looked_at").not_exists() | Attr("arrivals_looked_at").lte(math.floor(now - gap_s))
        answer = conditional(
            lambda: self.t.update_item(
                Key={"pk": cluster_pk(cluster), "sk": ROUND_SK},
                UpdateExpression="SET arrivals_looked_at = :t",
                ConditionExpression=due,
                ExpressionAttributeValues={":t": math.floor(now)},
                ReturnValues="UPDATED_OLD",
            )
        )
        return None if answer is None else float(answer.get("Attributes", {}).get("arrivals_looked_at", 0))

    @aws.translated
    def note_whole_look(self, cluster: str, now: float) -> None:
        """A round listed the whole cluster: it counts as the look for arrivals (`claim_arrivals_look`)."""
        self.t.update_item(
            Key={"pk": cluster_pk(cluster), "sk": ROUND_SK},
            UpdateExpression="SET arrivals_looked_at = :t",
            ExpressionAttributeValues={":t": math.floor(now)},
        )

    @aws.translated
    def note_check_request(self, cluster: str, holder: str | None) -> bool:
        """Record that round `holder` is asking for a check (None: its request was refused); lease holder only."""
        if holder is None:
            return self._update_round(cluster, "REMOVE check_requested", Attr("holder").exists(), {})
        return self._update_round(cluster, "SET check_requested = :h", Attr("holder").eq(holder), {":h": holder})

    @aws.translated
    def note_asked_past(self, cluster: str, operation_id: str) -> bool:
        """Record that a request is about to be sent past the overdue operation `operation_id`: False when one
        already was (whichever round sent it), so that an operation HyperPod keeps open is asked past once, not
        at every retry of a round that waits for it."""
        return self._update_round(
            cluster,
            "SET asked_past = :op",
            Attr("asked_past").not_exists() | Attr("asked_past").ne(operation_id),
            {":op": operation_id},
        )

    @aws.translated
    def release_lease(self, cluster: str, holder: str) -> bool:
        """Release the lease and advance the round sequence; False if `holder` no longer held it."""
        return self._update_round(
            cluster,
            "SET seq = seq + :one REMOVE holder, lease_expires_at, check_requested",
            Attr("holder").eq(holder),
            {":one": 1},
        )

    @aws.translated
    def skip_round(self, cluster: str, seq: int) -> bool:
        """Advance past round `seq` whose execution ended without releasing (stopped, timed out)."""
        update = "SET seq = :next REMOVE holder, lease_expires_at, check_requested"
        return self._update_round(cluster, update, _seq_is(seq), {":next": seq + 1})

    def _stamp(self, cluster: str, attribute: str, now: float) -> None:
        """Set `attribute` to `now` in whole seconds, rounded up: never before the event it stands for."""
        self.t.update_item(
            Key={"pk": cluster_pk(cluster), "sk": ROUND_SK},
            UpdateExpression=f"SET {attribute} = :t",
            ExpressionAttributeValues={":t": math.ceil(now)},
        )

    def _update_round(self, cluster: str, update: str, condition: Any, values: dict[str, Any]) -> bool:
        """One conditional write of the round item; False when the condition does not hold."""
        return written(
            lambda: self.t.update_item(
                Key={"pk": cluster_pk(cluster), "sk": ROUND_SK},
                UpdateExpression=update,
                ConditionExpression=condition,
                **({"ExpressionAttributeValues": values} if values else {}),
            )
        )


def _round_meta(item: dict[str, Any]) -> RoundMeta:
    return RoundMeta(
        seq=int(item.get("seq", 0)),
        holder=item.get("holder"),
        lease_expires_at=float(item.get("lease_expires_at", 0)),
        check_requested=item.get("check_requested"),
        changed_at=float(item["changed_at"]) if "changed_at" in item else None,
        arrivals_looked_at=float(item["arrivals_looked_at"]) if "arrivals_looked_at" in item else None,
        arrival_noted_at=float(item["arrival_noted_at"]) if "arrival_noted_at" in item else None,
    )


def _seq_is(seq: int) -> Any:
    """The round item is at sequence `seq` (a cluster's first round has no item yet)."""
    return Attr("seq").eq(seq) if seq else (Attr("seq").not_exists() | Attr("seq").eq(0))
