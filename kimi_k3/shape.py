"""Object shape: is a YAML document a Kubernetes object whose fields have the types the policy rules read?

`kimi-k3 check` and the policy pack validate every object with `problems()` before any rule runs, so a rule only
ever sees fields of the type the API server would accept (a container `env:` written as a mapping, `containers:`
as strings, `kind: 5` are reported with their JSON path instead of crashing or passing a rule).

This is a structural subset, not the whole schema: the fields the rules in policies/rules/ read, typed as the
Kubernetes 1.34 OpenAPI (core/v1 PodSpec, Container, EnvVar, ...; kubernetes-validate's bundled JSON schemas) and
the upstream Dynamo CRD (nvidia.com/v1beta1 DynamoGraphDeployment) type them. Unknown fields are allowed (the full
schemas with strict field validation stay the job of the API server and tests/stacks/test_schemas.py); a null value
counts as absent, as the API server drops it. tests/stacks/test_check_property.py checks every type declared here
against those schemas, so this subset cannot drift from them unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Problem:
    path: str  # JSON path inside the document, e.g. spec.components[1].podTemplate.spec.containers[0].env
    message: str  # what was found and what is allowed

    def __str__(self) -> str:
        return f"{self.path or '(document)'}: {self.message}"


# ------------------------------------------------------------------------------------------------ the vocabulary
@dataclass(frozen=True)
class T:
    """A declared type: kind in str|int|bool|quantity|list|map|object; item (list/map) or fields (object)."""

    kind: str
    item: Optional["T"] = None
    fields: Optional[Mapping[str, "T"]] = None
    required: tuple[str, ...] = ()
    pattern: Optional[str] = None  # for str: a regex the value must match (fullmatch)
    allowed: str = ""  # for str with a pattern: what is allowed, in words


STR, INT, BOOL = T("str"), T("int"), T("bool")
QUANTITY = T("quantity")  # resource.Quantity: a string or a number (`nvidia.com/gpu: 4`, `memory: 200Gi`)
INT_OR_STR = T("int_or_str")  # intstr.IntOrString


def LIST(item: T) -> T:
    return T("list", item=item)


def MAP(item: T) -> T:
    return T("map", item=item)


def OBJ(fields: Mapping[str, T], required: tuple[str, ...] = ()) -> T:
    return T("object", fields=fields, required=required)


# ------------------------------------------------------------------------------------------------ Kubernetes types
# Field names and types as Kubernetes 1.34's OpenAPI declares them (io.k8s.api.core.v1.*).
SELECTOR_REQUIREMENT = OBJ({"key": STR, "operator": STR, "values": LIST(STR)}, ("key", "operator"))
LABEL_SELECTOR = OBJ({"matchLabels": MAP(STR), "matchExpressions": LIST(SELECTOR_REQUIREMENT)})
NODE_SELECTOR_TERM = OBJ({"matchExpressions": LIST(SELECTOR_REQUIREMENT), "matchFields": LIST(SELECTOR_REQUIREMENT)})
POD_AFFINITY_TERM = OBJ(
    {"topologyKey": STR, "labelSelector": LABEL_SELECTOR, "namespaces": LIST(STR)}, ("topologyKey",)
)
WEIGHTED_POD_AFFINITY_TERM = OBJ({"weight": INT, "podAffinityTerm": POD_AFFINITY_TERM}, ("weight", "podAffinityTerm"))
POD_AFFINITY = OBJ(
    {
        "requiredDuringSchedulingIgnoredDuringExecution": LIST(POD_AFFINITY_TERM),
        "preferredDuringSchedulingIgnoredDuringExecution": LIST(WEIGHTED_POD_AFFINITY_TERM),
    }
)
AFFINITY = OBJ(
    {
        "nodeAffinity": OBJ(
            {
                "requiredDuringSchedulingIgnoredDuringExecution": OBJ(
                    {"nodeSelectorTerms": LIST(NODE_SELECTOR_TERM)}, ("nodeSelectorTerms",)
                ),
                "preferredDuringSchedulingIgnoredDuringExecution": LIST(
                    OBJ({"weight": INT, "preference": NODE_SELECTOR_TERM}, ("weight", "preference"))
                ),
            }
        ),
        "podAffinity": POD_AFFINITY,
        "podAntiAffinity": POD_AFFINITY,
    }
)
KEY_REF = OBJ({"name": STR, "key": STR, "optional": BOOL}, ("key",))
ENV_VAR = OBJ(
    {
        "name": STR,
        "value": STR,
        "valueFrom": OBJ(
            {
                "secretKeyRef": KEY_REF,
                "configMapKeyRef": KEY_REF,
                "fieldRef": OBJ({"fieldPath": STR, "apiVersion": STR}, ("fieldPath",)),
                "resourceFieldRef": OBJ({"resource": STR, "containerName": STR}, ("resource",)),
            }
        ),
    },
    ("name",),
)
ENV_FROM = OBJ(
    {
        "prefix": STR,
        "configMapRef": OBJ({"name": STR, "optional": BOOL}),
        "secretRef": OBJ({"name": STR, "optional": BOOL}),
    }
)
PROBE = OBJ(
    {
        "initialDelaySeconds": INT,
        "periodSeconds": INT,
        "failureThreshold": INT,
        "timeoutSeconds": INT,
        "successThreshold": INT,
        "exec": OBJ({"command": LIST(STR)}),
        "httpGet": OBJ({"path": STR, "port": INT_OR_STR}, ("port",)),
        "tcpSocket": OBJ({"port": INT_OR_STR}, ("port",)),
    }
)
CONTAINER = OBJ(
    {
        "name": STR,
        "image": STR,
        "command": LIST(STR),
        "args": LIST(STR),
        "workingDir": STR,
        "env": LIST(ENV_VAR),
        "envFrom": LIST(ENV_FROM),
        "volumeMounts": LIST(
            OBJ({"name": STR, "mountPath": STR, "readOnly": BOOL, "subPath": STR}, ("name", "mountPath"))
        ),
        "resources": OBJ(
            {
                "limits": MAP(QUANTITY),
                "requests": MAP(QUANTITY),
                "claims": LIST(OBJ({"name": STR, "request": STR}, ("name",))),
            }
        ),
        "securityContext": OBJ(
            {
                "privileged": BOOL,
                "runAsUser": INT,
                "runAsGroup": INT,
                "runAsNonRoot": BOOL,
                "allowPrivilegeEscalation": BOOL,
                "readOnlyRootFilesystem": BOOL,
            }
        ),
        "startupProbe": PROBE,
        "readinessProbe": PROBE,
        "livenessProbe": PROBE,
        "ports": LIST(OBJ({"containerPort": INT, "name": STR, "protocol": STR}, ("containerPort",))),
    },
    ("name",),
)
VOLUME = OBJ(
    {
        "name": STR,
        "persistentVolumeClaim": OBJ({"claimName": STR, "readOnly": BOOL}, ("claimName",)),
        "hostPath": OBJ({"path": STR, "type": STR}, ("path",)),
        "emptyDir": OBJ({"medium": STR, "sizeLimit": QUANTITY}),
        "configMap": OBJ({"name": STR, "defaultMode": INT}),
        "secret": OBJ({"secretName": STR, "defaultMode": INT}),
        "nfs": OBJ({"server": STR, "path": STR, "readOnly": BOOL}, ("server", "path")),
    },
    ("name",),
)
POD_SPEC = OBJ(
    {
        "containers": LIST(CONTAINER),
        "initContainers": LIST(CONTAINER),
        "volumes": LIST(VOLUME),
        "nodeSelector": MAP(STR),
        "affinity": AFFINITY,
        "tolerations": LIST(OBJ({"key": STR, "operator": STR, "value": STR, "effect": STR})),
        "resourceClaims": LIST(
            OBJ({"name": STR, "resourceClaimName": STR, "resourceClaimTemplateName": STR}, ("name",))
        ),
        "securityContext": OBJ({"runAsUser": INT, "runAsGroup": INT, "fsGroup": INT, "runAsNonRoot": BOOL}),
        "serviceAccountName": STR,
        "restartPolicy": STR,
        "hostNetwork": BOOL,
    }
)
# Pod spec's `containers` is required by the API server; in a template of a Dynamo component the operator adds the
# main container's defaults, so only workload kinds require it (below).
POD_SPEC_REQUIRED = T("object", fields=POD_SPEC.fields, required=("containers",))
METADATA = OBJ({"name": STR, "generateName": STR, "namespace": STR, "labels": MAP(STR), "annotations": MAP(STR)})
POD_TEMPLATE = OBJ({"metadata": METADATA, "spec": POD_SPEC_REQUIRED})
JOB_SPEC = OBJ(
    {
        "template": POD_TEMPLATE,
        "activeDeadlineSeconds": INT,
        "backoffLimit": INT,
        "ttlSecondsAfterFinished": INT,
        "completions": INT,
        "parallelism": INT,
    },
    ("template",),
)
WORKLOAD_SPEC = OBJ({"template": POD_TEMPLATE, "replicas": INT, "selector": LABEL_SELECTOR}, ("template",))
DAEMON_SET_SPEC = OBJ({"template": POD_TEMPLATE, "selector": LABEL_SELECTOR}, ("template",))
REPLICA_SET_SPEC = OBJ({"template": POD_TEMPLATE, "replicas": INT, "selector": LABEL_SELECTOR})

# ------------------------------------------------------------------------------------------------ custom resources
# nvidia.com/v1beta1 DynamoGraphDeployment, as the upstream CRD types it (reference/dynamo/crds).
DGD_COMPONENT = OBJ(
    {
        "name": STR,
        "type": STR,
        "replicas": INT,
        "minAvailable": INT,
        "runtimeVersionOverride": STR,
        "sharedMemorySize": INT_OR_STR,
        "multinode": OBJ({"nodeCount": INT}),
        "podTemplate": OBJ(
            {
                "metadata": OBJ({"name": STR, "namespace": STR, "labels": MAP(STR), "annotations": MAP(STR)}),
                "spec": POD_SPEC,
            }
        ),
        "scalingAdapter": OBJ({}),
        "modelRef": OBJ({}),
    },
    ("name",),
)
# resource.nvidia.com/v1beta1 ComputeDomain (reference/dra).
COMPUTE_DOMAIN_SPEC = OBJ(
    {"numNodes": INT, "channel": OBJ({"resourceClaimTemplate": OBJ({"name": STR}, ("name",)), "allocationMode": STR})}
)

SPECS: dict[str, T] = {
    "Pod": POD_SPEC_REQUIRED,
    "Job": JOB_SPEC,
    "Deployment": WORKLOAD_SPEC,
    "StatefulSet": WORKLOAD_SPEC,
    "DaemonSet": DAEMON_SET_SPEC,
    "ReplicaSet": REPLICA_SET_SPEC,
    "CronJob": OBJ({"jobTemplate": OBJ({"spec": JOB_SPEC}), "schedule": STR}, ("jobTemplate",)),
    "PersistentVolumeClaim": OBJ(
        {
            "accessModes": LIST(STR),
            "storageClassName": STR,
            "volumeName": STR,
            "resources": OBJ({"requests": MAP(QUANTITY), "limits": MAP(QUANTITY)}),
        }
    ),
    "PersistentVolume": OBJ(
        {
            "accessModes": LIST(STR),
            "storageClassName": STR,
            "capacity": MAP(QUANTITY),
            "persistentVolumeReclaimPolicy": STR,
            "claimRef": OBJ({"name": STR, "namespace": STR}),
            "csi": OBJ(
                {"driver": STR, "volumeHandle": STR, "readOnly": BOOL, "volumeAttributes": MAP(STR)},
                ("driver", "volumeHandle"),
            ),
        }
    ),
    "DynamoGraphDeployment": OBJ({"components": LIST(DGD_COMPONENT), "env": LIST(ENV_VAR)}),
    "ComputeDomain": COMPUTE_DOMAIN_SPEC,
}
# Where the API server's group/version/kind grammar comes from: apimachinery's DNS-1123 subdomain group, a version
# v<N>[alpha|beta<M>] and a CamelCase kind (k8s.io/apimachinery/pkg/util/validation, pkg/runtime/schema).
API_VERSION = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+((alpha|beta)[0-9]+)?"
KIND = r"[A-Z][A-Za-z0-9]*"
# A document's top level: what every object must have, whatever its kind.
TOP = OBJ(
    {
        "apiVersion": T("str", pattern=API_VERSION, allowed="group/version, e.g. v1, batch/v1, nvidia.com/v1beta1"),
        "kind": T("str", pattern=KIND, allowed="a CamelCase kind, e.g. Job, DynamoGraphDeployment"),
        "metadata": METADATA,
    },
    ("apiVersion", "kind", "metadata"),
)

_NAMES = {
    "str": "a string",
    "int": "a whole number",
    "bool": "true or false",
    "quantity": "a quantity (4, 200Gi)",
    "int_or_str": "a whole number or a string",
    "list": "a list",
    "map": "a mapping",
    "object": "a mapping",
}


def _whole(value: Any) -> bool:
    # JSON Schema's integer, as the schemas say it: 2 and 2.0 (the policy pack receives every number as a double)
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def found(value: Any) -> str:
    """What a value is, for a message; short (a long value is cut)."""
    kind = (
        "null"
        if value is None
        else "a boolean"
        if isinstance(value, bool)
        else "a whole number"
        if isinstance(value, int)
        else "a number"
        if isinstance(value, float)
        else "a string"
        if isinstance(value, str)
        else "a list"
        if _is_list(value)
        else "a mapping"
        if isinstance(value, Mapping)
        else type(value).__name__
    )
    try:  # the policy pack's values are read-only proxies: show their contents
        shown = dict(value) if isinstance(value, Mapping) else list(value) if _is_list(value) else value
    except Exception:  # noqa: BLE001 - a value that cannot be read (unknown during preview) is shown by its kind
        shown = "..."
    text = repr(shown)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = str(key)
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key)
    return (f"{path}.{key}" if path else key) if plain else f"{path}[{key!r}]"


def _allowed(t: T) -> str:
    if t.kind == "list":
        return (
            f"a list of {_allowed(t.item)}"
            if t.item.kind != "object"
            else "a list of " + _allowed(t.item).replace("a mapping", "mappings", 1)
        )
    if t.kind == "map":
        return f"a mapping of name -> {_allowed(t.item)}"
    if t.kind == "object" and t.fields:
        return f"a mapping ({', '.join(list(t.fields)[:6])}{', ...' if len(t.fields) > 6 else ''})"
    return _NAMES[t.kind]


def _check(value: Any, t: T, path: str, out: list[Problem]) -> None:
    if value is None:  # null is absent; required fields are checked by the parent
        return
    ok = {
        "str": isinstance(value, str),
        "int": _whole(value),
        "bool": isinstance(value, bool),
        "quantity": isinstance(value, (str, int, float)) and not isinstance(value, bool),
        "int_or_str": isinstance(value, str) or _whole(value),
        "list": _is_list(value),
        "map": isinstance(value, Mapping),
        "object": isinstance(value, Mapping),
    }[t.kind]
    if not ok:
        out.append(Problem(path, f"{found(value)}; allowed: {_allowed(t)}"))
        return
    if t.kind == "str" and t.pattern and not re.fullmatch(t.pattern, value):
        out.append(Problem(path, f"{found(value)}; allowed: {t.allowed}"))
    elif t.kind == "list":
        for i, item in enumerate(value):
            _check(item, t.item, _join(path, i), out)
    elif t.kind == "map":
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(Problem(_join(path, key), f"key {found(key)}; allowed: string keys"))
            _check(item, t.item, _join(path, key), out)
    elif t.kind == "object":
        for key in t.required:
            if value.get(key) is None:
                what = _allowed(t.fields[key]) if t.fields and key in t.fields else "a value"
                out.append(Problem(_join(path, key), f"missing; required: {what}"))
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(Problem(_join(path, key), f"key {found(key)}; allowed: string keys"))
            elif t.fields and key in t.fields:
                _check(item, t.fields[key], _join(path, key), out)


def problems(doc: Any) -> list[Problem]:
    """Every shape problem of one YAML document, as (JSON path, message); [] for a well-formed object."""
    if not isinstance(doc, Mapping):
        return [
            Problem("", f"{found(doc)}; allowed: a Kubernetes object (a mapping with apiVersion, kind and metadata)")
        ]
    out: list[Problem] = []
    _check(doc, TOP, "", out)
    if out:  # without a valid kind nothing below can be typed
        return out
    meta = doc["metadata"]
    if meta.get("name") is None and meta.get("generateName") is None:
        out.append(Problem("metadata.name", "missing; required: a name (or generateName)"))
    kind = doc["kind"]
    if kind == "List":
        return out + [Problem("kind", "a List; allowed: the objects themselves (check reads a List's items)")]
    spec_type = SPECS.get(kind)
    if spec_type is not None:
        _check(doc.get("spec"), spec_type, "spec", out)
    return out


def check_type(value: Any, t: T, path: str = "") -> list[Problem]:
    """The problems of any value against a declared type (records and state files use this too)."""
    out: list[Problem] = []
    if value is None and path == "":
        return [Problem("", f"{found(value)}; allowed: {_allowed(t)}")]
    _check(value, t, path, out)
    return out


# ------------------------------------------------------------------------------------------------ Pulumi records
# What kimi_k3.offline.replacement and the upgrade rules read of a resource: a `kimi-k3 render` resources.json record and a
# resource of `pulumi stack export` (checkpoint version 3, pulumi/pulumi sdk/go/common/apitype/core.go ResourceV3).
_RECORD_FIELDS = {
    "urn": STR,
    "type": STR,
    "name": STR,
    "parent": STR,
    "provider": STR,
    "dependsOn": LIST(STR),
    "protect": BOOL,
    "retainOnDelete": BOOL,
    "ignoreChanges": LIST(STR),
    "replaceOnChanges": LIST(STR),
    "deleteBeforeReplace": BOOL,
    "inputs": OBJ({}),
}
RENDER_RESOURCES = OBJ({"resources": LIST(OBJ(_RECORD_FIELDS, ("urn", "type", "name")))}, ("resources",))
STATE_EXPORT = OBJ(
    {"deployment": OBJ({"resources": LIST(OBJ({**_RECORD_FIELDS, "outputs": OBJ({})}, ("urn", "type")))})},
    ("deployment",),
)
