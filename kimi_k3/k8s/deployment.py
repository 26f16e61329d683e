"""Kubernetes objects of the serving graph, as plain dicts (pure; components only register them)."""

from __future__ import annotations

import math

from kimi_k3.facts.images import kube_arch, runtime_user
from kimi_k3.facts.sglang import ENGINE_MODULES
from kimi_k3.graph.compile_cache import compile_cache_spec
from kimi_k3.graph.model import Role, ServingGraph
from kimi_k3.k8s.monitoring import ROLE_LABEL, role_labels
from kimi_k3.k8s.node_local import DRAFTER_PREFETCH_PORT, PREFETCH_PORT, node_local_dir, remote_cache_path
from kimi_k3.k8s.objects import Obj, _arch_requirement, _env, _meta, _node_affinity, _resources
from kimi_k3.names import (
    CACHE_VOLUME,
    CHANNEL_CLAIM,
    CLIQUE_KEY,
    COMPILE_CACHE_VOLUME,
    GRAPH_LABEL,
    HEALTH_PORT,
    NAMES,
    NVLINK_GROUP_LABEL,
    REMOTE_CACHE_VOLUME,
)

PROBE_PERIOD_SECONDS = 10


ZONE_LABEL = "topology.kubernetes.io/zone"  # well-known label; kubelet/cloud provider sets it on every EKS node


def compute_domain_name(graph: ServingGraph, role: Role) -> str:
    if graph.provided_compute_domain is not None:  # the provider's, claimed by every role
        return graph.provided_compute_domain.name
    return f"{graph.name}-{role.compute_domain}"


def channel_template_name(graph: ServingGraph, role: Role) -> str:
    if graph.provided_compute_domain is not None:
        return graph.provided_compute_domain.channel_template
    return f"{compute_domain_name(graph, role)}-channel"


def runtime_security_context() -> Obj:
    """Containers of the Dynamo runtime image (frontend, workers, fabric preflight): its own USER (uid 1000, gid 0:
    recipes/facts/images.yaml runtime_user) written out, so the uid the shared compile cache is prepared for is the one
    that runs. No capabilities: added ones never reach a non-root process (no ambient set; kubernetes/kubernetes
    #56374), which is why IPC_LOCK/SYS_RESOURCE are gone; locked memory comes from the runtime's RLIMIT_MEMLOCK."""
    uid, gid = runtime_user()
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
    }


def smoke_block_size(graph: ServingGraph) -> int:
    """The largest KV block any worker runs (its --block-size, as vLLM runs it): the smoke test's cache-hit probe
    spans whole blocks of it, in the Job and in the rehearsal alike."""
    return max(r.block_size for r in graph.roles)


def compute_domain(graph: ServingGraph, key: str) -> Obj:
    """The ComputeDomain every role with `compute_domain == key` claims (one per graph when KV moves over NVLink)."""
    role = next(r for r in graph.roles if r.compute_domain == key)
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": _meta(graph, compute_domain_name(graph, role)),
        "spec": {
            "numNodes": 0,  # 0 = IMEX daemons join on demand (driver >= 25.8 DNS-name mode)
            "channel": {
                "allocationMode": "Single",
                "resourceClaimTemplate": {"name": channel_template_name(graph, role)},
            },
        },
    }


