"""Monitoring: kube-prometheus-stack (optional), our PodMonitors/ServiceMonitors, alert rules and dashboards."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.kubernetes import register
from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s import monitoring


class MonitoringArgs:
    def __init__(
        self,
        graph: ServingGraph,
        stack: str,
        settings: dict[str, Any],
        alerts: dict[str, Any],
        gpu_operator_ns: str,
        dra_ns: str,
        wait_for: Sequence[pulumi.Resource] = (),
    ):
        """
        :param graph: the serving graph whose roles are monitored.
        :param stack: `install` (kube-prometheus-stack here) or `existing` (a Prometheus Operator already runs).
        :param settings: recipes/platform/monitoring.yaml (chart pin, release label, upstream dashboards).
        :param alerts: alert thresholds (recipes/platform/monitoring.yaml alerts + kimi-k3:monitoring.alerts).
        :param gpu_operator_ns: namespace of the DCGM exporter. :param dra_ns: namespace of the DRA driver.
        :param wait_for: the namespace (our monitors live beside the graph).
        """
        self.graph = graph
        self.stack = stack
        self.settings = settings
        self.alerts = alerts
        self.gpu_operator_ns = gpu_operator_ns
        self.dra_ns = dra_ns
        self.wait_for = list(wait_for)


class Monitoring(pulumi.ComponentResource):
    """Scrape every serving pod by the labels we give it, alert on latency, queueing, KV usage, restarts and
    ComputeDomain health, and show Dynamo's dashboards."""

    def __init__(self, name: str, args: MonitoringArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:monitoring:Monitoring", name, None, opts)
        s, g, a = args.settings, args.graph, args.alerts
        chart = s["kubePrometheusStack"]
        deps = list(args.wait_for)
        if args.stack == "install":
            dashboards = {k: {"url": v["url"]} for k, v in sorted(s["dashboards"].items())}
            release = k8s.helm.v3.Release(
                f"{name}-stack",
                name=chart["release"],
                chart=chart["chart"],
                version=str(chart["version"]),
                namespace=chart["namespace"],
                create_namespace=True,
                atomic=True,
                timeout=900,
                repository_opts={"repo": chart["repo"]},
                values={
                    "grafana": {
                        "sidecar": {"dashboards": {"enabled": True, "searchNamespace": "ALL"}},
                        "dashboardProviders": {
                            "dashboardproviders.yaml": {
                                "apiVersion": 1,
                                "providers": [
                                    {
                                        "name": "dynamo",
                                        "folder": "Dynamo",
                                        "type": "file",
                                        "options": {"path": "/var/lib/grafana/dashboards/dynamo"},
                                    }
                                ],
                            }
                        },
                        "dashboards": {"dynamo": dashboards},
                    }
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            )
            deps.append(release)
        label = dict(chart["releaseLabel"])
        child = pulumi.ResourceOptions(parent=self, depends_on=deps)
        objects = [
            *monitoring.pod_monitors(g, label),
            *monitoring.platform_monitors(g, label, args.gpu_operator_ns, args.dra_ns),
            monitoring.alert_rules(
                g,
                label,
                a["ttftP95Seconds"],
                a["itlP95Seconds"],
                a["maxQueuedRequests"],
                a["maxKvCacheUsagePercent"],
                args.dra_ns,
            ),
            monitoring.dashboard_config_map(g, "kimi-k3-overview", monitoring.overview_dashboard(g)),
        ]
        for obj in objects:
            register(f"{name}-{obj['metadata']['name'].removeprefix('kimi-k3-')}-{obj['kind'].lower()}", obj, child)
        self.register_outputs({"stack": args.stack, "monitors": [o["metadata"]["name"] for o in objects]})
