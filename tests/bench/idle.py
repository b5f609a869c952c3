"""What an idle cluster costs a day: N nodes that all passed their checks, the Slurm bridge syncing every minute,
Reconcile every `reconcile_every_minutes`, and nothing changing.

    python -m tests.bench.idle [--nodes 10000] [--hours 1]

The real handlers on the harness (moto, IAM enforced, the template as deployed), the bridge's real pass
(`hyperpod_dhc.hpdhc.sync.sync_once`) against the real API route, a Slurm whose nodes are idle and labelled Passed.
Every request is counted at its boundary and priced:

- DynamoDB: each request's read and write units from the items it returned or wrote (reads: 4 KB units, halved
  when eventually consistent; writes: 1 KB units, one more for an item the BySavedAt index holds);
- Lambda: every invocation, billed for its measured wall time on the twin (moto is slower than AWS: an upper
  bound) at its function's memory;
- API Gateway: every request the bridge makes;
- Step Functions: the transitions of any round an idle cluster starts (none, if it is idle);
- SageMaker: calls counted, not priced (its control-plane APIs are free, and throttled per account).

The counts of the measured hours are scaled to 24 h. Prices: us-east-1 list prices, as of the date below.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hyperpod_dhc.infra.controller_functions import METRICS_NAMESPACE, SERVICE_NAME
from tests.bench.run import (
    DDB_PER_READ_UNIT,
    DDB_PER_WRITE_UNIT,
    LAMBDA_PER_GB_S,
    LAMBDA_PER_REQUEST,
    SFN_PER_TRANSITION,
)

PRICES_AS_OF = "2026-12-02"
APIGW_PER_REQUEST = 3.50 / 1_000_000  # REST API, first 333 million a month (the others: tests/bench/run.py)
TARGET_USD_PER_DAY = 1.0
IDLE_SINCE_S = 2 * 3600  # how long ago the nodes were created (a deep health check takes about 1 h)
CLUSTER = "idle"
GROUP = "workers"


@dataclass
class IdleCost:
    nodes: int
    hours: float
    bridge_passes: int = 0
    api_requests: int = 0
    invocations: Counter = field(default_factory=Counter)
    lambda_gb_s: float = 0.0
    units: Units = field(default_factory=lambda: Units())
    sagemaker_calls: Counter = field(default_factory=Counter)
    transitions: int = 0
    wall_s: float = 0.0

    def per_day(self) -> dict[str, float]:
        scale = 24 / self.hours
        parts = {
            "dynamodb": (self.units.read * DDB_PER_READ_UNIT + self.units.write * DDB_PER_WRITE_UNIT) * scale,
            "lambda": (sum(self.invocations.values()) * LAMBDA_PER_REQUEST + self.lambda_gb_s * LAMBDA_PER_GB_S)
            * scale,
            "api_gateway": self.api_requests * APIGW_PER_REQUEST * scale,
            "step_functions": self.transitions * SFN_PER_TRANSITION * scale,
        }
        return {**{k: round(v, 4) for k, v in parts.items()}, "total": round(sum(parts.values()), 4)}

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "hours": self.hours,
            "bridge_passes": self.bridge_passes,
            "api_requests": self.api_requests,
            "invocations": dict(self.invocations),
            "lambda_gb_s": round(self.lambda_gb_s, 2),
            "read_units": round(self.units.read, 1),
            "write_units": round(self.units.write, 1),
            "node_records_read_per_bridge_pass": round(
                self.units.records_by_function["Api"] / max(1, self.bridge_passes), 2
            ),
            "node_records_read_by_function": dict(self.units.records_by_function),
            "sagemaker_calls": dict(self.sagemaker_calls),
            "transitions": self.transitions,
            "usd_per_day": self.per_day(),
            "prices_as_of": PRICES_AS_OF,
            "wall_s": round(self.wall_s, 1),
        }


@dataclass
class Units:
    """DynamoDB request units of the controller's requests, from the items each returned or wrote."""

    read: float = 0.0
    write: float = 0.0
    node_records_read: int = 0
    records_by_function: Counter = field(default_factory=Counter)  # node records read, by the function reading
    requests: Counter = field(default_factory=Counter)  # DynamoDB requests by operation (every function's)


def _size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it, near enough: names and values as text."""
    return sum(len(k) + len(v if isinstance(v, str) else json.dumps(v, default=str)) for k, v in item.items())


def _node_record(item: dict[str, Any]) -> bool:
    """A node record's item (the controller reads only its `doc`): not a cluster document, not an index key."""
    doc = item.get("doc")
    doc = doc.get("S") if isinstance(doc, dict) else doc  # the wire's typed value ({"S": "..."}), or plain
    return isinstance(doc, str) and '"key":' in doc and '"state":' in doc


