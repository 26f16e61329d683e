"""A GKE GPU node pool as the rules see it (policies/rules/engine_form.py resource_info); imports nothing of the rules."""

from typing import Any, Mapping, Optional


def gke_gpu_pool(type_token: str, props: Mapping[str, Any]) -> tuple[Optional[int], Optional[str]]:
    """(node count, machine type) of a GKE node pool with accelerators, else (None, None): its size is fixed."""
    node = props.get("nodeConfig") if type_token == "gcp:container/nodePool:NodePool" else None
    if not (isinstance(node, Mapping) and node.get("guestAccelerators")):
        return None, None
    n = props.get("nodeCount")
    count = int(n) if isinstance(n, (int, float)) and float(n).is_integer() else None
    return count, node.get("machineType") if isinstance(node.get("machineType"), str) else None
