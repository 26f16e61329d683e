"""Register a plain Kubernetes object dict as its typed pulumi-kubernetes resource."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# Built-in kinds we emit; anything else is a custom resource.
TYPED = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("storage.k8s.io/v1", "StorageClass"): k8s.storage.v1.StorageClass,
}


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def register(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    api_version, kind = obj["apiVersion"], obj["kind"]
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    cls = TYPED.get((api_version, kind))
    if cls is not None:
        return cls(name, opts=opts, **{_snake(k): v for k, v in body.items()})
    return k8s.apiextensions.CustomResource(name, api_version=api_version, kind=kind, opts=opts, **body)
