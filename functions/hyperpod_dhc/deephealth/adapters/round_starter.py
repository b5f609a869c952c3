"""Starting a cluster's next check round, idempotently.

Execution names are deterministic (`<cluster>-r<seq>`), so any number of concurrent starters for the same
round produce one execution (Standard workflows return the running execution for a same-name, same-input
start). A round that ended without releasing its lease (stopped, timed out) is skipped over.
"""

from __future__ import annotations

import json
from typing import Any

from hyperpod_dhc.deephealth.adapters import aws, clock
from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
from hyperpod_dhc.deephealth.adapters.round_item import RoundMeta
from hyperpod_dhc.deephealth.domain.rounds import LEASE_TTL_S, MAX_WAIT_S, round_name

# Every step of a live round renews its lease, and no step is further apart than the longest Wait; a lease
# not renewed for longer than that may belong to a round that died, so then Step Functions is asked.
STALE_AFTER_S = MAX_WAIT_S + 15 * 60


class RoundStarter:
    def __init__(self, table: NodeTable, state_machine_arn: str, sfn: Any | None = None) -> None:
        self._table = table
        self._arn = state_machine_arn
        self._sfn = sfn

    @property
    def sfn(self) -> Any:
        return self._sfn or aws.client("stepfunctions")

    @aws.translated
    def ensure_round(self, cluster: str, read: RoundMeta | None = None) -> tuple[str | None, RoundMeta]:
        """Name of the running (or just started) round for `cluster` (None: none could be started), and the round
        item as last read. `read`: the round item as the caller just read it, not read again (a second attempt
        reads it afresh)."""
        for _ in range(3):
            meta, read = read or self._table.round_meta(cluster), None
            seq = meta.seq
            name = round_name(cluster, seq)
            now = clock.now()
            held = meta.holder == name and meta.lease_expires_at > now
            if held and now - (meta.lease_expires_at - LEASE_TTL_S) < STALE_AFTER_S:
                return name, meta  # renewed recently, so running: no need to ask Step Functions
            if not held:
                payload = json.dumps({"cluster": cluster, "round_seq": seq}, sort_keys=True)
                try:
                    self.sfn.start_execution(stateMachineArn=self._arn, name=name, input=payload)
                    return name, meta
                except aws.ClientError as err:
                    if err.response["Error"]["Code"] != "ExecutionAlreadyExists":
                        raise
            if self._running(name):
                return name, meta  # live: its Finish round starts the next one if nodes are waiting
            # Ended without releasing its lease (stopped, timed out, redeployed): move past it.
            if self._table.round_meta(cluster).seq == seq:
                self._table.skip_round(cluster, seq)
        return None, self._table.round_meta(cluster)

    def _running(self, name: str) -> bool:
        execution_arn = self._arn.replace(":stateMachine:", ":execution:") + ":" + name
        try:
            status: str = self.sfn.describe_execution(executionArn=execution_arn)["status"]
            return status == "RUNNING"
        except aws.ClientError as err:
            if err.response["Error"]["Code"] == "ExecutionDoesNotExist":
                return False
            raise
