"""Platform add-ons as data: recipes/platform/addons.yaml defaults + `kimi-k3:platform` overrides -> helm release specs (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import StackConfig, addon_key
from kimi_k3.data import recipe_file
from kimi_k3.graph.recipe import merge
from kimi_k3.k8s import platform_set
from kimi_k3.names import NODE_ROLE_LABEL

# Installation order of independent add-ons does not matter; these are the explicit dependencies between them.
# DRA kubelet plugins select GPU nodes by the nvidia.com/gpu.present label that GPU feature discovery sets.
DEPENDS_ON = {"draDriver": ("gpuOperator",)}
ORDER = ("gpuOperator", "efaDevicePlugin", "draDriver", "dynamoPlatform")


@dataclass(frozen=True)
class AddonSpec:
    key: str  # gpuOperator, efaDevicePlugin, draDriver, dynamoPlatform
    install: bool
    release: str
    chart: str
    repo: Optional[str]
    version: str
    namespace: str
    values: dict[str, Any]
    depends_on: tuple[str, ...]


ADDONS_FILE = "recipes/platform/addons.yaml"
EFA_PLUGIN = "efaDevicePlugin"


def _defaults() -> dict[str, Any]:
    return recipe_file("platform/addons.yaml")


def _root(url: str) -> str:
    return url.rstrip("/")


def chart_reference_problems(key: str, addon: dict[str, Any], publishers: dict[str, Any]) -> list[str]:
    """What is wrong with an add-on's chart reference, held to the form its publisher documents (empty: nothing).

    pulumi-kubernetes (helm_release.go resolveChartName) ignores `repo` for an `oci://` chart, and Helm resolves a
    plain chart name through `<repo>/index.yaml`, which exists only at a repository's root."""
    where = f"{ADDONS_FILE}: {key}"
    chart, repo, version = addon.get("chart") or "", addon.get("repo"), addon.get("version")
    pub = publishers.get(addon.get("publisher") or "")
    if pub is None:
        return [
            f"{where}.publisher = {addon.get('publisher')!r}: unknown; allowed: {', '.join(sorted(publishers))} "
            "(each with the source that documents its chart location)"
        ]
    out = []
    if not version:
        out.append(f"{where}.version: missing; allowed: the chart version its publisher lists")
    if repo is not None and str(repo).startswith("oci://"):
        out.append(
            f"{where}.repo = {repo!r}: an OCI registry has no index.yaml for Helm to read; allowed: repo null "
            f"and chart {_root(repo)}/{chart}"
        )
    if chart.startswith("oci://"):
        if repo:
            out.append(
                f"{where}.repo = {repo!r}: ignored for an oci:// chart (pulumi-kubernetes resolveChartName); "
                "allowed: null"
            )
        prefix = pub.get("ociPrefix")
        name = chart.rsplit("/", 1)[-1]
        if not prefix or not chart.startswith(prefix) or "/" in chart[len(prefix) :] or ":" in name or not name:
            allowed = f"{prefix}<chart>" if prefix else f"chart <name> with repo {pub.get('helmRepo')}"
            out.append(
                f"{where}.chart = {chart!r}: not where {addon['publisher']} publishes charts ({pub['source']}); "
                f"allowed: {allowed} (the version goes in `version`)"
            )
    elif not (repo is not None and str(repo).startswith("oci://")):
        documented = pub.get("helmRepo")
        if "/" in chart:
            out.append(
                f"{where}.chart = {chart!r}: with a repo, the chart is a bare name; allowed: {chart.rsplit('/', 1)[-1]}"
            )
        if not documented:
            out.append(
                f"{where}.repo = {repo!r}: {addon['publisher']} publishes no Helm repository "
                f"({pub['source']}); allowed: repo null and chart {pub['ociPrefix']}{chart}"
            )
        elif _root(str(repo or "")) != _root(documented):
            hint = (
                f"; {repo} is a folder of packages under the root, not a repository (no index.yaml)"
                if repo and _root(str(repo)).startswith(_root(documented) + "/")
                else ""
            )
            out.append(
                f"{where}.repo = {repo!r}: not the repository root {addon['publisher']} documents "
                f"({pub['source']}){hint}; allowed: {documented}"
            )
    return out


def check_chart_references(defaults: dict[str, Any]) -> None:
    """Every add-on's chart reference as its publisher documents it (ConfigError naming file, key and value)."""
    publishers = defaults.get("publishers") or {}
    problems = [p for key in ORDER for p in chart_reference_problems(key, defaults[key], publishers)]
    if problems:
        raise ConfigError("; ".join(problems))


