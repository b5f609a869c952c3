"""The twin's run as a timeline (`hpdhc simulate --timeline FILE`; `hyperpod_dhc.hpdhc.timeline`,
`hyperpod_dhc.hpdhc.timeline_page`): its records as the API's node documents (`GET /clusters/{cluster}/nodes/{node}`,
`domain.views.node_detail`), the run's start as t+0 and its end as the picture's. A node that arrived but never got a
record (still provisioning when its cluster went) has an empty row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hyperpod_dhc.deephealth.domain.views import node_detail
from hyperpod_dhc.hpdhc.timeline import Timeline, build
from hyperpod_dhc.hpdhc.timeline_page import render_html
from tests.twin.simulation import CONTROLLER_GROUP, Twin


def documents(twin: Twin) -> list[dict[str, Any]]:
    """Every worker node's document, as the operator API would answer it now."""
    records = {k: r for k, r in twin.records(twin.scenario.cluster.name).items() if r.group != CONTROLLER_GROUP}
    docs = [node_detail(r) for r in records.values()]
    for n in twin.cluster_model.nodes.values():
        if n.group != CONTROLLER_GROUP and n.logical_id not in records:
            docs.append(
                {"node": n.logical_id, "group": n.group, "instance_ids": list(n.instance_ids), "state": None,
                 "verdict": None, "evidence": [], "history": [], "actions": []}
            )  # fmt: skip
    return docs


def timeline_of(twin: Twin) -> Timeline:
    s = twin.scenario
    return build(
        s.cluster.name,
        documents(twin),
        end=twin.clock.now(),
        origin=twin.started_at,
        clock="relative",
        source=f"hpdhc simulate: scenario {s.name} (seed {s.seed}, NodeRecovery={s.cluster.node_recovery}).",
    )


def write_timeline(twin: Twin, path: Path) -> Timeline:
    timeline = timeline_of(twin)
    path.write_text(render_html(timeline), encoding="utf-8")
    return timeline
