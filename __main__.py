"""kimi-k3: NVIDIA Dynamo serving Kimi K3 on GB200/GB300 NVL72. Thin shell: typed config in, components out."""
import pulumi
from pulumi.runtime import config as runtime_config

from components.cluster import Cluster, ClusterArgs
from components.model_cache import ModelCache, ModelCacheArgs
from components.serving_graph import ServingGraph, ServingGraphArgs
from kimi_k3 import planner
from kimi_k3.config import ConfigError, parse_stack_config
from kimi_k3.graph import build_graph, cache_size_gi

raw = runtime_config.CONFIG.get()
try:  # validate everything before the first resource is registered
    cfg = parse_stack_config(raw, {k for k in raw if runtime_config.is_config_secret(k)})
    graph = build_graph(pulumi.get_stack(), cfg)
except ConfigError as err:
    raise pulumi.RunError(str(err)) from None

settings = pulumi.Config("kimi-k3")
cluster = Cluster("kimi-k3-cluster", ClusterArgs(cfg.cluster, graph, settings.get_secret("kubeconfig")))
in_cluster = pulumi.ResourceOptions(providers=[cluster.provider], depends_on=[cluster.namespace])
cache = ModelCache("kimi-k3-model-cache", ModelCacheArgs(
    graph, settings.require_secret("hfToken"), cfg.storage.storage_class,
    cache_size_gi(cfg, planner.checkpoint_bytes(planner.load_model_facts())),
    cfg.model.download_image, cfg.model.hub_version), opts=in_cluster)
serving = ServingGraph("kimi-k3-serving", ServingGraphArgs(graph, wait_for=[cluster.namespace, cache.download]),
                       opts=in_cluster)

pulumi.export("namespace", graph.namespace)
pulumi.export("frontendService", f"{graph.frontend_service}.{graph.namespace}.svc.cluster.local:{graph.frontend.http_port}")
pulumi.export("modelPath", graph.model_path)
pulumi.export("gpus", graph.gpus)
pulumi.export("nodes", graph.nodes)
pulumi.export("roles", {r.key: {"component": r.component, "tp": r.tp, "nodesPerReplica": r.nodes_per_replica,
                               "replicas": r.replicas, "gpus": r.gpus, "nodes": r.nodes} for r in graph.roles})
