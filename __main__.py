"""kimi-k3: NVIDIA Dynamo serving Kimi K3 on GB200/GB300 NVL72. Thin shell: typed config in, components out."""

import signal
import threading

import pulumi
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks as runtime_mocks
from pulumi.runtime import settings as runtime_settings

from components.aws.cluster import GpuCluster, GpuClusterArgs
from components.aws.storage import ModelStorage, ModelStorageArgs
from components.cluster import Cluster, ClusterArgs
from components.gcp.cluster import GkeCluster, GkeClusterArgs
from components.gcp.storage import GkeWorkloads, GkeWorkloadsArgs
from components.model_cache import ModelCache, ModelCacheArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.platform import Addons, AddonsArgs
from components.serving_graph import BenchmarkArgs, ServingGraph, ServingGraphArgs, SmokeTestArgs
from kimi_k3 import names
from kimi_k3.aws import nodes as aws
from kimi_k3.aws import storage as aws_storage
from kimi_k3.blueprint import Blueprint
from kimi_k3.config import stack
from kimi_k3.config.stack_files import in_stack_file
from kimi_k3.errors import UserError
from kimi_k3.gcp import plan as gke_plan
from kimi_k3.k8s import monitoring, node_local

# Ctrl-C reaches every process of the terminal's group: the CLI cancels the update and ends this program itself,
# so under the real engine it is ignored here (Python's default printed a KeyboardInterrupt traceback into `pulumi
# up`: tools/engine/test_fault_lane.py, sigint); not under the mocks (`kimi-k3 render`, tests) or off the main thread.
real_engine = not isinstance(runtime_settings.get_monitor(), runtime_mocks.MockMonitor)
if real_engine and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

raw = runtime_config.CONFIG.get()
try:  # validate everything before the first resource is registered: bad input is one message, never a traceback
    blueprint = Blueprint.from_engine(pulumi.get_stack(), raw, {k for k in raw if runtime_config.is_config_secret(k)})
except UserError as err:
    raise pulumi.RunError(in_stack_file(pulumi.get_stack(), err)) from None
except Exception as err:  # noqa: BLE001 - a check that failed to say what is wrong is still reported in one line
    raise pulumi.RunError(
        f"Pulumi.{pulumi.get_stack()}.yaml: the configuration could not be validated "
        f"({type(err).__name__}: {err}); this is a kimi-k3 bug, please report it"
    ) from None
cfg, graph, cache_gi, addons = blueprint.config, blueprint.graph, blueprint.cache_gi, blueprint.addons
eks_mode = blueprint.eks
storage_kind = cfg.storage.resolved_kind
gpu_plan = blueprint.gpu_nodes

settings = pulumi.Config("kimi-k3")
# Parked (`make park`): only the model cache's filesystem and the network it sits in stay; the next `up` deletes the
# rest (EKS, nodes, NAT, add-ons, graph), and unparking rebuilds it onto the same weights (docs/aws.md, Teardown).
parked = eks_mode and cfg.cluster.parked
eks = None
if eks_mode:
    eks = GpuCluster(
        "kimi-k3-eks",
        GpuClusterArgs(
            cfg.cluster, gpu_plan, list(blueprint.subnets), graph.platform.name, blueprint.endpoint, parked=parked
        ),
    )
gke = None
if blueprint.gke_nodes is not None:  # gke mode: the same seam as eks (a kubeconfig, a storage class, node facts)
    gke = GkeCluster("kimi-k3-gke", GkeClusterArgs(cfg, blueprint.gke_nodes))
if parked:
    pulumi.export("parked", True)
    pulumi.export("gpus", 0)
    pulumi.export("nodes", 0)
    if storage_kind != "existing":
        kept = ModelStorage(
            "kimi-k3-storage",
            ModelStorageArgs(
                cfg.storage,
                None,
                eks.vpc.id,
                cfg.cluster.vpc_cidr,
                eks.private_subnet_ids[aws_storage.storage_zone(cfg)],
                [],
                graph.namespace,
                names.NAMES["pvc"],
                "/" + node_local.model_dir_name(graph),
                aws_storage.pv_size_gi(cfg, cache_gi),
                parked=True,
            ),
            provider=None,
        )
        pulumi.export("filesystemId", kept.filesystem_id)
        if kept.bucket_name is not None:
            pulumi.export("weightsBucket", kept.bucket_name)
