"""replacement.py -> k8s_replace.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from kimi_k3.offline.state import SECRET

AUTONAMED_ANNOTATION = "pulumi.com/autonamed"


_SELECTOR = (
    "matchExpressions",
    "matchExpressions.key",
    "matchExpressions.operator",
    "matchExpressions.values",
    "matchLabels",
)


def _selector(prefix: str) -> tuple[str, ...]:
    return (prefix,) + tuple(f"{prefix}.{s}" for s in _SELECTOR)


def _containers(*prefixes: str) -> tuple[str, ...]:
    fields = (
        "args",
        "command",
        "env",
        "env.value",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "ports",
        "readinessProbe",
        "resources",
        "securityContext",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    )
    return tuple(f"{p}.{f}" for p in prefixes for f in fields)


_STATEFULSET = (
    "spec.podManagementPolicy",
    "spec.revisionHistoryLimit",
    "spec.serviceName",
    "spec.volumeClaimTemplates",
) + _selector("spec.selector")


_WORKLOAD = _selector("spec.selector")


_JOB = ("spec.completions", "spec.parallelism", "spec.template") + _selector("spec.selector")


_ROLE_BINDING = ("roleRef",)


_CORE_V1 = {
    "PersistentVolume": tuple(
        f"spec.{s}"
        for s in (
            "awsElasticBlockStore",
            "azureDisk",
            "azureFile",
            "cephfs",
            "cinder",
            "csi",
            "fc",
            "flexVolume",
            "flocker",
            "gcePersistentDisk",
            "glusterfs",
            "hostPath",
            "iscsi",
            "local",
            "nfs",
            "photonPersistentDisk",
            "portworxVolume",
            "quobyte",
            "rbd",
            "scaleIO",
            "storageos",
            "vsphereVolume",
        )
    ),
    "PersistentVolumeClaim": ("spec.accessModes", "spec.storageClassName", "spec.volumeName")
    + _selector("spec.selector"),
    "Pod": tuple(
        f"spec.{s}"
        for s in (
            "affinity",
            "automountServiceAccountToken",
            "dnsConfig",
            "dnsPolicy",
            "enableServiceLinks",
            "hostAliases",
            "hostIPC",
            "hostNetwork",
            "hostPID",
            "hostname",
            "imagePullSecrets",
            "nodeName",
            "nodeSelector",
            "overhead",
            "preemptionPolicy",
            "priority",
            "priorityClassName",
            "readinessGates",
            "restartPolicy",
            "runtimeClassName",
            "schedulerName",
            "securityContext",
            "serviceAccount",
            "serviceAccountName",
            "shareProcessNamespace",
            "subdomain",
            "terminationGracePeriodSeconds",
            "volumes",
        )
    )
    + _containers("spec.containers[*]", "spec.initContainers[*]"),
    "ResourceQuota": ("spec.scopes",),
    "Secret": ("type",),
    "Service": ("spec.clusterIP",),
}


# (group, version) -> kind -> force-new paths, as diff.go's `forceNew` table ("" and "core" are the core group).
K8S_FORCE_NEW: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {
    ("apps", "v1beta1"): {"StatefulSet": _STATEFULSET},
    ("apps", "v1beta2"): {"DaemonSet": _WORKLOAD, "Deployment": _WORKLOAD, "StatefulSet": _STATEFULSET},
    ("apps", "v1"): {"DaemonSet": _WORKLOAD, "Deployment": _WORKLOAD, "StatefulSet": _STATEFULSET},
    ("", "v1"): _CORE_V1,
    ("core", "v1"): _CORE_V1,
    ("policy", "v1beta1"): {"PodDisruptionBudget": ("spec",)},
    **{
        ("rbac.authorization.k8s.io", v): {"ClusterRoleBinding": _ROLE_BINDING, "RoleBinding": _ROLE_BINDING}
        for v in ("v1alpha1", "v1beta1", "v1")
    },
    ("storage.k8s.io", "v1"): {"StorageClass": ("parameters", "provisioner")},
    **{("batch", v): {"Job": _JOB} for v in ("v1beta1", "v1", "v2alpha1")},
}


IDENTITY_PATHS = ("metadata.name", "metadata.namespace")


# Kinds without a namespace (the provider clears metadata.namespace on them before diffing).
CLUSTER_SCOPED = {
    "Namespace",
    "PersistentVolume",
    "StorageClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PriorityClass",
    "DeviceClass",
    "Node",
    "RuntimeClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def k8s_force_new(obj: Mapping[str, Any], provider_inputs: Optional[Mapping[str, Any]] = None) -> tuple[str, ...]:
    """kubeProvider.forceNewProperties for this object under this provider's settings."""
    provider_inputs = provider_inputs or {}
    group, version = split_api_version(str(obj.get("apiVersion", "")))
    kind = obj.get("kind")
    props = IDENTITY_PATHS
    kinds = K8S_FORCE_NEW.get((group, version))
    if kinds is None:
        return props
    immutable = obj.get("immutable") is True
    core = group in ("", "core")
    if core and kind == "Secret" and (not _truthy(provider_inputs.get("enableSecretMutable")) or immutable):
        return props + ("type", "stringData", "data")
    if kind in kinds:
        return props + kinds[kind]
    if core and kind == "ConfigMap" and (not _truthy(provider_inputs.get("enableConfigMapMutable")) or immutable):
        return props + ("binaryData", "data")
    return props


