"""build.py -> model.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.data import recipe_file
from kimi_k3.facts.images import NODE_ARCHES
from kimi_k3.facts.platforms import Platform
from kimi_k3.sizing.memory import _prefix_caching


@dataclass(frozen=True)
class Role:
    """One worker role (a DGD component): `replicas` TP groups of `nodes_per_replica` pods, one pod per node."""

    key: str
    component: str
    type: str
    tp: int
    gpus_per_node: int
    nodes_per_replica: int
    replicas: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_model_len: int
    shared_memory_size: str
    publishes_kv_events: bool
    cpu: Optional[str]
    memory: Optional[str]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    pod_annotations: tuple[tuple[str, str], ...]
    efa_devices: int = 0  # vpc.amazonaws.com/efa per pod (KV transport over EFA), 0 = none
    # Pods sharing this group share one NVLink clique: every TP group needs one; roles that hand KV over
    # NVLink need the same one. With KV over EFA, each role may sit in its own clique (e.g. two x36 racks).
    nvlink_group: str = ""
    dcp: int = 1  # vLLM decode context parallel size (recipes/facts/dcp.yaml)
    # Subdirectory of the shared compile-cache volume this role's pods mount (one per image + flags), "" = none.
    compile_cache_key: str = ""
    # Key of the ComputeDomain (IMEX domain) this role claims: roles that hand KV over NVLink share one, since a
    # pod cannot import memory exported in another IMEX domain (NVIDIA DRA driver docs). "" = none: the platform's
    # NVLink domain is one node (H200), so no TP group spans nodes and nothing is shared over NVLink across them.
    compute_domain: str = ""
    # Typed from the role's final flags once (graph/build.py); `args` is their rendering, never parsed back.
    block_size: int = 0  # vLLM's aligned hybrid block (--block-size)
    load_format: str = "auto"  # --load-format: how much of the checkpoint each pod reads
    prefix_caching: bool = True  # --enable-prefix-caching / --no-enable-prefix-caching (vLLM V1's default: on)
    max_num_seqs: Optional[int] = None  # --max-num-seqs: requests one worker runs at once (None = vLLM's default)
    max_num_batched_tokens: Optional[int] = None  # --max-num-batched-tokens: a step's token budget (None = unset)
    speculative_config: str = ""  # --speculative-config JSON as the recipe gives it, "" = none
    engine: str = "vllm"  # vllm | sglang: the worker module and whose flags `args` are (recipe `engine`)
    pp: int = 1  # pipeline stages per replica (--pipeline-parallel-size): a replica is tp x pp GPUs

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas

    @property
    def nodes(self) -> int:
        return self.nodes_per_replica * self.replicas


@dataclass(frozen=True)
class ProvidedDomain:
    """A ComputeDomain the provider made (kimi-k3:cluster.computeDomain.provided): claimed, never created."""

    name: str
    namespace: str
    channel_template: str  # its spec.channel.resourceClaimTemplate.name
    nodes: int  # GPU nodes it spans (stated in the stack, checked against spec.numNodes at `up`)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Frontend:
    component: str
    replicas: int
    cpu: Optional[str]
    memory: Optional[str]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    http_port: int
    arch: tuple[str, ...] = NODE_ARCHES  # kubernetes.io/arch values the frontend may run on (its image's)
    # The GPU nodes' zone where it is known (eks: kimi-k3:cluster.gpuNodes.availabilityZone): the frontend (and its
    # KV router) runs beside the workers, so requests, streamed tokens and KV events never cross a zone link.
    zone: Optional[str] = None


@dataclass(frozen=True)
class DeviceClaim:
    """A DRA claim every GPU pod makes besides its ComputeDomain channel (e.g. GKE DRANET's RDMA NICs)."""

    name: str  # the pod's claim name (resourceClaims[].name, containers[].resources.claims[].name)
    template: str  # the ResourceClaimTemplate the cloud side creates in the graph's namespace
    device_class: str
    count: int


@dataclass(frozen=True)
class NodeLocalDisk:
    """The GPU nodes' local-disk array the node-local weight copies live on (EKS: recipes/facts/storage.yaml nvme)."""

    array_mount_point: str  # where the host mounts the array
    host_path: str  # the copies' directory, under array_mount_point
    read_gbps: float  # one pod reading its node's copy
    peer_gbps: float  # one node receiving from its peers over the pod network
    source: str  # the recipe file that holds these facts (error messages name it)


@dataclass(frozen=True)
class NodeFacts:
    """What a cloud tells the graph about its GPU nodes (docs/architecture.md, "A cloud hands the graph ..."):
    labels every GPU pod selects, DRA devices every GPU pod claims, what a pod mounting the weights needs, and the
    service accounts of the weights' writer and readers. Empty (the default) on EKS, existing and render."""

    gpu_node_labels: tuple[tuple[str, str], ...] = ()
    gpu_pod_annotations: tuple[tuple[str, str], ...] = ()  # e.g. GKE multi-networking's pod interfaces (A4X)
    device_claims: tuple[DeviceClaim, ...] = ()
    weights_pod_annotations: tuple[tuple[str, str], ...] = ()
    fetcher_service_account: str = ""
    worker_service_account: str = ""
    pod_fs_group: Optional[int] = None  # the workers' fsGroup where the cloud's shared volume applies it (Filestore)
    node_local: Optional[NodeLocalDisk] = None  # the GPU nodes' local disks; None: EKS's instance store


def node_local_disk(facts: NodeFacts) -> NodeLocalDisk:
    """The cloud's GPU-node local disks, else EKS's instance-store RAID0 (recipes/facts/storage.yaml nvme)."""
    if facts.node_local is not None:
        return facts.node_local
    nvme = recipe_file("facts/storage.yaml")["nvme"]
    return NodeLocalDisk(
        nvme["array_mount_point"],
        nvme["host_path"],
        float(nvme["per_client_gbps"]),
        float(nvme["peer_gbps"]),
        "recipes/facts/storage.yaml nvme",
    )


@dataclass(frozen=True)
class ServingGraph:
    stack: str
    recipe: str
    name: str
    namespace: str
    platform: Platform
    image: str
    runtime_version: Optional[str]
    block_size: int
    model_repo: str
    model_revision: str
    served_model_name: str
    cache_mount_path: str
    model_path: str
    frontend: Frontend
    roles: tuple[Role, ...]
    startup_probe_seconds: int
    ready_timeout_seconds: int
    download_timeout_seconds: int
    compile_cache: bool = False  # workers mount the shared compile-cache volume (kimi-k3:storage.compileCache)
    node_local_weights: bool = False  # workers load a node-local NVMe copy (kimi-k3:storage.nodeLocalWeights)
    kv_transport: str = "nvlink"  # nvlink | efa (resolved from the recipe and the topology)
    kv_transport_reason: str = ""
    download_arch: tuple[str, ...] = NODE_ARCHES  # kubernetes.io/arch values the download image runs on
    side_arch: tuple[str, ...] = NODE_ARCHES  # kubernetes.io/arch of the nodes controllers run on (eks: system nodes)
    autoscaling: Any = None  # kimi_k3.graph.autoscaling.Autoscaling when the SLA planner owns worker replicas
    engine: str = "vllm"  # vllm | sglang (recipe `engine`): the workers' module and the DGD's backendFramework
    # existing mode: the provider's ComputeDomain every role claims (None: the graph creates its own)
    provided_compute_domain: Optional[ProvidedDomain] = None
    node_facts: NodeFacts = NodeFacts()  # the cloud's GPU node facts (kimi_k3/gcp/ in gke mode)
    drafter: Any = None  # kimi_k3.graph.speculation.Drafter: staged with the weights (kimi-k3:serving.speculation)

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    @property
    def nodes(self) -> int:
        return sum(r.nodes for r in self.roles)

    @property
    def decode_max_num_seqs(self) -> Optional[int]:
        """The most requests a decoding worker runs at once (its role's --max-num-seqs; None: the recipe sets none)."""
        seqs = [r.max_num_seqs for r in self.roles if r.type != "prefill" and r.max_num_seqs is not None]
        return max(seqs) if seqs else None

    @property
    def prefill_token_budget(self) -> Optional[int]:
        """The tokens one prefill step computes at most (the prefilling role's --max-num-batched-tokens: a longer
        prompt is prefilled in chunks of it); None: the recipe sets none."""
        first = next((r for r in self.roles if r.type == "prefill"), self.roles[0] if self.roles else None)
        return first.max_num_batched_tokens if first else None

    @property
    def compute_domains(self) -> tuple[str, ...]:
        """The ComputeDomain keys roles claim, each once, in role order."""
        return tuple(dict.fromkeys(r.compute_domain for r in self.roles if r.compute_domain))

    @property
    def frontend_service(self) -> str:
        # The Dynamo operator names a component's Service <graph>-<component, lower case>.
        return f"{self.name}-{self.frontend.component.lower()}"


def role_flag(role: "Role", flag: str, default: Optional[str] = None) -> Optional[str]:
    """The value a rendered worker argv gives `flag` (the last one wins, as in argparse). For reading what was
    rendered (tests, rules); the program reads the Role's typed fields."""
    value = default
    for i, arg in enumerate(role.args[:-1]):
        if arg == flag:
            value = role.args[i + 1]
    return value


def role_prefix_caching(role: "Role") -> bool:
    """Whether a role's vLLM caches prefixes: the last of the two flags wins; neither = vLLM V1's default, on."""
    return _prefix_caching(role.args)
