import json

from deephealth.observability import metrics, node_metric


def test_node_metrics_are_also_emitted_per_cluster(capsys):
    node_metric("Verdict_failed", "prod")
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (per_cluster,) = [e for e in emitted if e.get("cluster") == "prod"]
    directive = per_cluster["_aws"]["CloudWatchMetrics"][0]
    assert sorted(directive["Dimensions"][0]) == ["cluster", "service"] and per_cluster["Verdict_failed"] == [1.0]
    assert directive["Namespace"] == "HyperPodDHC"
    metrics.clear_metrics()
