"""The controller's DynamoDB table: one item per node, one round/lease item (round_item.py), one safety item (breaker
and holds), one readings item (what the cluster was seen to do) and one registry item per cluster.

Throttling and 5xx left over after botocore's retries surface as Throttled / TransientError (the names the
round workflow's Retry matches).

Keys: pk = "CLUSTER#<name>"; sk = "NODE#<node key>" | "ROUND" | "SAFETY" | "READINGS". Registry: pk = "CLUSTERS",
sk = <name>, with `recorded_at` and the Slurm bridge's fencing token (`bridge_holder`, `fence`, `bridge_seen_at`:
`domain.bridge_fence`), each written by an update of its own attributes only.
A node item carries the record as JSON plus the version that conditions need, and every write
is conditional on the version read, so two writers never silently overwrite each other.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hyperpod_dhc.deephealth.adapters import aws, clock
from hyperpod_dhc.deephealth.adapters.round_item import RoundItem
from hyperpod_dhc.deephealth.adapters.table_keys import (
    INFO_SK,
    NODE_PREFIX,
    NOT_SLURM_SK,
    READINGS_SK,
    REGISTRY_PK,
    SAFETY_SK,
    Attr,
    Key,
    cluster_pk,
    written,
)
from hyperpod_dhc.deephealth.domain.breakers import SafetyState
from hyperpod_dhc.deephealth.domain.bridge_fence import BridgeLease
from hyperpod_dhc.deephealth.domain.errors import StaleRecord, Throttled
from hyperpod_dhc.deephealth.domain.nodes import NodeRecord
from hyperpod_dhc.deephealth.domain.readings import ClusterReadings
from hyperpod_dhc.deephealth.domain.rounds import chunks

# The index of node items by when they were saved (`saved_at`, whole seconds of the writer's clock): "did any node
# of the cluster change since t?" reads at most one key, however large the cluster (the Slurm bridge's idle pass).
SAVED_INDEX = "BySavedAt"
# A save is stamped by its writer's clock and shows in the index within about a second: a "saved since t?" asks
# from this much earlier, so that a save that landed late is not missed.
SAVE_MARGIN_S = 60
# A warm Lambda reads a cluster's records whole at least this often (and on a cold start): the backstop for a save
# whose index entry showed later than the margin. Such a copy is only ever read stale (every save is conditional
# on the version it read) and node records are never deleted; a whole read of a 10,000-node cluster is 10,000 items
# for each function that looks at it, so hourly, not every 15 minutes.
WHOLE_RELOAD_S = 3600
BATCH_GET_MAX = 100  # keys per BatchGetItem (the API's limit)
Doc = TypeVar("Doc", SafetyState, ClusterReadings)  # a cluster-wide document: `cluster`, `version`
BATCH_GET_ATTEMPTS = 5


@dataclass(frozen=True)
class Registration:
    """A cluster's registry item: when a whole listing was last recorded, and its Slurm bridge's fence."""

    recorded_at: float | None = None
    lease: BridgeLease = field(default_factory=BridgeLease)
    registered: bool = False  # the item exists: the cluster is one `registered_clusters` lists


@dataclass
class _Warm:
    """A cluster's records as this Lambda last loaded them (see `NodeTable.load_cluster`)."""

    loaded_at: float  # when they were last brought up to date
    whole_at: float  # when they were last read whole
    records: dict[str, NodeRecord]