def efa_plugin_covers(
    version: str, values: dict[str, Any], instance_type: str, defaults: Optional[dict[str, Any]] = None
) -> Optional[str]:
    """None when the EFA device plugin chart at `version` (with `values`) schedules on `instance_type`; else why not.

    The chart's DaemonSet requires node.kubernetes.io/instance-type In supportedInstanceLabels.values: the user's
    values when they set that list, else the list the pinned chart version ships (recorded in recipes/platform/addons.yaml)."""
    key = f"kimi-k3:platform.{EFA_PLUGIN}"
    listed = (values.get("supportedInstanceLabels") or {}).get("values")
    if listed is not None:
        if instance_type in listed:
            return None
        return (
            f"{key}.values.supportedInstanceLabels.values: does not list {instance_type}, so the EFA device plugin "
            f"never runs on the GPU nodes; allowed: a list that includes {instance_type}"
        )
    recorded = (defaults or _defaults())[EFA_PLUGIN]["affinityInstanceTypes"]
    # Helm matches "0.5.30" to the published "v0.5.30" (a semver constraint), so both spellings name one chart.
    types = recorded.get(version if version.startswith("v") else f"v{version}")
    fitting = [v for v, t in recorded.items() if instance_type in t]
    if types is None:
        return (
            f"{key}.version = {version!r}: its node affinity is not recorded in {ADDONS_FILE} "
            f"(efaDevicePlugin.affinityInstanceTypes), so whether it runs on {instance_type} is unknown; allowed: "
            f"{', '.join(fitting)}, or set values.supportedInstanceLabels.values to a list with {instance_type}"
        )
    if instance_type not in types:
        return (
            f"{key}.version = {version!r}: the chart's node affinity does not list {instance_type} (only "
            f"{', '.join(types)}), so its DaemonSet never runs on the GPU nodes and pods requesting "
            f"vpc.amazonaws.com/efa never schedule; allowed: {', '.join(fitting)}"
        )
    return None


def system_node_affinity() -> dict[str, Any]:
    """A required node affinity to the system node group (a fresh dict per use)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": NODE_ROLE_LABEL, "operator": "In", "values": ["system"]}]}
                ]
            }
        }
    }


def _system_pinned(key: str, values: dict[str, Any]) -> dict[str, Any]:
    """Controllers go to the system node group in eks mode (where the label exists), through values each chart has:
    dra-driver-nvidia-gpu 0.4.1 `controller.nodeSelector`; dynamo-platform 1.5.0 has no nodeSelector for the
    operator or Grove, only `affinity` (`dynamo-operator.controllerManager.affinity`, `grove.affinity`). KAI's
    `kai-scheduler.global.affinity` would reach every KAI component, so it is left alone; the GPU taint keeps
    untolerating controllers off the GPU nodes anyway."""
    if key == "draDriver":
        return merge({"controller": {"nodeSelector": {NODE_ROLE_LABEL: "system"}}}, values)
    if key == "dynamoPlatform":
        return merge(
            {
                "dynamo-operator": {"controllerManager": {"affinity": system_node_affinity()}},
                "grove": {"affinity": system_node_affinity()},
            },
            values,
        )
    return values


def addon_specs(
    cfg: StackConfig, gpu_instance_type: Optional[str] = None, kv_over_efa: bool = False
) -> list[AddonSpec]:
    """Every add-on's release spec. `gpu_instance_type` (eks mode): the EFA device plugin must schedule there.
    `kv_over_efa`: the graph moves KV over EFA (kimi_k3.graph.kv_transport.choose_kv_transport); only then does eks mode install
    the EFA device plugin. Without it no pod requests vpc.amazonaws.com/efa, and the plugin crash-loops on a node
    with no EFA device (aws/eks-charts#1239; NVIDIA/aicr#1326 on p6e-gb300r), e.g. a p6e-gb300, for which AWS
    documents no EFA (docs/aws.md, Known limits)."""
    out = []
    defaults = _defaults()
    check_chart_references(defaults)
    chosen = platform_set.set_versions(cfg.platform_set)  # `seed` (the default) = the versions below
    for field, over in cfg.platform:
        key = addon_key(field)
        d = defaults[key]
        if cfg.platform_set and over.version and over.version != chosen.get(key, over.version):
            raise ConfigError(
                f"kimi-k3:platform.{key}.version = {over.version}: kimi-k3:platformSet = {cfg.platform_set} "
                f"pins {key} at {chosen[key]}; allowed: {chosen[key]} or unset (or another set)"
            )
        install = (
            over.install
            if over.install is not None
            else cfg.cluster.mode == "eks" and (key != EFA_PLUGIN or kv_over_efa)
        )
        if key == EFA_PLUGIN and kv_over_efa and over.install is False and cfg.cluster.mode == "eks":
            raise ConfigError(
                f"kimi-k3:platform.{EFA_PLUGIN}.install = false: the graph moves KV over EFA, and its "
                "workers request vpc.amazonaws.com/efa, which only the EFA device plugin offers; allowed: "
                "true (or unset)"
            )
        values = merge(d.get("values") or {}, over.values)
        if cfg.cluster.mode == "eks":
            values = _system_pinned(key, values)
        out.append(
            AddonSpec(
                key=key,
                install=install,
                release=d["release"],
                chart=d["chart"],
                repo=d.get("repo"),
                version=over.version or chosen.get(key) or str(d["version"]),
                namespace=d["namespace"],
                values=values,
                depends_on=DEPENDS_ON.get(key, ()),
            )
        )
        if key == EFA_PLUGIN and install and gpu_instance_type:
            problem = efa_plugin_covers(out[-1].version, values, gpu_instance_type, defaults)
            if problem:
                raise ConfigError(problem)
    return sorted(out, key=lambda a: ORDER.index(a.key))


def release_args(spec: AddonSpec) -> dict[str, Any]:
    """kwargs of pulumi_kubernetes.helm.v3.Release."""
    args: dict[str, Any] = {
        "name": spec.release,
        "chart": spec.chart,
        "version": spec.version,
        "namespace": spec.namespace,
        "create_namespace": True,
        "values": spec.values,
        "atomic": True,
        "timeout": 900,
    }
    if spec.repo:
        args["repository_opts"] = {"repo": spec.repo}
    return args
