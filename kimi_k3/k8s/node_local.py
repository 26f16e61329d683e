"""deployment.py -> node_local.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Any

from kimi_k3.graph.model import ServingGraph, node_local_disk
from kimi_k3.graph.speculation import NODE_LOCAL_DIR as NODE_LOCAL_DRAFTER_DIR
from kimi_k3.k8s.objects import Obj, _env, _meta, _node_affinity, with_config_checksums
from kimi_k3.names import NAMES, PART_OF, PREFETCH_COMPONENT, PREPULL_COMPONENT, REMOTE_CACHE_VOLUME
from kimi_k3.pods import program_path
from kimi_k3.pods.weights_prefetch import READY_MARKER as PREFETCH_READY_MARKER

# The pre-pull DaemonSet's one running container: the pause image kubelet itself uses (registry.k8s.io/pause,
# 3.10 as pinned by Kubernetes 1.34's kubeadm constants), multi-arch.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


PREFETCH_SCRIPT = program_path("weights_prefetch.py")


PREFETCH_PORT = 8080  # peers copy each other's files over the pod network


DRAFTER_PREFETCH_PORT = 8081  # the drafter's copy (kimi-k3:serving.speculation): its own peer server, same pod IP


def _gpu_node_daemonset(
    graph: ServingGraph,
    name: str,
    component: str,
    node_selector: dict[str, str] | None,
    pod: Obj,
    config_maps: tuple[Obj, ...] = (),
    **meta: Any,
) -> Obj:
    """A DaemonSet on the stack's GPU nodes (the given node selector, else the workers' GPU-product affinity),
    tolerating the GPU taint; `pod` holds the rest of its pod spec, `config_maps` what its pods mount."""
    labels = {**PART_OF, "app.kubernetes.io/component": component}
    selector = {"app.kubernetes.io/name": name}
    placement: Obj = (
        {"nodeSelector": dict(node_selector)}
        if node_selector
        else {
            "affinity": _node_affinity(
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": [graph.platform.gpu_product_label]}
            )
        }
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(graph, name, **meta) | {"labels": labels},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": (
                    with_config_checksums({"labels": {**labels, **selector}}, *config_maps)
                    if config_maps
                    else {"labels": {**labels, **selector}}
                ),
                "spec": {
                    **placement,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    **pod,
                },
            },
        },
    }


def remote_cache_path(graph: ServingGraph) -> str:
    return f"{graph.cache_mount_path}-remote"


def node_local_root(graph: ServingGraph) -> str:
    """Host directory of the node-local copies, on the GPU nodes' local-disk array (the cloud's node facts)."""
    return node_local_disk(graph.node_facts).host_path


def node_local_fs_path(graph: ServingGraph) -> str:
    """Where the node-local root sits within the local-disk array's filesystem (the prefetch's FS_PATH): the
    host path below the array's mount point. A pod whose hostPath resolves elsewhere (no array) copies nothing."""
    disk = node_local_disk(graph.node_facts)
    array, host = disk.array_mount_point.rstrip("/"), disk.host_path
    if not host.startswith(array + "/"):
        raise ValueError(f"{disk.source} host_path = {host}: must be under array_mount_point {array}")
    return host[len(array) :]


def node_local_dir(graph: ServingGraph) -> str:
    """One directory per revision; the workers mount it at the model-cache path."""
    return f"{node_local_root(graph)}/{graph.model_revision}"


def model_dir_name(graph: ServingGraph) -> str:
    """The checkpoint's directory under the model-cache mount (<repo>, or <repo>@<revision>)."""
    return graph.model_path[len(graph.cache_mount_path) + 1 :]