else:
    kubeconfig = eks.kubeconfig if eks else gke.kubeconfig if gke else settings.get_secret("kubeconfig")
    cluster = Cluster("kimi-k3-cluster", ClusterArgs(cfg.cluster, graph, kubeconfig))
    k8s_only = pulumi.ResourceOptions(providers=[cluster.provider])

    # Controllers and the download Job run on the system nodes; nothing here waits for the GPU node group.
    # (and the cluster's network add-ons: pod IPs, Service routing, DNS).
    system_nodes = [eks.system_nodes, *eks.network_addons] if eks else [gke.system_nodes, gke.nat] if gke else []
    gpu_pool = [eks.gpu_nodes] if eks else [gke.gpu_nodes] if gke else []
    system_labels = aws.SYSTEM_LABELS if eks else gke_plan.SYSTEM_LABELS if gke else None

    # Storage: a protected bucket or filesystem + static PV (eks), or an existing ReadWriteMany class.
    # Storage kind s3: a retained bucket that EC2 fetchers fill from the Hub from t=0, independent of the cluster.
    # Filesystems live in the GPU zone unless it is a Local Zone (no FSx/EFS there): then in the Region, across the link.
    storage_class, storage_ready, storage = cfg.storage.storage_class, [], None
    if eks and storage_kind != "existing":
        storage = ModelStorage(
            "kimi-k3-storage",
            ModelStorageArgs(
                cfg.storage,
                eks.cluster.name,
                eks.vpc.id,
                cfg.cluster.vpc_cidr,
                eks.private_subnet_ids[aws_storage.storage_zone(cfg)],
                eks.system_subnet_ids,
                graph.namespace,
                names.NAMES["pvc"],
                "/" + node_local.model_dir_name(graph),
                aws_storage.pv_size_gi(cfg, cache_gi),
                wait_for=system_nodes,
                region=cfg.cluster.region,
                efs_mount_options=aws_storage.efs_mount_options(cfg),
                hf_token=settings.require_secret("hfToken"),
                model_repo=cfg.model.repo,
                model_revision=cfg.model.revision,
                hub_version=cfg.model.hub_version,
                fetcher_subnet_id=eks.system_subnet_ids[0],
                egress_ready=eks.egress_ready,
                oidc=eks.oidc,
                compile_cache=graph.compile_cache,
                namespace=cluster.namespace,
                fetch_deadline_seconds=cfg.serving.download_timeout_seconds,
                # A speculative drafter rides with the weights, under its own revision's prefix.
                drafter=(d.repo, d.revision, d.cache_dir) if (d := graph.drafter) else None,
            ),
            provider=cluster.provider,
        )
        storage_class, storage_ready = storage.storage_class, storage.ready
    if gke:  # the bucket (GCS FUSE PV, static binding), its IAM, the compile cache, the RDMA claim or networks
        storage = GkeWorkloads(
            "kimi-k3-gcp",
            GkeWorkloadsArgs(
                cfg, graph, blueprint.gke_nodes, cache_gi, getattr(gke, "rdma_subnets", ()), gke.network_name
            ),
            cluster.provider,
            cluster.namespace,
            opts=pulumi.ResourceOptions(depends_on=[gke.cluster]),
        )
        storage_class = "" if storage_kind == "gcs" else storage_class
        storage_ready = storage.ready
    platform = Addons("kimi-k3-platform", AddonsArgs(addons, wait_for=system_nodes), opts=k8s_only)
    cache = ModelCache(
        "kimi-k3-model-cache",
        ModelCacheArgs(
            graph,
            settings.require_secret("hfToken"),
            storage_class,
            cache_gi,
            cfg.model.download_image,
            cfg.model.hub_version,
            fetch_from_hub=not (
                storage and (storage_kind == "s3" or (storage_kind == "fsx-lustre" and cfg.storage.fsx.s3_import_path))
            ),
            wait_for=[cluster.namespace, *storage_ready, *system_nodes],
            node_selector=system_labels,
            wait_seconds=cfg.serving.download_timeout_seconds if storage and storage_kind == "s3" else 0,
        ),
        opts=k8s_only,
    )
    # ComputeDomains and the graph need the DRA driver (ComputeDomain CRD, channel templates) and the Dynamo
    # operator (DGD CRD, webhooks); the graph's pods also need the GPU nodes.
    operators = [platform.releases[k] for k in ("draDriver", "dynamoPlatform") if k in platform.releases]
    serving = ServingGraph(
        "kimi-k3-serving",
        ServingGraphArgs(
            graph,
            platform_ready=[cluster.namespace, *operators],
            workers_ready=[
                cache.download,
                *gpu_pool,
                *(storage.compile_cache_ready if storage else []),
            ],
            preflight=cfg.serving.preflight,
            nodes_ready=gpu_pool,
            gpu_nodes_ready=[cluster.namespace, *gpu_pool],
            gpu_node_selector=aws.gpu_node_labels(graph.platform.name)
            if eks
            else {**gke_plan.gpu_node_labels(blueprint.gke_nodes), **dict(graph.node_facts.gpu_node_labels)}
            if gke
            else None,
            smoke_test=SmokeTestArgs(cfg.model.download_image, system_labels) if cfg.serving.smoke_test else None,
            watch_image=cfg.model.download_image,
            node_selector=system_labels,
            benchmark=BenchmarkArgs(cfg.serving.benchmark, system_labels) if cfg.serving.benchmark.enabled else None,
            weights_ready=[cache.download, *storage_ready],
            provided_domain=cluster.provided_domain,
        ),
        opts=k8s_only,
    )

    # Monitors, alert rules and dashboards for every serving pod; kube-prometheus-stack unless the cluster has its own.
    if stack.stack_mode(cfg) != "none":
        monitoring_data, alert_thresholds = monitoring.settings(cfg)
        addon_ns = {a.key: a.namespace for a in addons}
        Monitoring(
            "kimi-k3-monitoring",
            MonitoringArgs(
                graph,
                stack.stack_mode(cfg),
                monitoring_data,
                alert_thresholds,
                addon_ns["gpuOperator"],
                addon_ns["draDriver"],
                wait_for=[cluster.namespace, *system_nodes],
            ),
            opts=k8s_only,
        )

    frontend = f"{graph.frontend_service}.{graph.namespace}.svc.cluster.local:{graph.frontend.http_port}"
    pulumi.export("namespace", graph.namespace)
    pulumi.export("frontendService", frontend)
    pulumi.export("frontendEndpoint", f"http://{frontend}/v1")
    pulumi.export("modelPath", graph.model_path)
    pulumi.export("gpus", graph.gpus)
    pulumi.export("nodes", graph.nodes)
    pulumi.export(
        "roles",
        {
            r.key: {
                "component": r.component,
                "tp": r.tp,
                "nodesPerReplica": r.nodes_per_replica,
                "replicas": r.replicas,
                "gpus": r.gpus,
                "nodes": r.nodes,
            }
            for r in graph.roles
        },
    )
    pulumi.export("addons", {a.key: {"chart": a.chart, "version": a.version, "installed": a.install} for a in addons})
    if eks:
        pulumi.export("kubeconfig", eks.kubeconfig)  # secret
        pulumi.export("clusterName", eks.cluster.name)
        pulumi.export(
            "gpuNodes",
            {
                "instanceType": gpu_plan.instance.name,
                "capacityType": gpu_plan.capacity_type,
                "nodes": gpu_plan.nodes,
                "reservationNodes": gpu_plan.max_nodes,
            },
        )
    if gke:
        pulumi.export("kubeconfig", gke.kubeconfig)  # secret
        pulumi.export("clusterName", gke.cluster.name)
        pulumi.export(
            "gpuNodes",
            {
                "machineType": blueprint.gke_nodes.machine_type,
                "nodes": blueprint.gke_nodes.nodes,
                "reservationNodes": blueprint.gke_nodes.reservation_nodes,
            },
        )
    if storage and not gke:
        pulumi.export("filesystemId", storage.filesystem_id)
    if storage and storage.bucket_name is not None:
        pulumi.export("weightsBucket", storage.bucket_name)