class NodeTable(RoundItem):
    def __init__(self, table_name: str, table: Any | None = None) -> None:
        self._name = table_name
        self._table = table
        self._warm: dict[str, _Warm] = {}
        # (cluster, key) -> (hash of a node's document, the record parsed from it or written as it): a load that
        # meets the same document again takes that record instead of parsing it (`_parsed`).
        self._parsed_docs: dict[tuple[str, str], tuple[int, NodeRecord]] = {}

    @property
    def t(self) -> Any:
        return self._table or aws.table(self._name)

    # -- nodes ---------------------------------------------------------------------------------------
    @aws.translated
    def load_cluster(self, cluster: str) -> dict[str, NodeRecord]:
        """Every node record of the cluster. A warm Lambda reads only what was saved since its last load (the
        SAVED_INDEX keys, then those records, consistently) on top of what it holds, and the whole cluster again
        every WHOLE_RELOAD_S: a look at a 10,000-node cluster where little changes reads little, and its whole
        reads parse only the records that changed."""
        now = clock.now()
        warm = self._warm.get(cluster)
        if warm is None or not 0 <= now - warm.whole_at < WHOLE_RELOAD_S:
            warm = _Warm(now, now, self._query_cluster(cluster))
        else:
            saved = self._saved_since(cluster, warm.loaded_at - SAVE_MARGIN_S)
            warm = _Warm(now, warm.whole_at, {**warm.records, **self.load_nodes(cluster, saved)})
        self._warm[cluster] = warm
        return dict(warm.records)

    def _query_cluster(self, cluster: str) -> dict[str, NodeRecord]:
        records: dict[str, NodeRecord] = {}
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": Key("pk").eq(cluster_pk(cluster)) & Key("sk").begins_with(NODE_PREFIX),
            "ProjectionExpression": "#doc, sk, #version",
            "ExpressionAttributeNames": {"#doc": "doc", "#version": "version"},
        }
        while True:
            page = self.t.query(**kwargs)
            for item in page.get("Items", []):
                record = self._parsed(cluster, item)
                records[record.key] = record
            if "LastEvaluatedKey" not in page:
                for gone in [k for k in self._parsed_docs if k[0] == cluster and k[1] not in records]:
                    del self._parsed_docs[gone]  # a node no longer in the table is no longer held
                return records
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _saved_since(self, cluster: str, since: float) -> set[str]:
        """The keys of the node records saved at or after `since` (SAVED_INDEX: keys only)."""
        keys: set[str] = set()
        kwargs = _saved_since_query(cluster, since)
        while True:
            page = self.t.query(**kwargs)
            keys |= {str(i["sk"]).removeprefix(NODE_PREFIX) for i in page.get("Items", [])}
            if "LastEvaluatedKey" not in page:
                return keys
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    @aws.translated
    def load_nodes(self, cluster: str, keys: Iterable[str]) -> dict[str, NodeRecord]:
        """The records of these nodes (consistent reads, 100 per BatchGetItem); unknown keys are left out."""
        records: dict[str, NodeRecord] = {}
        pk = cluster_pk(cluster)
        for part in chunks(sorted(set(keys)), BATCH_GET_MAX):
            request: dict[str, Any] = {
                self._name: {
                    "Keys": [{"pk": pk, "sk": NODE_PREFIX + k} for k in part],
                    "ProjectionExpression": "#doc, sk, #version",
                    "ExpressionAttributeNames": {"#doc": "doc", "#version": "version"},
                    "ConsistentRead": True,
                }
            }
            for attempt in range(BATCH_GET_ATTEMPTS):
                # The resource's client: it takes and returns plain Python values, as the Table does.
                page = self.t.meta.client.batch_get_item(RequestItems=request)
                for item in page.get("Responses", {}).get(self._name, []):
                    record = self._parsed(cluster, item)
                    records[record.key] = record
                request = page.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(min(1.0, 0.05 * 2**attempt))  # DynamoDB's advice for unprocessed keys: back off
            else:
                raise Throttled(f"BatchGetItem left keys unprocessed after {BATCH_GET_ATTEMPTS} attempts")
        return records

    @aws.translated
    def changed_since(self, cluster: str, since: float) -> bool:
        """Whether a node record of the cluster was saved at or after `since` (SAVED_INDEX; at most one key read)."""
        return bool(self.t.query(**_saved_since_query(cluster, since), Limit=1).get("Items"))

    @aws.translated
    def get(self, cluster: str, key: str) -> NodeRecord | None:
        item = self.t.get_item(Key={"pk": cluster_pk(cluster), "sk": NODE_PREFIX + key}, ConsistentRead=True)
        return _record(item["Item"]) if "Item" in item else None

    @aws.translated
    def save(self, record: NodeRecord) -> NodeRecord:
        """Write `record` if nobody wrote the node since it was read; returns it with the new version."""
        saved = record.model_copy(update={"version": record.version + 1})
        doc = saved.model_dump_json()
        self._put_versioned(record.cluster, NODE_PREFIX + record.key, record.version, doc)
        if (warm := self._warm.get(record.cluster)) is not None:
            warm.records[saved.key] = saved  # what this Lambda wrote, it knows
        self._parsed_docs[(record.cluster, saved.key)] = (hash(doc), saved)
        return saved

    def _parsed(self, cluster: str, item: dict[str, Any]) -> NodeRecord:
        """The record of a node item: the one parsed from (or saved as) the same document before, else the document
        parsed (most of a whole load is documents that did not change, and parsing was most of its time). The same
        document: the same version (each version of a node is written once) and the same hash."""
        key, doc = str(item["sk"]).removeprefix(NODE_PREFIX), item["doc"]
        digest = hash(doc)
        held = self._parsed_docs.get((cluster, key))
        if held is not None and held[0] == digest and held[1].version == int(item["version"]):
            return held[1]
        record = NodeRecord.model_validate_json(doc)
        self._parsed_docs[(cluster, key)] = (digest, record)
        return record

    # -- safety: the cluster's breaker and bad-capacity holds -------------------------------------------
    @aws.translated
    def safety(self, cluster: str) -> SafetyState:
        return self._cluster_doc(cluster, SAFETY_SK, SafetyState)

    @aws.translated
    def save_safety(self, state: SafetyState) -> SafetyState:
        """Write the safety state if nobody changed it since it was read (raises StaleRecord otherwise)."""
        return self._save_cluster_doc(state, SAFETY_SK)

    # -- readings: what the cluster was seen to do (stream names, line shapes, lag, ...) ---------------------
    @aws.translated
    def readings(self, cluster: str) -> ClusterReadings:
        return self._cluster_doc(cluster, READINGS_SK, ClusterReadings)

    @aws.translated
    def save_readings(self, readings: ClusterReadings) -> ClusterReadings:
        """Write the readings if nobody changed them since they were read (raises StaleRecord otherwise)."""
        return self._save_cluster_doc(readings, READINGS_SK)

    # -- the cluster's last DescribeCluster answer ------------------------------------------------------------
    @aws.translated
    def cluster_info(self, cluster: str) -> tuple[float, dict[str, Any]] | None:
        """(when it was described, ClusterInfo.to_json()) or None."""
        item = self.t.get_item(Key={"pk": cluster_pk(cluster), "sk": INFO_SK}).get("Item")
        return (float(item["described_at"]), json.loads(item["doc"])) if item else None

    @aws.translated
    def save_cluster_info(self, cluster: str, described_at: float, info: dict[str, Any]) -> None:
        item = {"pk": cluster_pk(cluster), "sk": INFO_SK, "described_at": math.floor(described_at)}
        self.t.put_item(Item={**item, "doc": json.dumps(info, sort_keys=True)})

    @aws.translated
    def note_not_slurm(self, cluster: str, arn: str) -> bool:
        """Mark that cluster `arn` (named `cluster`) is not a Slurm cluster; False if it already was marked. A
        cluster recreated under the same name has a new ARN, and is marked (and said) again."""
        return written(
            lambda: self.t.put_item(
                Item={"pk": cluster_pk(cluster), "sk": NOT_SLURM_SK, "arn": arn},
                ConditionExpression=Attr("pk").not_exists() | Attr("arn").ne(arn),
            )
        )

    @aws.translated
    def forget_cluster_info(self, cluster: str) -> None:
        self.t.delete_item(Key={"pk": cluster_pk(cluster), "sk": INFO_SK})

    def _cluster_doc(self, cluster: str, sk: str, model: type[Doc]) -> Doc:
        """A cluster-wide document (its item, or a new one at version 0)."""
        item = self.t.get_item(Key={"pk": cluster_pk(cluster), "sk": sk}, ConsistentRead=True).get("Item")
        return model.model_validate_json(item["doc"]) if item else model(cluster=cluster)

    def _save_cluster_doc(self, doc: Doc, sk: str) -> Doc:
        saved = doc.model_copy(update={"version": doc.version + 1})
        self._put_versioned(doc.cluster, sk, doc.version, saved.model_dump_json())
        return saved

    def _put_versioned(self, cluster: str, sk: str, version: int, doc: str) -> None:
        """One conditional put: the item is new (version 0) or still at `version`."""
        condition = Attr("pk").not_exists() if version == 0 else Attr("version").eq(version)
        # Only what conditions and the index need sits beside the JSON document: fewer attributes, cheaper reads.
        item: dict[str, Any] = {"pk": cluster_pk(cluster), "sk": sk, "version": version + 1, "doc": doc}
        if sk.startswith(NODE_PREFIX):
            item["saved_at"] = math.floor(clock.now())
        if not written(lambda: self.t.put_item(Item=item, ConditionExpression=condition)):
            raise StaleRecord(f"{cluster}/{sk} changed since version {version}")

    # -- cluster registry: lets the reconciler close out clusters that vanished from ListClusters ------
    @aws.translated
    def register_cluster(self, cluster: str, recorded_at: float | None = None) -> None:
        """Known to the reconciler; with `recorded_at`, every node HyperPod listed then is recorded (the Slurm
        bridge's document covers the whole cluster from then on), without it not (yet). An update of that one
        attribute: the bridge's fence on the same item stays."""
        key = {"pk": REGISTRY_PK, "sk": cluster}
        if recorded_at is None:
            self.t.update_item(Key=key, UpdateExpression="REMOVE recorded_at")
        else:  # whole seconds: DynamoDB numbers are Decimal, not float
            self.t.update_item(
                Key=key, UpdateExpression="SET recorded_at = :t", ExpressionAttributeValues={":t": int(recorded_at)}
            )

    @aws.translated
    def recorded_at(self, cluster: str) -> float | None:
        """When a whole listing of the cluster was last recorded (register_cluster), None if never."""
        item = self.t.get_item(Key={"pk": REGISTRY_PK, "sk": cluster}).get("Item") or {}
        return float(item["recorded_at"]) if "recorded_at" in item else None

    @aws.translated
    def registration(self, cluster: str) -> Registration:
        """The cluster's registry item, read consistently (the bridge's fence is decided on it)."""
        return _registration(
            self.t.get_item(Key={"pk": REGISTRY_PK, "sk": cluster}, ConsistentRead=True).get("Item") or {}
        )

    @aws.translated
    def write_bridge_lease(self, cluster: str, read: BridgeLease, lease: BridgeLease) -> bool:
        """Write the cluster's bridge fence as `lease` if it is still `read` (same fence, same holder); False when
        another pull changed it first."""
        same_fence = Attr("fence").eq(read.fence) if read.fence else Attr("fence").not_exists()
        same_holder = Attr("bridge_holder").eq(read.holder) if read.holder else Attr("bridge_holder").not_exists()
        return written(
            lambda: self.t.update_item(
                Key={"pk": REGISTRY_PK, "sk": cluster},
                UpdateExpression="SET bridge_holder = :h, fence = :f, bridge_seen_at = :t",
                ConditionExpression=same_fence & same_holder,
                ExpressionAttributeValues={
                    ":h": lease.holder,
                    ":f": lease.fence,
                    ":t": math.floor(lease.seen_at or 0),  # whole seconds (Decimal); rounded down: never later
                },
            )
        )

    def registered_clusters(self) -> list[str]:
        return list(self.registrations())

    @aws.translated
    def registrations(self) -> dict[str, Registration]:
        """Every registered cluster's registry item, by cluster (one Query, not read consistently: for a pass over
        the clusters, not for deciding a fence)."""
        out: dict[str, Registration] = {}
        kwargs: dict[str, Any] = {"KeyConditionExpression": Key("pk").eq(REGISTRY_PK)}
        while True:
            page = self.t.query(**kwargs)
            out |= {str(i["sk"]): _registration(i) for i in page.get("Items", [])}
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    @aws.translated
    def unregister_cluster(self, cluster: str) -> None:
        self.t.delete_item(Key={"pk": REGISTRY_PK, "sk": cluster})


def _registration(item: dict[str, Any]) -> Registration:
    """A cluster's registry item ({}: none)."""
    lease = BridgeLease(
        holder=item.get("bridge_holder"),
        fence=int(item.get("fence", 0)),
        seen_at=float(item["bridge_seen_at"]) if "bridge_seen_at" in item else None,
    )
    return Registration(float(item["recorded_at"]) if "recorded_at" in item else None, lease, bool(item))


def _record(item: dict[str, Any]) -> NodeRecord:
    return NodeRecord.model_validate_json(item["doc"])


def _saved_since_query(cluster: str, since: float) -> dict[str, Any]:
    """The SAVED_INDEX query of the cluster's node records saved at or after `since` (saved_at is whole seconds)."""
    return {
        "IndexName": SAVED_INDEX,
        "KeyConditionExpression": Key("pk").eq(cluster_pk(cluster)) & Key("saved_at").gte(math.floor(since)),
    }