def _frontend_placement(graph: ServingGraph) -> Obj:
    """The frontend (HTTP, tokenizer, KV router) in the workers' zone: every request, streamed token and KV event
    passes between them, and in eks the GPUs sit in a Local Zone whose only nodes are the GPU nodes. A required pod
    affinity on the zone to the graph's workers (any cluster), the zone itself where it is known (eks), the GPU taint
    tolerated (it runs on a GPU node there, beside a worker, on its small CPU/memory request)."""
    fe = graph.frontend
    node_terms = [_arch_requirement(fe.arch)] + (
        [{"key": ZONE_LABEL, "operator": "In", "values": [fe.zone]}] if fe.zone else []
    )
    same_zone = [
        {
            "labelSelector": {
                "matchLabels": {GRAPH_LABEL: graph.name},
                "matchExpressions": [
                    {"key": ROLE_LABEL, "operator": "In", "values": sorted(r.key for r in graph.roles)}
                ],
            },
            "topologyKey": ZONE_LABEL,
        }
    ]
    return {
        "affinity": {
            **_node_affinity(*node_terms),
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": same_zone},
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


def _frontend_component(graph: ServingGraph) -> Obj:
    fe = graph.frontend
    container = {
        "name": "main",
        "image": graph.image,
        "command": ["python3", "-m", "dynamo.frontend"],
        "args": list(fe.args),
        "env": _env(fe.env),
        "securityContext": runtime_security_context(),
    }
    # The frontend loads tokenizer and config from the local paths workers register (HF_HUB_OFFLINE=1): it
    # mounts the same cache, read-only, at the same path.
    container["volumeMounts"] = [{"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, "readOnly": True}]
    resources = _resources(None, fe.cpu, fe.memory)
    if resources:
        container["resources"] = resources
    # Labels our PodMonitors select on (kimi_k3/k8s/monitoring.py), not the operator's (#10596).
    component = {
        "name": fe.component,
        "type": "frontend",
        "replicas": fe.replicas,
        "podTemplate": {
            "metadata": {
                "labels": {GRAPH_LABEL: graph.name, **role_labels("frontend")},
                **weights_pod_metadata(graph),
            },
            "spec": {
                **_frontend_placement(graph),
                **weights_reader(graph),
                "volumes": [
                    {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": NAMES["pvc"], "readOnly": True}}
                ],
                "containers": [container],
            },
        },
    }
    if graph.runtime_version:
        component["runtimeVersionOverride"] = graph.runtime_version
    return component


def _gpu_group_placement(graph: ServingGraph, role: Role, group_labels: dict[str, str]) -> Obj:
    """Where one TP group of `role` runs: its GPU product and CPU architecture, one NVLink clique for the pods carrying
    `group_labels`, the GPU taint tolerated, the role's ComputeDomain channel. Workers and their fabric preflight
    share it, so the preflight tests the placement the workers get."""
    gpu_affinity = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": [graph.platform.gpu_product_label]},
                    _arch_requirement([kube_arch(graph.platform.arch)]),
                ]
            }
        ]
    }
    facts = graph.node_facts  # the cloud's: labels GPU pods must select, devices they must claim (empty on EKS)
    placement: Obj = {"nodeSelector": dict(facts.gpu_node_labels)} if facts.gpu_node_labels else {}
    affinity: Obj = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": gpu_affinity}}
    channel = []
    if _claims_domain(graph, role):
        # Nothing in the scheduler keeps a TP group inside one NVLink domain: require a shared clique.
        same_clique = [{"labelSelector": {"matchLabels": group_labels}, "topologyKey": CLIQUE_KEY}]
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": same_clique}
        channel = [{"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template_name(graph, role)}]
    return {
        **placement,
        "affinity": affinity,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "resourceClaims": channel
        + [{"name": c.name, "resourceClaimTemplateName": c.template} for c in facts.device_claims],
    }


def _claims_domain(graph: ServingGraph, role: Role) -> bool:
    """Whether `role`'s pods claim a ComputeDomain channel (not where NVLink ends at the node: H200)."""
    return graph.provided_compute_domain is not None or bool(role.compute_domain)


def weights_pod_metadata(graph: ServingGraph) -> Obj:
    """Annotations a pod mounting the weights needs on this cloud (GKE: the GCS FUSE sidecar's), else nothing."""
    ann = dict(graph.node_facts.weights_pod_annotations)
    return {"annotations": ann} if ann else {}


def weights_reader(graph: ServingGraph) -> Obj:
    """The service account of a pod that reads the weights, where the cloud names one (GKE: Workload Identity)."""
    sa = graph.node_facts.worker_service_account
    return {"serviceAccountName": sa} if sa else {}


def gpu_claims(graph: ServingGraph, role: Role) -> list[Obj]:
    """The container claims of a GPU pod: its ComputeDomain channel (if any), then the cloud's devices (GKE DRANET)."""
    channel = [{"name": CHANNEL_CLAIM}] if _claims_domain(graph, role) else []
    return channel + [{"name": c.name} for c in graph.node_facts.device_claims]


def _worker_component(graph: ServingGraph, role: Role) -> Obj:
    container = {
        "name": "main",
        "image": graph.image,
        "command": ["python3", "-m", ENGINE_MODULES[role.engine]],
        "args": list(role.args),
        "env": _env(role.env),
        "resources": {
            **_resources(role.gpus_per_node, role.cpu, role.memory, role.efa_devices),
            "claims": gpu_claims(graph, role),
        },
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, "readOnly": True}]
        + (
            [{"name": REMOTE_CACHE_VOLUME, "mountPath": remote_cache_path(graph), "readOnly": True}]
            if graph.node_local_weights
            else []
        )
        + (
            [
                {
                    "name": COMPILE_CACHE_VOLUME,
                    "mountPath": compile_cache_spec()["mount_path"],
                    "subPath": role.compile_cache_key,
                }
            ]  # kubelet creates it on first use, through the access point (as 1000:0)
            if graph.compile_cache
            else []
        ),
        "startupProbe": {
            "httpGet": {"path": "/health", "port": HEALTH_PORT},
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 10,
            "failureThreshold": math.ceil(graph.startup_probe_seconds / PROBE_PERIOD_SECONDS),
        },
        "securityContext": runtime_security_context(),
    }
    pod_meta: Obj = {
        "labels": {GRAPH_LABEL: graph.name, NVLINK_GROUP_LABEL: role.nvlink_group, **role_labels(role.key)}
    }
    facts = graph.node_facts
    annotations = dict(role.pod_annotations) | dict(facts.weights_pod_annotations) | dict(facts.gpu_pod_annotations)
    if annotations:
        pod_meta["annotations"] = annotations
    component = {
        "name": role.component,
        "type": role.type,
        "replicas": role.replicas,
        "multinode": {"nodeCount": role.nodes_per_replica},
        "sharedMemorySize": role.shared_memory_size,
        "podTemplate": {
            "metadata": pod_meta,
            "spec": {
                **_gpu_group_placement(graph, role, {NVLINK_GROUP_LABEL: role.nvlink_group}),
                **weights_reader(graph),
                **_fs_group(graph),
                "terminationGracePeriodSeconds": 60,
                "volumes": _weights_volumes(graph)
                + (
                    [{"name": COMPILE_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": NAMES["compile_cache"]}}]
                    if graph.compile_cache
                    else []
                ),
                "containers": [container],
            },
        },
    }
    if graph.runtime_version:
        component["runtimeVersionOverride"] = graph.runtime_version
    return component


def _fs_group(graph: ServingGraph) -> Obj:
    """The pod's fsGroup where the cloud's shared volume applies it (GKE Filestore), written out rather than left to
    the operator's default; OnRootMismatch: kubelet walks the shared tree only while its root is not yet the group's."""
    group = graph.node_facts.pod_fs_group
    return {} if group is None else {"securityContext": {"fsGroup": group, "fsGroupChangePolicy": "OnRootMismatch"}}


def _weights_volumes(graph: ServingGraph) -> list[Obj]:
    """The workers' model cache: the bucket's read-only PVC, or (node-local weights) this node's copy on the
    instance-store NVMe, read-only, at the same path, with the bucket beside it (files not yet copied are links
    into it). Type Directory: a worker never starts on a node whose prefetch pod has not laid the tree out."""
    pvc = {"persistentVolumeClaim": {"claimName": NAMES["pvc"], "readOnly": True}}
    if not graph.node_local_weights:
        return [{"name": CACHE_VOLUME, **pvc}]
    return [
        {"name": CACHE_VOLUME, "hostPath": {"path": node_local_dir(graph), "type": "Directory"}},
        {"name": REMOTE_CACHE_VOLUME, **pvc},
    ]


def weights_peers_network_policy(graph: ServingGraph) -> Obj:
    """Only the weights-prefetch DaemonSet's own pods reach its peer port (the peer server authenticates no one).
    Enforced on EKS by the VPC CNI's network policy agent (vpc-cni add-on `enableNetworkPolicy`, components/aws)."""
    peers = {"matchLabels": {"app.kubernetes.io/name": NAMES["prefetch"]}}  # the DaemonSet's selector
    ports = [PREFETCH_PORT, *([DRAFTER_PREFETCH_PORT] if graph.drafter else [])]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(graph, NAMES["peers"]),
        "spec": {
            "podSelector": peers,
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": peers}],
                    # The drafter's copy has its own peer port (kimi-k3:serving.speculation, node_local.py).
                    "ports": [{"protocol": "TCP", "port": p} for p in ports],
                }
            ],
        },
    }


