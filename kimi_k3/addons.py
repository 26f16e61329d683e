"""Platform add-ons as data: recipes/addons.yaml defaults + `kimi-k3:platform` overrides -> helm release specs (pure)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


from .data import recipe_file
from .aws import NODE_ROLE_LABEL
from .config import StackConfig, addon_key
from .graph import merge

# Installation order of independent add-ons does not matter; these are the explicit dependencies between them.
# DRA kubelet plugins select GPU nodes by the nvidia.com/gpu.present label that GPU feature discovery sets.
DEPENDS_ON = {"draDriver": ("gpuOperator",)}
ORDER = ("gpuOperator", "efaDevicePlugin", "draDriver", "dynamoPlatform")


@dataclass(frozen=True)
class AddonSpec:
    key: str                 # gpuOperator, efaDevicePlugin, draDriver, dynamoPlatform
    install: bool
    release: str
    chart: str
    repo: Optional[str]
    version: str
    namespace: str
    values: dict[str, Any]
    depends_on: tuple[str, ...]


def _defaults() -> dict[str, Any]:
    return recipe_file("addons.yaml")


def system_node_affinity() -> dict[str, Any]:
    """A required node affinity to the system node group (a fresh dict per use)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": NODE_ROLE_LABEL, "operator": "In", "values": ["system"]}]}]}}}


def _system_pinned(key: str, values: dict[str, Any]) -> dict[str, Any]:
    """Controllers go to the system node group in eks mode (where the label exists), through values each chart has:
    dra-driver-nvidia-gpu 0.4.1 `controller.nodeSelector`; dynamo-platform 1.5.0 has no nodeSelector for the
    operator or Grove, only `affinity` (`dynamo-operator.controllerManager.affinity`, `grove.affinity`). KAI's
    `kai-scheduler.global.affinity` would reach every KAI component, so it is left alone; the GPU taint keeps
    untolerating controllers off the GPU nodes anyway."""
    if key == "draDriver":
        return merge({"controller": {"nodeSelector": {NODE_ROLE_LABEL: "system"}}}, values)
    if key == "dynamoPlatform":
        return merge({"dynamo-operator": {"controllerManager": {"affinity": system_node_affinity()}},
                      "grove": {"affinity": system_node_affinity()}}, values)
    return values


def addon_specs(cfg: StackConfig) -> list[AddonSpec]:
    out = []
    defaults = _defaults()
    for field, over in cfg.platform:
        key = addon_key(field)
        d = defaults[key]
        install = over.install if over.install is not None else cfg.cluster.mode == "eks"
        values = merge(d.get("values") or {}, over.values)
        if cfg.cluster.mode == "eks":
            values = _system_pinned(key, values)
        out.append(AddonSpec(key=key, install=install, release=d["release"], chart=d["chart"], repo=d.get("repo"),
                             version=over.version or str(d["version"]), namespace=d["namespace"], values=values,
                             depends_on=DEPENDS_ON.get(key, ())))
    return sorted(out, key=lambda a: ORDER.index(a.key))


def release_args(spec: AddonSpec) -> dict[str, Any]:
    """kwargs of pulumi_kubernetes.helm.v3.Release."""
    args: dict[str, Any] = {
        "name": spec.release, "chart": spec.chart, "version": spec.version, "namespace": spec.namespace,
        "create_namespace": True, "values": spec.values, "atomic": True, "timeout": 900,
    }
    if spec.repo:
        args["repository_opts"] = {"repo": spec.repo}
    return args