def weights_prefetch_objects(graph: ServingGraph, image: str, node_selector: dict[str, str] | None = None) -> list[Obj]:
    """ConfigMap (kimi_k3/pods/weights_prefetch.py), the headless Service its peers find each other by, and the DaemonSet
    that copies the verified checkpoint onto every GPU node's NVMe. A pod is Ready when its node holds the whole
    checkpoint (or cannot: then its workers read the bucket through links), so the graph that waits for the
    DaemonSet starts on local weights."""
    n = NAMES
    remote = remote_cache_path(graph)
    local_mount = "/node-local"
    script = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(graph, f"{n['prefetch']}-script"),
        "data": {PREFETCH_SCRIPT.name: PREFETCH_SCRIPT.read_text()},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(graph, n["peers"]),
        # Peers are listed before they are Ready: Ready means "done", and they copy from each other first.
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"app.kubernetes.io/name": n["prefetch"]},  # the DaemonSet's pods
            "ports": [{"name": "peer", "port": PREFETCH_PORT}],
        },
    }
    container = _prefetch_container(
        graph,
        "prefetch",
        image,
        port_name="peer",
        source=f"{remote}/{model_dir_name(graph)}",
        local_root=local_mount,
        repo=model_dir_name(graph),
        revision=graph.model_revision,
        port=PREFETCH_PORT,
        fs_path=node_local_fs_path(graph),
        resources={"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "16Gi"}},
    )
    containers = [container]
    d = graph.drafter
    if d is not None:
        # The drafter's copy: the same program, verified against its own manifest (its revision), into
        # <this revision's dir>/drafter/<drafter revision>/, so the workers' one node-local mount holds both and a
        # changed drafter revision never mixes with the old one; the pod is Ready only once both are complete.
        sub = f"{graph.model_revision}/{NODE_LOCAL_DRAFTER_DIR}"
        containers.append(
            _prefetch_container(
                graph,
                "prefetch-drafter",
                image,
                port_name="peer-drafter",
                source=f"{remote}/{d.cache_dir}",
                local_root=f"{local_mount}/{sub}",
                repo=d.cache_dir,
                revision=d.revision,
                port=DRAFTER_PREFETCH_PORT,
                fs_path=f"{node_local_fs_path(graph)}/{sub}",
                resources={"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
            )
        )
        service["spec"]["ports"].append({"name": "peer-drafter", "port": DRAFTER_PREFETCH_PORT})
    # pulumi-kubernetes awaits the rollout (every pod Ready = every node holds the checkpoint); the copy may
    # take longer than its default timeout.
    daemonset = _gpu_node_daemonset(
        graph,
        n["prefetch"],
        PREFETCH_COMPONENT,
        node_selector,
        {
            "containers": containers,
            "terminationGracePeriodSeconds": 5,
            "volumes": [
                {"name": "scripts", "configMap": {"name": f"{n['prefetch']}-script"}},
                {"name": REMOTE_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": n["pvc"], "readOnly": True}},
                {"name": "node-local", "hostPath": {"path": node_local_root(graph), "type": "DirectoryOrCreate"}},
            ],
        },
        config_maps=(script,),
        annotations={"pulumi.com/timeoutSeconds": str(graph.download_timeout_seconds)},
    )
    # A revision change replaces every pod at once: replaced one by one (the default, maxUnavailable 1), the k-th
    # new pod finds its preferred readers still old (404) and reads (N-k+1)/N of the checkpoint from the bucket,
    # (N+1)/2 checkpoints over the Local Zone link in all. Old workers keep the old copy (weights_prefetch.make_room).
    daemonset["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    # It mounts the weights as the workers do: the cloud's pod annotations and reader identity (GKE: GCS FUSE, WI).
    template, facts = daemonset["spec"]["template"], graph.node_facts
    if facts.weights_pod_annotations:
        template["metadata"]["annotations"] = {
            **template["metadata"].get("annotations", {}),
            **dict(facts.weights_pod_annotations),
        }
    if facts.worker_service_account:
        template["spec"]["serviceAccountName"] = facts.worker_service_account
    return [script, service, daemonset]


def _prefetch_container(
    graph: ServingGraph,
    name: str,
    image: str,
    *,
    port_name: str,
    source: str,
    local_root: str,
    repo: str,
    revision: str,
    port: int,
    fs_path: str,
    resources: Obj,
) -> Obj:
    """One kimi_k3/pods/weights_prefetch.py copy: SOURCE (a checkpoint in the bucket, with its manifest) onto
    LOCAL_ROOT/<revision>/<repo> of this node, Ready when that holds every file verified."""
    n = NAMES
    local_mount = "/node-local"
    remote = remote_cache_path(graph)
    env = _env(
        [
            ("SOURCE", source),
            ("LOCAL_ROOT", local_root),
            ("MODEL_REPO", repo),
            ("MODEL_REVISION", revision),
            ("PEERS_DNS", f"{n['peers']}.{graph.namespace}.svc.cluster.local"),
            ("EXPECTED_PEERS", str(graph.nodes)),
            ("PORT", str(port)),
            ("THREADS", "16"),
            # Bounds of every wait on a peer (kimi_k3/pods/weights_prefetch.py): past them a file comes from the bucket.
            ("PEER_JOIN_SECONDS", "60"),
            ("PEER_WAIT_SECONDS", "1800"),
            ("STALL_SECONDS", "120"),
            ("FS_PATH", fs_path),
            ("PYTHONUNBUFFERED", "1"),
        ]
    )
    env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return {
        "name": name,
        "image": image,
        "command": ["python3", f"/scripts/{PREFETCH_SCRIPT.name}"],
        "env": env,
        "ports": [{"name": port_name, "containerPort": port}],
        "readinessProbe": {
            "exec": {"command": ["test", "-f", f"{local_root}/{revision}/{PREFETCH_READY_MARKER}"]},
            "periodSeconds": 10,
        },
        "resources": resources,
        # Root (uid 0, written out: the download image's USER) owns the host directory kubelet creates (a hostPath
        # ignores fsGroup); no capability beyond that, and it writes nowhere but that directory.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsUser": 0,
            "runAsGroup": 0,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "scripts", "mountPath": "/scripts", "readOnly": True},
            {"name": REMOTE_CACHE_VOLUME, "mountPath": remote, "readOnly": True},
            {"name": "node-local", "mountPath": local_mount},
        ],
    }


def image_prepull(graph: ServingGraph, node_selector: dict[str, str] | None = None) -> Obj:
    """A DaemonSet on the GPU nodes whose init container is the runtime image (kubelet pulls it, the container exits at
    once), so the workers start with the ~20 GB image in place while the nodes would otherwise wait for weights.
    Default placement: the workers' own GPU affinity."""
    hardened = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    small = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
    return _gpu_node_daemonset(
        graph,
        NAMES["prepull"],
        PREPULL_COMPONENT,
        node_selector,
        {
            "initContainers": [
                {
                    "name": "pull",
                    "image": graph.image,
                    "command": ["true"],
                    "resources": small,
                    "securityContext": hardened,
                }
            ],
            "containers": [{"name": "pause", "image": PAUSE_IMAGE, "resources": small, "securityContext": hardened}],
            "terminationGracePeriodSeconds": 1,
        },
    )