def graph_deployment(graph: ServingGraph) -> Obj:
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": _meta(
            graph,
            graph.name,
            annotations={
                # The graph-ready Job waits instead: a waitFor condition could only succeed or time out (4 h), the
                # Job fails `up` within minutes naming the pod that cannot run (kimi_k3/pods/graph_watch.py).
                "pulumi.com/skipAwait": "true",
                # An out-of-band edit (kubectl edit/patch) owns the fields it changed: without force, `up` fails with
                # a Server-Side Apply conflict instead of restoring them (provider pkg/metadata/annotations.go
                # patchForce; tools/engine/test_fault_lane.py, drift). Fields we do not write (planner replicas) stay.
                "pulumi.com/patchForce": "true",
                "kimi-k3.io/recipe": graph.recipe,
                "kimi-k3.io/gpus": str(graph.gpus),
                "kimi-k3.io/nodes": str(graph.nodes),
                **provided_domain_annotations(graph),
            },
        ),
        "spec": {"backendFramework": graph.engine, "components": _components(graph)},
    }


PROVIDED_DOMAIN_ANNOTATION = "kimi-k3.io/provided-compute-domain"  # namespace/name: the rules read it


def provided_domain_annotations(graph: ServingGraph) -> dict[str, str]:
    """The assumption a graph on a provider's ComputeDomain rests on, stated on the graph (none otherwise)."""
    p = graph.provided_compute_domain
    if p is None:
        return {}
    return {
        PROVIDED_DOMAIN_ANNOTATION: p.id,
        f"{PROVIDED_DOMAIN_ANNOTATION}-channel": p.channel_template,
        f"{PROVIDED_DOMAIN_ANNOTATION}-nodes": str(p.nodes),
    }


def _components(graph: ServingGraph) -> list[Obj]:
    workers = [_worker_component(graph, r) for r in graph.roles]
    if graph.autoscaling is None:
        return [_frontend_component(graph)] + workers
    from kimi_k3.facts.images import image_facts
    from kimi_k3.k8s import planner as k8s_planner

    # The planner runs beside the controllers (eks: the system nodes), on an architecture its image is built for.
    built = image_facts(graph.autoscaling.image).arch
    arches = [a for a in graph.side_arch if built is None or a in built]
    planner = k8s_planner.planner_component(
        graph, {GRAPH_LABEL: graph.name, **role_labels("planner")}, _node_affinity(_arch_requirement(arches))
    )
    # The planner last: the workers keep their positions in spec.components (a diff shows only what changed).
    return [_frontend_component(graph)] + [k8s_planner.hand_over_replicas(w) for w in workers] + [planner]


# ------------------------------------------------------------------------------------------ fabric preflight
