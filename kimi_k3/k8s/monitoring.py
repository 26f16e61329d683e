"""Monitoring of the serving graph as plain Kubernetes objects (pure; components/monitoring.py registers them).

What is scraped, and why that way:
- frontend: `/metrics` on its HTTP port (Dynamo: `dynamo_frontend_*`, on the frontend's HTTP port);
- workers (prefill, decode, aggregated): `/metrics` on the system port 9090 (`dynamo_component_*`). On a
  multinode group only the leader runs the Dynamo runtime: the operator names Grove cliques `<component>-ldr` /
  `<component>-wkr` (deploy/operator consts GroveRoleSuffixLeader/Worker), so worker pods of multinode roles
  are kept only when their `grove.io/podclique` label ends in `-ldr`;
- DCGM exporter (GPU Operator): ServiceMonitor on `app: nvidia-dcgm-exporter`, port `gpu-metrics` (Dynamo's
  deploy/observability DASHBOARD_METRICS.md);
- DRA driver: controller `:8080/metrics`, kubelet plugin compute-domain `:8081/metrics` (chart 0.4.1 values).
Each serving pod is selected by labels this program sets on its pod template (`kimi-k3.io/role`), never by the
operator's own PodMonitor, which once skipped disaggregated roles (ai-dynamo/dynamo#10596).
"""

from __future__ import annotations

import json
from typing import Any

from kimi_k3.graph.model import ServingGraph

Obj = dict[str, Any]
MONITORING_API = "monitoring.coreos.com/v1"
ROLE_LABEL = "kimi-k3.io/role"
PART_OF = {"app.kubernetes.io/part-of": "kimi-k3"}
SYSTEM_PORT = 9090  # Dynamo system server (/health, /metrics) on workers
LEADER_SUFFIX = "-ldr"  # Dynamo operator: Grove clique of a multinode group's leader
CLIQUE_LABEL_META = "__meta_kubernetes_pod_label_grove_io_podclique"
DCGM_SELECTOR = {"app": "nvidia-dcgm-exporter"}
DCGM_PORT = "gpu-metrics"
DRA_COMPONENT_LABEL = "dra-driver-nvidia-gpu-component"
DASHBOARD_LABEL = {"grafana_dashboard": "1"}  # kube-prometheus-stack's Grafana sidecar loads ConfigMaps with it


def role_labels(role_key: str) -> dict[str, str]:
    """Labels every pod of a role carries (set on its pod template by manifests.py)."""
    return {**PART_OF, ROLE_LABEL: role_key}


def _meta(graph: ServingGraph, name: str, release_label: dict[str, str]) -> Obj:
    return {"name": name, "namespace": graph.namespace, "labels": {**PART_OF, **release_label}}


def pod_monitors(graph: ServingGraph, release_label: dict[str, str]) -> list[Obj]:
    """One PodMonitor per serving role: the frontend on its HTTP port, each worker role on 9090 (leaders only
    where the role spans several nodes)."""
    out = [
        {
            "apiVersion": MONITORING_API,
            "kind": "PodMonitor",
            "metadata": _meta(graph, "kimi-k3-frontend", release_label),
            "spec": {
                "selector": {"matchLabels": role_labels("frontend")},
                "podMetricsEndpoints": [
                    {"targetPort": graph.frontend.http_port, "path": "/metrics", "interval": "15s"}
                ],
            },
        }
    ]
    for role in graph.roles:
        endpoint: Obj = {"targetPort": SYSTEM_PORT, "path": "/metrics", "interval": "15s"}
        if role.nodes_per_replica > 1:
            endpoint["relabelings"] = [
                {"action": "keep", "sourceLabels": [CLIQUE_LABEL_META], "regex": f".*{LEADER_SUFFIX}"}
            ]
        out.append(
            {
                "apiVersion": MONITORING_API,
                "kind": "PodMonitor",
                "metadata": _meta(graph, f"kimi-k3-{role.key}", release_label),
                "spec": {"selector": {"matchLabels": role_labels(role.key)}, "podMetricsEndpoints": [endpoint]},
            }
        )
    return out


def platform_monitors(
    graph: ServingGraph, release_label: dict[str, str], gpu_operator_ns: str, dra_ns: str
) -> list[Obj]:
    dcgm = {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": _meta(graph, "kimi-k3-dcgm", release_label),
        "spec": {
            "namespaceSelector": {"matchNames": [gpu_operator_ns]},
            "selector": {"matchLabels": DCGM_SELECTOR},
            "endpoints": [{"port": DCGM_PORT, "path": "/metrics", "interval": "15s"}],
        },
    }
    dra = [
        {
            "apiVersion": MONITORING_API,
            "kind": "PodMonitor",
            "metadata": _meta(graph, f"kimi-k3-dra-{component}", release_label),
            "spec": {
                "namespaceSelector": {"matchNames": [dra_ns]},
                "selector": {"matchLabels": {DRA_COMPONENT_LABEL: component}},
                "podMetricsEndpoints": [{"targetPort": port, "path": "/metrics", "interval": "30s"}],
            },
        }
        for component, port in (("controller", 8080), ("kubelet-plugin", 8081))
    ]
    return [dcgm, *dra]


def _alert(name: str, expr: str, minutes: int, severity: str, summary: str) -> Obj:
    return {
        "alert": name,
        "expr": expr,
        "for": f"{minutes}m",
        "labels": {"severity": severity},
        "annotations": {"summary": summary},
    }


