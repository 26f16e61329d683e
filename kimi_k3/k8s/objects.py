"""deployment.py -> objects.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kimi_k3.graph.model import ServingGraph
from kimi_k3.names import ARCH_LABEL, EFA_RESOURCE, PART_OF

Obj = dict[str, Any]


def _arch_requirement(arches) -> Obj:
    """Required node affinity: only nodes of an architecture the pod's image is built for (recipes/facts/images.yaml)."""
    return {"key": ARCH_LABEL, "operator": "In", "values": sorted(arches)}


def _node_affinity(*expressions: Obj) -> Obj:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]
            }
        }
    }


def _meta(graph: ServingGraph, name: str, **extra: Any) -> Obj:
    return {"name": name, "namespace": graph.namespace, "labels": dict(PART_OF), **extra}


def _env(pairs) -> list[Obj]:
    return [{"name": k, "value": v} for k, v in pairs]


CONFIG_CHECKSUM_PREFIX = "checksum.kimi-k3.io/"


def config_checksum(config_map: Obj) -> str:
    """sha256 of a ConfigMap's data: the pod-template annotation that rolls the pods mounting it when it changes."""
    return hashlib.sha256(json.dumps(config_map.get("data") or {}, sort_keys=True).encode()).hexdigest()


def with_config_checksums(template_metadata: Obj, *config_maps: Obj) -> Obj:
    """`template_metadata` plus one `checksum.kimi-k3.io/<configmap>` annotation per ConfigMap its pods mount: a changed
    script changes the pod template, so a DaemonSet rolls and a Job is replaced (ConfigMap volumes are not restarts)."""
    notes = dict(template_metadata.get("annotations") or {})
    notes.update({f"{CONFIG_CHECKSUM_PREFIX}{c['metadata']['name']}": config_checksum(c) for c in config_maps})
    return {**template_metadata, "annotations": dict(sorted(notes.items()))}


def namespace(graph: ServingGraph) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": graph.namespace, "labels": dict(PART_OF)}}


def _resources(gpus: int | None, cpu: str | None, memory: str | None, efa: int = 0) -> Obj:
    requests: Obj = {}
    limits: Obj = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    if efa:  # KV transfer over EFA (NIXL LIBFABRIC): the node's EFA devices, from the EFA device plugin
        requests[EFA_RESOURCE] = limits[EFA_RESOURCE] = str(efa)
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