def k8s_identity(inputs: Mapping[str, Any]) -> Optional[str]:
    """group/Kind/namespace/name of a Kubernetes object (namespace canonical: default when unset)."""
    kind = inputs.get("kind")
    meta = inputs.get("metadata")
    if not kind or not isinstance(meta, dict) or not meta.get("name"):
        return None
    group, _ = split_api_version(str(inputs.get("apiVersion", "")))
    ns = "" if kind in CLUSTER_SCOPED else (meta.get("namespace") or "default")
    return f"{group or 'core'}/{kind}/{ns}/{meta['name']}"


def _canonical_k8s(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The namespace as the provider compares it: `default` when unset, absent on cluster-scoped kinds."""
    obj = dict(inputs)
    meta = dict(obj.get("metadata") or {})
    if obj.get("kind") in CLUSTER_SCOPED:
        meta.pop("namespace", None)
    else:
        meta["namespace"] = meta.get("namespace") or "default"
    obj["metadata"] = meta
    return obj


def _k8s_delete_before_replace(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Diff(): a named (not autonamed) object keeping its name and namespace is deleted first."""
    new_meta, old_meta = new.get("metadata") or {}, old.get("metadata") or {}
    autonamed = _truthy((new_meta.get("annotations") or {}).get(AUTONAMED_ANNOTATION))
    return (
        bool(new_meta.get("name"))
        and not autonamed
        and new_meta.get("name") == old_meta.get("name")
        and new_meta.get("namespace") == old_meta.get("namespace")
    )


def _get(value: Any, parts: Sequence[Any]) -> Any:
    for p in parts:
        if isinstance(value, dict) and p in value:
            value = value[p]
        elif isinstance(value, list) and isinstance(p, int) and p < len(value):
            value = value[p]
        else:
            return None
    return value


def _provider_config(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """providers.FilterProviderConfig: the engine's own keys (version, plugin URL) are not provider config."""
    return {k: v for k, v in inputs.items() if k not in ("version", "pluginDownloadURL")}


def k8s_provider_replaces(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """DiffConfig of pulumi-kubernetes: replace when the render directory, or the active cluster
    (kubeconfig, context, cluster), changes. Secrets render as placeholders: equal placeholders count as same."""
    o, n = _provider_config(old), _provider_config(new)
    if o == n:
        return []
    if n.get("clusterIdentifier") and o.get("clusterIdentifier") == n["clusterIdentifier"]:
        return []  # an unchanged identifier vetoes every replacement (DiffConfig's deferred `Replaces = nil`)
    out = []
    if o.get("clusterIdentifier") and n.get("clusterIdentifier"):
        out.append("clusterIdentifier")  # changed (adding or removing one replaces nothing by itself)
    if o.get("renderYamlToDirectory") != n.get("renderYamlToDirectory"):
        out.append("renderYamlToDirectory")
    # The provider replaces when the active cluster's settings differ; offline we compare the values as given
    # (a kubeconfig that changes only credentials is still reported as a replacement: conservative).
    out += [k for k in ("kubeconfig", "context", "cluster") if o.get(k) != n.get(k) and not _unknowable(k, o, n)]
    return out


def _unknowable(key: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A secret kubeconfig on one side cannot be compared offline: the state holds its ciphertext, and a render
    never reads the per-user secret (absent there, or a placeholder). DiffConfig compares the clusters it points at,
    which offline is unknown, so it is no evidence of a replacement (property_paths treats secrets alike)."""
    return key == "kubeconfig" and SECRET in (old.get(key), new.get(key))