def alert_rules(
    graph: ServingGraph,
    release_label: dict[str, str],
    ttft_p95_seconds: float,
    itl_p95_seconds: float,
    max_queued: int,
    max_kv_usage_percent: float,
    dra_ns: str,
) -> Obj:
    ns = f'namespace="{graph.namespace}"'
    # The KV gauge is a 0.0-1.0 fraction (recipes/facts/metrics.yaml); the threshold is configured in percent.
    kv_fraction = f"{float(max_kv_usage_percent) / 100:g}"
    ttft_p95_seconds, itl_p95_seconds, max_kv_usage_percent = (
        f"{float(x):g}" for x in (ttft_p95_seconds, itl_p95_seconds, max_kv_usage_percent)
    )

    def p95(metric: str) -> str:
        return f"histogram_quantile(0.95, sum by (le) (rate({metric}_bucket{{{ns}}}[5m])))"

    rules = [
        _alert(
            "KimiK3TTFTHigh",
            f"{p95('dynamo_frontend_time_to_first_token_seconds')} > {ttft_p95_seconds}",
            10,
            "warning",
            f"p95 time to first token above {ttft_p95_seconds}s for 10m",
        ),
        _alert(
            "KimiK3ITLHigh",
            f"{p95('dynamo_frontend_inter_token_latency_seconds')} > {itl_p95_seconds}",
            10,
            "warning",
            f"p95 inter-token latency above {itl_p95_seconds}s for 10m",
        ),
        _alert(
            "KimiK3RequestsQueued",
            f"sum(dynamo_frontend_queued_requests{{{ns}}}) > {max_queued}",
            5,
            "warning",
            f"more than {max_queued} requests queued at the frontend for 5m: workers saturated",
        ),
        _alert(
            "KimiK3KVCacheFull",
            f"max(dynamo_component_gpu_cache_usage_percent{{{ns}}}) > {kv_fraction}",
            10,
            "warning",
            f"KV cache above {max_kv_usage_percent}% on a worker for 10m",
        ),
        _alert(
            "KimiK3WorkerRestarted",
            f'increase(kube_pod_container_status_restarts_total{{{ns},container="main"}}[15m]) > 0',
            0,
            "critical",
            "a serving container restarted (each restart reloads ~1.5 TB of weights)",
        ),
        _alert(
            "KimiK3NoRoutableWorker",
            f"absent(dynamo_component_requests_total{{{ns}}})",
            5,
            "critical",
            "no worker exports metrics: nothing the frontend can route to",
        ),
        _alert(
            "KimiK3ComputeDomainUnhealthy",
            f'sum(kube_pod_status_ready{{namespace="{dra_ns}",condition="false"}}) > 0',
            5,
            "critical",
            "a DRA driver / ComputeDomain (IMEX) pod is not Ready: multinode NVLink groups cannot start",
        ),
    ]
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": _meta(graph, "kimi-k3-alerts", release_label),
        "spec": {"groups": [{"name": "kimi-k3", "rules": rules}]},
    }


def _panel(pid: int, title: str, expr: str, unit: str, x: int, y: int) -> Obj:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": "A", "expr": expr, "legendFormat": "{{pod}}"}],
    }


def overview_dashboard(graph: ServingGraph) -> Obj:
    """Our own overview (per role, this namespace); Dynamo's published dashboards come pinned by URL
    (recipes/platform/monitoring.yaml) rather than copied here."""
    ns = 'namespace="$namespace"'
    panels = [
        (
            "TTFT p95",
            f"histogram_quantile(0.95, sum by (le) (rate(dynamo_frontend_time_to_first_token_seconds_bucket{{{ns}}}[5m])))",
            "s",
        ),
        (
            "ITL p95",
            f"histogram_quantile(0.95, sum by (le) (rate(dynamo_frontend_inter_token_latency_seconds_bucket{{{ns}}}[5m])))",
            "s",
        ),
        ("Queued requests", f"sum(dynamo_frontend_queued_requests{{{ns}}})", "short"),
        ("KV cache usage by worker", f"dynamo_component_gpu_cache_usage_percent{{{ns}}}", "percentunit"),
        (
            "Requests/s by worker",
            f'sum by (pod) (rate(dynamo_component_requests_total{{{ns},dynamo_endpoint="generate"}}[5m]))',
            "reqps",
        ),
        (
            "Container restarts",
            f'sum by (pod) (kube_pod_container_status_restarts_total{{{ns},container="main"}})',
            "short",
        ),
    ]
    return {
        "uid": "kimi-k3-overview",
        "title": "Kimi K3 on Dynamo: overview",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "tags": ["kimi-k3", "dynamo"],
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                {"name": "namespace", "type": "constant", "query": graph.namespace, "hide": 2},
            ]
        },
        "panels": [_panel(i + 1, t, e, u, 12 * (i % 2), 8 * (i // 2)) for i, (t, e, u) in enumerate(panels)],
    }


def dashboard_config_map(graph: ServingGraph, name: str, dashboard: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": graph.namespace, "labels": {**PART_OF, **DASHBOARD_LABEL}},
        "data": {f"{name}.json": json.dumps(dashboard, indent=1, sort_keys=True)},
    }


def settings(cfg: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(recipes/platform/monitoring.yaml, alert thresholds with the stack's kimi-k3:monitoring.alerts over the defaults)."""
    from kimi_k3.data import recipe_file

    data = recipe_file("platform/monitoring.yaml")
    overrides = {k: v for k, v in cfg.monitoring.alerts.model_dump(by_alias=True).items() if v is not None}
    return data, {**data["alerts"], **overrides}