def count_dynamodb_units() -> Units:
    """Count the units of every DynamoDB request from now on: botocore hooks on the default session, which every
    controller client is built from (the cached clients are dropped so that they are rebuilt with the hooks)."""
    import boto3

    from hyperpod_dhc.deephealth.adapters import aws
    from tests.harness import moto_patches

    units = Units()

    def after_call(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        name = model.name
        units.requests[name] += 1
        if name in ("GetItem", "Query", "BatchGetItem"):
            items = [parsed["Item"]] if "Item" in parsed else list(parsed.get("Items", []))
            items += [i for batch in parsed.get("Responses", {}).values() for i in batch]
            if name == "Query":  # one request: its items' total size in 4 KB units (eventually consistent: half)
                units.read += max(1, math.ceil(sum(_size(i) for i in items) / 4096)) * 0.5
            else:  # each item on its own, strongly consistent (the controller's GetItem and BatchGetItem are)
                units.read += sum(max(1, math.ceil(_size(i) / 4096)) for i in items) or 1
            records = sum(1 for i in items if _node_record(i))
            units.node_records_read += records
            units.records_by_function[(moto_patches.current_function() or "harness").removeprefix("Functions")] += (
                records
            )

    def before_call(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in ("PutItem", "UpdateItem", "DeleteItem"):
            body = params.get("body")
            item = body.get("Item", {}) if isinstance(body, dict) else {}
            units.write += max(1, math.ceil(len(json.dumps(item)) / 1024))
            units.write += 1 if "saved_at" in item else 0  # the BySavedAt index's copy of the keys

    aws.reset()
    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    events = boto3.DEFAULT_SESSION.events
    for event, handler in (("after-call.dynamodb", after_call), ("before-call.dynamodb", before_call)):
        events.unregister(event, unique_id=f"hpdhc-bench-{event}")  # one counter at a time: the newest
        events.register(event, handler, unique_id=f"hpdhc-bench-{event}")
    return units


def run_idle(nodes: int, hours: float) -> IdleCost:
    from hyperpod_dhc.deephealth.adapters.hyperpod import HyperPod
    from hyperpod_dhc.deephealth.adapters.node_table import NodeTable
    from hyperpod_dhc.deephealth.domain.nodes import NodeRecord, NodeState
    from hyperpod_dhc.hpdhc.document import FEATURES, Memory
    from hyperpod_dhc.hpdhc.scontrol import SlurmNode
    from hyperpod_dhc.hpdhc.sync import sync_once
    from tests.bench.run import function_memory_mb
    from tests.fakes.hyperpod import Clock, FakeHyperPod, GroupSpec
    from tests.fakes.slurm_lock import FakeLock
    from tests.harness.engine import TABLE_NAME, Harness
    from tests.harness.synth import synthesized_template
    from tests.harness.template import ControllerTemplate
    from tests.integration.test_slurm_routes import INSTANCE_ROLE

    template = ControllerTemplate(synthesized_template())
    memory_mb = function_memory_mb(template)
    fake = FakeHyperPod(Clock(), seed=11)
    cost = IdleCost(nodes=nodes, hours=hours)
    wall0 = time.monotonic()
    with Harness(template, fake, config={"clusters": [CLUSTER]}) as harness:
        cluster = fake.create_cluster(CLUSTER, [GroupSpec(GROUP, count=nodes)])
        # Every node has passed, so it was created at least a check before: its record as the controller keeps it
        # after the pass (the clock moves on without Reconcile: nothing is on record yet).
        fake.advance(IDLE_SINCE_S)
        now = fake.clock.now()
        table = NodeTable(TABLE_NAME)
        for s in HyperPod().list_nodes(CLUSTER):
            table.save(
                NodeRecord(
                    cluster=CLUSTER,
                    cluster_id=cluster.cluster_id,
                    key=s.key,
                    group=s.group,
                    logical_id=s.logical_id,
                    instance_id=s.instance_id,
                    instance_ids=[s.instance_id or ""],
                    instance_type=s.instance_type,
                    hostname=s.hostname,
                    status=s.status,
                    status_at=now,
                    ready_at=now,
                    state=NodeState.PASSED,
                    verdict_at=now,
                )
            )
        table.register_cluster(CLUSTER, recorded_at=now)
        names = sorted({(r.hostname or "").split(".")[0] for r in table.load_cluster(CLUSTER).values()})
        passed = ("HealthCheck:Passed",)
        slurm_nodes = {n: SlurmNode(name=n, features=passed, available=FEATURES, partitions=(GROUP,)) for n in names}

        class IdleSlurm(FakeLock):
            def nodes(self, names: Sequence[str] = (), lock: str | None = None) -> dict[str, SlurmNode]:
                return {k: v for k, v in slurm_nodes.items() if not names or k in names}

            def update(self, names: Sequence[str], args: list[str]) -> None:
                raise AssertionError(f"an idle cluster's bridge changed Slurm: {len(names)} node(s), {args}")

        class Controller:
            def desired(
                self, cluster: str, since: tuple[float, str] | None = None, status: Any = None
            ) -> dict[str, Any]:
                query = {"limit": "10000", **(status or {})}
                query |= {} if since is None else {"since": repr(since[0]), "digest": since[1]}
                cost.api_requests += 1
                code, body = harness.api("GET", f"/clusters/{cluster}/slurm", query=query, principal=INSTANCE_ROLE)
                if code != 200:
                    raise RuntimeError(f"HTTP {code}: {body}")
                return body

            def report(self, cluster: str, reported: list[dict[str, Any]]) -> dict[str, Any]:
                for start in range(0, len(reported), 1000):
                    cost.api_requests += 1
                    page = {"nodes": reported[start : start + 1000]}
                    path = f"/clusters/{cluster}/slurm/occupancy"
                    status, body = harness.api("POST", path, page, principal=INSTANCE_ROLE)
                    if status != 200:
                        raise RuntimeError(f"HTTP {status}: {body}")
                return body

        bridge_memory, controller, slurm = Memory(), Controller(), IdleSlurm()
        first = sync_once(CLUSTER, controller, slurm, {GROUP: GROUP}, bridge_memory)  # a run's first pass
        if first.errors:
            raise RuntimeError(f"the bridge's first pass failed: {first.errors}")
        harness.advance(180.0)  # past the bridge's SAVE_MARGIN_S: what follows is the steady idle state
        cost.units = count_dynamodb_units()  # from here on
        calls_before = Counter(fake.calls)
        invoke = harness._invoke

        def timed(arn: str, payload: Any, *args: Any, **kwargs: Any) -> Any:
            name = arn.rsplit(":", 1)[-1]
            t0 = time.monotonic()
            try:
                return invoke(arn, payload, *args, **kwargs)
            finally:
                cost.invocations[name] += 1
                cost.lambda_gb_s += (time.monotonic() - t0) * memory_mb.get(name, 512) / 1024

        harness._invoke = timed  # type: ignore[method-assign]
        end = fake.clock.now() + hours * 3600
        while fake.clock.now() < end:
            harness.advance(60.0)
            result = sync_once(CLUSTER, controller, slurm, {GROUP: GROUP}, bridge_memory)
            if result.errors or result.failure:
                raise RuntimeError(f"an idle bridge pass failed: {result.errors}")
            cost.bridge_passes += 1
        cost.sagemaker_calls = Counter(fake.calls) - calls_before
        cost.transitions = sum(
            1
            for e in harness.executions()
            for event in harness.history(e["executionArn"])
            if event["type"].endswith("StateEntered")
        )
    cost.wall_s = time.monotonic() - wall0
    return cost


def render(cost: IdleCost, out: Any = sys.stdout) -> None:
    day = cost.per_day()
    print(
        f"idle {cost.nodes:,}-node cluster with the Slurm bridge, {cost.hours:g} h measured, scaled to a day "
        f"(prices us-east-1 as of {PRICES_AS_OF}; Lambda billed at the twin's wall time, an upper bound):",
        file=out,
    )
    print(
        f"  ${day['total']:.3f} a day (target <= ${TARGET_USD_PER_DAY:.2f}: "
        f"{'met' if day['total'] <= TARGET_USD_PER_DAY else 'MISSED'}): DynamoDB ${day['dynamodb']:.3f}, "
        f"Lambda ${day['lambda']:.3f}, API Gateway ${day['api_gateway']:.3f}, "
        f"Step Functions ${day['step_functions']:.3f}",
        file=out,
    )
    print(
        f"  per bridge pass: {cost.units.records_by_function['Api'] / max(1, cost.bridge_passes):.1f} node records "
        "read "
        f"(all functions: {dict(cost.units.records_by_function)}), "
        f"{cost.api_requests / max(1, cost.bridge_passes):.1f} API requests; {cost.bridge_passes} passes, "
        f"{sum(cost.invocations.values())} invocations ({dict(cost.invocations)}), "
        f"{cost.units.read:,.0f} read and {cost.units.write:,.0f} write units, SageMaker calls "
        f"{dict(cost.sagemaker_calls) or 'not counted'}; {cost.wall_s:,.0f} s wall",
        file=out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.idle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # The environment every deployed function has, before anything imports the controller's one Metrics: this
    # script imports the bridge and the API's test module ahead of any invocation.
    for name, value in (("POWERTOOLS_SERVICE_NAME", SERVICE_NAME), ("POWERTOOLS_METRICS_NAMESPACE", METRICS_NAMESPACE)):
        os.environ.setdefault(name, value)
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):  # the Lambdas' JSON logs
        cost = run_idle(args.nodes, args.hours)
    if args.json:
        json.dump(cost.to_json(), sys.stdout, indent=1)
        print()
    else:
        render(cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
