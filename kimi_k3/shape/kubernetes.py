"""The Kubernetes and Dynamo types the policy rules read, as Kubernetes 1.34's OpenAPI and the upstream CRDs type them."""

from __future__ import annotations

from kimi_k3.shape.vocabulary import BOOL, INT, INT_OR_STR, LIST, MAP, OBJ, QUANTITY, STR, T

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
        "securityContext": OBJ(
            {"runAsUser": INT, "runAsGroup": INT, "fsGroup": INT, "fsGroupChangePolicy": STR, "runAsNonRoot": BOOL}
        ),
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
