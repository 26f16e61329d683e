"""Monitoring under the mocks: every serving pod of every stack is selected by exactly one of our monitors (a
test over the rendered pod templates), multinode roles are scraped on leaders only, dashboards are valid JSON
and alert rules use metrics Dynamo publishes."""

from __future__ import annotations

import json
import re

import pytest
from conftest import STACKS, by_kind, render_with

from kimi_k3.data import recipe_file
from kimi_k3.k8s import monitoring

# Metric names from Dynamo's deploy/observability/grafana_dashboards/DASHBOARD_METRICS.md (frontend, worker) and
# kube-state-metrics (restarts, readiness).
PUBLISHED_METRICS = {
    "dynamo_frontend_time_to_first_token_seconds",
    "dynamo_frontend_inter_token_latency_seconds",
    "dynamo_frontend_queued_requests",
    "dynamo_component_gpu_cache_usage_percent",
    "dynamo_component_requests_total",
    "kube_pod_container_status_restarts_total",
    "kube_pod_status_ready",
}


def selected_by(monitors, labels):
    return [
        m["metadata"]["name"]
        for m in monitors
        if all(labels.get(k) == v for k, v in m["spec"]["selector"]["matchLabels"].items())
    ]


def pods_of(objects):
    dgd = next(o for o in objects if o["kind"] == "DynamoGraphDeployment")
    return [(c, (c["podTemplate"].get("metadata") or {}).get("labels") or {}) for c in dgd["spec"]["components"]]


@pytest.mark.parametrize("stack", STACKS)
def test_every_serving_pod_is_selected_by_exactly_one_monitor(stack, rendered):
    objects = rendered[stack].objects
    monitors = [m for m in by_kind(objects, "PodMonitor") if "namespaceSelector" not in m["spec"]]
    for component, labels in pods_of(objects):
        assert len(selected_by(monitors, labels)) == 1, (component["name"], labels)
        monitor = next(m for m in monitors if m["metadata"]["name"] in selected_by(monitors, labels))
        endpoint = monitor["spec"]["podMetricsEndpoints"][0]
        nodes = (component.get("multinode") or {}).get("nodeCount", 1)
        if component["type"] == "frontend":
            args = component["podTemplate"]["spec"]["containers"][0]["args"]
            assert endpoint["targetPort"] == int(args[args.index("--http-port") + 1])
        else:
            assert endpoint["targetPort"] == monitoring.SYSTEM_PORT
            keep = [r for r in endpoint.get("relabelings", []) if r["action"] == "keep"]
            if nodes > 1:  # only the leader runs the Dynamo runtime; its Grove clique ends in -ldr
                assert keep == [{"action": "keep", "sourceLabels": [monitoring.CLIQUE_LABEL_META], "regex": ".*-ldr"}]
            else:
                assert keep == []
    # the old form: pods labelled only by the operator are selected by none of ours
    assert selected_by(monitors, {"nvidia.com/metrics-enabled": "true"}) == []


def test_platform_monitors_cover_dcgm_and_the_dra_driver(rendered):
    objects = rendered["gb300-disagg"].objects
    dcgm = by_kind(objects, "ServiceMonitor")
    assert [m["spec"]["selector"]["matchLabels"] for m in dcgm] == [{"app": "nvidia-dcgm-exporter"}]
    assert dcgm[0]["spec"]["namespaceSelector"] == {"matchNames": ["gpu-operator"]}
    dra = {
        m["spec"]["selector"]["matchLabels"]["dra-driver-nvidia-gpu-component"]: m
        for m in by_kind(objects, "PodMonitor")
        if "namespaceSelector" in m["spec"]
    }
    assert sorted(dra) == ["controller", "kubelet-plugin"]
    release = recipe_file("platform/monitoring.yaml")["kubePrometheusStack"]["releaseLabel"]
    for m in by_kind(objects, "PodMonitor") + dcgm + by_kind(objects, "PrometheusRule"):
        assert release.items() <= m["metadata"]["labels"].items(), "kube-prometheus-stack selects by release label"


def test_dashboards_are_valid_json_and_query_published_metrics(rendered):
    maps = [
        m
        for m in by_kind(rendered["gb300-disagg"].objects, "ConfigMap")
        if (m["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"
    ]
    assert len(maps) == 1
    for text in maps[0]["data"].values():
        dashboard = json.loads(text)
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        assert exprs and all(re.findall(r"[a-z_]+(?=\{)", e) for e in exprs)
        for e in exprs:
            names = {n.removesuffix("_bucket") for n in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", e)}
            assert names <= PUBLISHED_METRICS, names - PUBLISHED_METRICS
    for name, d in recipe_file("platform/monitoring.yaml")["dashboards"].items():
        assert re.fullmatch(
            r"https://raw\.githubusercontent\.com/ai-dynamo/dynamo/[0-9a-f]{40}/deploy/observability/"
            r"grafana_dashboards/[\w-]+\.json",
            d["url"],
        ), f"{name}: pinned to a commit"


def test_alert_rules_use_published_metrics_and_stack_thresholds():
    r = render_with("gb300-disagg", monitoring={"alerts": {"ttftP95Seconds": 12}})
    rules = by_kind(r.objects, "PrometheusRule")[0]["spec"]["groups"][0]["rules"]
    names = {x["alert"] for x in rules}
    assert {
        "KimiK3TTFTHigh",
        "KimiK3ITLHigh",
        "KimiK3RequestsQueued",
        "KimiK3KVCacheFull",
        "KimiK3WorkerRestarted",
        "KimiK3ComputeDomainUnhealthy",
    } <= names
    for x in rules:
        used = {n.removesuffix("_bucket") for n in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", x["expr"])}
        assert used and used <= PUBLISHED_METRICS, (x["alert"], used)
    ttft = next(x for x in rules if x["alert"] == "KimiK3TTFTHigh")
    assert ttft["expr"].endswith("> 12") and 'namespace="kimi-k3"' in ttft["expr"]


def test_monitoring_off_or_existing():
    none = render_with("gb300", monitoring={"stack": "none"})
    assert not [x for x in none.resources if "monitoring" in x["type"] or ":monitoring:" in x["urn"]]
    existing = render_with("gb300", monitoring={"stack": "existing"})
    charts = [x["inputs"]["name"] for x in existing.resources if x["type"] == "kubernetes:helm.sh/v3:Release"]
    assert "kube-prometheus-stack" not in charts and by_kind(existing.objects, "PodMonitor")
