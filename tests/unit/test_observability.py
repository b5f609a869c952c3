import json

from hyperpod_dhc.deephealth.observability import bridge_reported, metrics, node_metric


def test_node_metrics_are_also_emitted_per_cluster(capsys):
    node_metric("Verdict_failed", "prod")
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (per_cluster,) = [e for e in emitted if e.get("cluster") == "prod"]
    directive = per_cluster["_aws"]["CloudWatchMetrics"][0]
    assert sorted(directive["Dimensions"][0]) == ["cluster", "service"] and per_cluster["Verdict_failed"] == [1.0]
    assert directive["Namespace"] == "HyperPodDHC"
    metrics.clear_metrics()


def test_a_bridge_report_is_counted_per_cluster_only(capsys):
    bridge_reported("prod")
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (document,) = emitted  # flushed at once, no stack-wide copy: the alarm is per cluster
    directive = document["_aws"]["CloudWatchMetrics"][0]
    assert directive["Dimensions"] == [["service", "cluster"]] and directive["Namespace"] == "HyperPodDHC"
    assert document["cluster"] == "prod" and document["SlurmBridgeReports"] == [1.0]
    assert directive["Metrics"] == [{"Name": "SlurmBridgeReports", "Unit": "Count"}]
