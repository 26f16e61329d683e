"""Quality of service: no serving pod is BestEffort.

A pod whose containers request and limit no cpu and no memory is BestEffort (Kubernetes "Pod Quality of Service
Classes"; extended resources such as nvidia.com/gpu do not count): the kubelet evicts it first under node memory
pressure, and the workers' memory-backed /dev/shm (sharedMemorySize, 200-256 GiB) is charged to the pod. Every
component of a DynamoGraphDeployment (frontend, workers, planner) must request cpu or memory.
"""

from __future__ import annotations

from typing import Iterator, Mapping

from policies.rules.base import Context, Finding, Result, all_containers, components, name_of, pod_spec, target_of

QOS_RESOURCES = ("cpu", "memory")


def _asks(resources: Mapping) -> bool:
    return any(k in (resources.get(part) or {}) for part in ("requests", "limits") for k in QOS_RESOURCES)


def check_serving_containers_request_resources(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp in components(obj):
        spec = pod_spec(comp)
        # The operator merges a component's own `resources` into its main container (graph.go GenerateBasePodSpec).
        if _asks(comp.get("resources") or {}) or any(_asks(c.get("resources") or {}) for c in all_containers(spec)):
            continue
        yield Finding(
            target_of(obj),
            f"component {name_of(comp)}: no container requests cpu or memory, so its pods "
            "are BestEffort (evicted first; GPUs do not count); set requests",
        )
