"""nodes.py, build.py, deployment.py, critical_path.py -> names.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Any

NODE_ROLE_LABEL = "kimi-k3.io/node-role"


GRAPH_NAME = "kimi-k3"


PART_OF = {"app.kubernetes.io/part-of": "kimi-k3"}


NVLINK_GROUP_LABEL = "kimi-k3.io/nvlink-group"


CLIQUE_KEY = "nvidia.com/gpu.clique"  # NVLink clique label set by GPU feature discovery


EFA_RESOURCE = "vpc.amazonaws.com/efa"  # extended resource of the EFA device plugin


CHANNEL_CLAIM = "compute-domain-channel"


CACHE_VOLUME = "model-cache"


HEALTH_PORT = 9090  # Dynamo system server (/health), as upstream probes it


# Fixed names: the cache must keep its identity across recipe changes so weights are never re-created.
NAMES = {
    "secret": "kimi-k3-hf-token",
    "pvc": "kimi-k3-model-cache",
    "verify": "kimi-k3-verify-checkpoint",
    "job": "kimi-k3-model-download",
    "compile_cache": "kimi-k3-compile-cache",
    "prepull": "kimi-k3-image-prepull",
    "smoke": "kimi-k3-smoke-test",
    "benchmark": "kimi-k3-benchmark",
    "watch": "kimi-k3-graph-watch",
    "ready": "kimi-k3-graph-ready",
    "prefetch": "kimi-k3-weights-prefetch",
    "peers": "kimi-k3-weights-peers",
}


COMPILE_CACHE_VOLUME = "compile-cache"


PREPULL_COMPONENT = "image-prepull"  # kimi_k3.offline.critical_path charges image_pull to it


PREFETCH_COMPONENT = "weights-prefetch"  # kimi_k3.offline.critical_path charges the node-local copy to it


REMOTE_CACHE_VOLUME = "model-cache-remote"  # the bucket (model-cache PVC) beside a node-local copy


GRAPH_LABEL = "kimi-k3.io/graph"  # on every pod of the graph: what the graph-ready Job watches


ARCH_LABEL = "kubernetes.io/arch"


FETCHER_ROLE = "weights-fetcher"  # kimi-k3/role tag of the EC2 fetchers (components/aws/storage.py)


def is_fetcher(r: dict[str, Any]) -> bool:
    return r.get("inputs", {}).get("tags", {}).get("kimi-k3/role") == FETCHER_ROLE
