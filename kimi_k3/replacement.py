"""What Pulumi will do to each resource between two renders: create, update, replace, delete or same (pure).

Input: the resource records of two `kimi-k3 render` runs (resources.json `resources`: urn, type, name, parent,
provider, protect, retainOnDelete, ignoreChanges, replaceOnChanges, deleteBeforeReplace, inputs). Output: one
`Classification` per URN, with the property paths that force a replacement and why. The rules are those of the
consumers, read from their source (commits named so a newer release can be re-checked):

- Pulumi engine, pulumi/pulumi pkg/resource/deploy/step_generator.go @1b5949891b3c: `ignoreChanges` paths are
  reset to the old inputs before diffing (processIgnoreChanges); a change under a `replaceOnChanges` path becomes a
  replace (applyReplaceOnChanges); a resource whose provider reference changes is replaced when the new provider's
  DiffConfig asks for replacement (providerChanged); replacing or deleting a `protect`ed resource stops the update
  before it acts; the `deleteBeforeReplace` option overrides the provider's choice.
- pulumi-kubernetes, provider/pkg/provider/provider.go Diff + diff.go @94977969d641: a JSON merge patch of the
  old and new inputs, walked leaf by leaf; a change at or under a force-new path replaces the object. Every kind:
  `metadata.name`, `metadata.namespace`; per group/version/kind tables (Job `spec.template`, PVC
  `spec.accessModes`/`storageClassName`/..., Pod containers, ...); Secret `type`/`data`/`stringData` and ConfigMap
  `data`/`binaryData` unless the provider enables mutability. Custom resources (DynamoGraphDeployment,
  ComputeDomain) have no table: only name and namespace replace them. Named objects keeping their name and
  namespace are deleted before they are re-created. helm.sh/v3 Release (helm_release.go): `name`, `namespace`.
- AWS resources: the ForceNew arguments of terraform-provider-aws, which the bridged provider applies, for the
  types whose source we read (recipes/aws-force-new.yaml, with sources). A change to any other AWS input is
  classified `update` with `certain=False`: the real `pulumi preview` decides.

A URN that changes (Pulumi name, parent, or type token, which for Kubernetes carries apiVersion and kind) is a
delete of the old URN and a create of the new one. When both name the same Kubernetes object, the create fails
with "already exists" (pulumi-kubernetes await.go), or, with the provider's upsertExistingObjects, adopts the live
object, which the delete of the old URN then removes: `moved` marks both.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping, Optional, Sequence

from .data import recipe_file

CREATE, UPDATE, REPLACE, DELETE, SAME = "create", "update", "replace", "delete", "same"
ACTIONS = (CREATE, UPDATE, REPLACE, DELETE, SAME)
K8S_PROVIDER = "pulumi:providers:kubernetes"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
AUTONAMED_ANNOTATION = "pulumi.com/autonamed"
_MISSING = object()

# ---------------------------------------------------------------------- pulumi-kubernetes diff.go (force-new)
_SELECTOR = ("matchExpressions", "matchExpressions.key", "matchExpressions.operator", "matchExpressions.values",
             "matchLabels")


def _selector(prefix: str) -> tuple[str, ...]:
    return (prefix,) + tuple(f"{prefix}.{s}" for s in _SELECTOR)


def _containers(*prefixes: str) -> tuple[str, ...]:
    fields = ("args", "command", "env", "env.value", "image", "imagePullPolicy", "lifecycle", "livenessProbe",
              "ports", "readinessProbe", "resources", "securityContext", "stdin", "stdinOnce",
              "terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts",
              "workingDir")
    return tuple(f"{p}.{f}" for p in prefixes for f in fields)


_STATEFULSET = ("spec.podManagementPolicy", "spec.revisionHistoryLimit", "spec.serviceName",
                "spec.volumeClaimTemplates") + _selector("spec.selector")
_WORKLOAD = _selector("spec.selector")
_JOB = ("spec.completions", "spec.parallelism", "spec.template") + _selector("spec.selector")
_ROLE_BINDING = ("roleRef",)
_CORE_V1 = {
    "PersistentVolume": tuple(f"spec.{s}" for s in (
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "fc", "flexVolume", "flocker",
        "gcePersistentDisk", "glusterfs", "hostPath", "iscsi", "local", "nfs", "photonPersistentDisk",
        "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume")),
    "PersistentVolumeClaim": ("spec.accessModes", "spec.storageClassName", "spec.volumeName")
    + _selector("spec.selector"),
    "Pod": tuple(f"spec.{s}" for s in (
        "affinity", "automountServiceAccountToken", "dnsConfig", "dnsPolicy", "enableServiceLinks", "hostAliases",
        "hostIPC", "hostNetwork", "hostPID", "hostname", "imagePullSecrets", "nodeName", "nodeSelector", "overhead",
        "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "restartPolicy", "runtimeClassName",
        "schedulerName", "securityContext", "serviceAccount", "serviceAccountName", "shareProcessNamespace",
        "subdomain", "terminationGracePeriodSeconds", "volumes"))
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
    **{("rbac.authorization.k8s.io", v): {"ClusterRoleBinding": _ROLE_BINDING, "RoleBinding": _ROLE_BINDING}
       for v in ("v1alpha1", "v1beta1", "v1")},
    ("storage.k8s.io", "v1"): {"StorageClass": ("parameters", "provisioner")},
    **{("batch", v): {"Job": _JOB} for v in ("v1beta1", "v1", "v2alpha1")},
}
IDENTITY_PATHS = ("metadata.name", "metadata.namespace")
# Kinds without a namespace (the provider clears metadata.namespace on them before diffing).
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
                  "CustomResourceDefinition", "PriorityClass", "DeviceClass", "Node", "RuntimeClass",
                  "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}


# ------------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class PropertyChange:
    path: str                      # Pulumi property path, e.g. spec.template.spec.containers[0].image
    kind: str                      # add | update | delete
    replaces: bool = False
    why: Optional[str] = None      # the force-new path or option that makes this change a replacement


@dataclass(frozen=True)
class Classification:
    urn: str
    type: str
    name: str
    action: str                                   # create | update | replace | delete | same
    changes: tuple[PropertyChange, ...] = ()
    reasons: tuple[str, ...] = ()                 # why a replace/delete happens, in words
    delete_before_replace: bool = False
    protected: bool = False                       # replace/delete of a protected resource: `pulumi up` stops
    retained: bool = False                        # a delete leaves the object in place (retainOnDelete)
    moved: Optional[str] = None                   # the other URN that names the same object
    certain: bool = True                          # False: the provider's rules for this type are not modelled
    identity: Optional[str] = None                # Kubernetes: group/Kind/namespace/name

    @property
    def replace_paths(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.changes if c.replaces)

    @property
    def blocked(self) -> bool:
        """The engine refuses this step (a protected resource would be replaced or deleted)."""
        return self.protected and self.action in (REPLACE, DELETE)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"urn": self.urn, "type": self.type, "name": self.name, "action": self.action}
        if self.changes:
            out["changes"] = [{k: v for k, v in vars(c).items() if v not in (None, False)} for c in self.changes]
        for key in ("reasons", "delete_before_replace", "protected", "retained", "moved", "identity"):
            value = getattr(self, key)
            if value:
                out[key] = list(value) if isinstance(value, tuple) else value
        if not self.certain:
            out["certain"] = False
        if self.blocked:
            out["blocked"] = True
        return out


# ------------------------------------------------------------------------------------------ property paths
_TOKEN = re.compile(r'\[(\d+|\*|"(?:[^"\\]|\\.)*")\]|\.?([^.\[\]]+)')


def parse_path(path: str) -> tuple[Any, ...]:
    """A Pulumi property path (`a.b[0]["c.d"]`, `*` wildcards) as a tuple of str keys, int indexes and '*'."""
    out: list[Any] = []
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m or m.end() == pos:
            raise ValueError(f"bad property path {path!r}")
        bracket, plain = m.groups()
        if bracket is not None:
            out.append("*" if bracket == "*" else int(bracket) if bracket.isdigit() else json.loads(bracket))
        else:
            out.append(plain)
        pos = m.end()
    return tuple(out)


def format_path(parts: Sequence[Any]) -> str:
    """As the providers print paths: dotted keys, [i] indexes, ["k"] for keys with . " [ ]."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif any(c in p for c in '."[]'):
            out += f"[{json.dumps(p)}]"
        else:
            out = f"{out}.{p}" if out else p
    return out


def _segment_matches(pattern: Any, part: Any) -> bool:
    return pattern == "*" or pattern == part


def path_contains(prefix: Sequence[Any], path: Sequence[Any]) -> bool:
    """PropertyPath.Contains: `prefix` equals the start of `path` (a `*` matches any key or index)."""
    return len(prefix) <= len(path) and all(_segment_matches(a, b) for a, b in zip(prefix, path))


def _reset(new: Any, old: Any, path: Sequence[Any]) -> Any:
    """`new` with the value at `path` taken from `old` (removed where `old` has none): processIgnoreChanges."""
    if not path:
        return old
    head, rest = path[0], path[1:]
    if isinstance(new, dict):
        keys = list(new) if head == "*" else [head]
        out = dict(new)
        for k in keys:
            o = old.get(k, _MISSING) if isinstance(old, dict) else _MISSING
            if o is _MISSING and not rest:
                out.pop(k, None)
            elif k in out and o is not _MISSING:
                out[k] = _reset(out[k], o, rest)
        return out
    if isinstance(new, list):
        idx = range(len(new)) if head == "*" else [head] if isinstance(head, int) and head < len(new) else []
        out_list = list(new)
        for i in idx:
            if isinstance(old, list) and i < len(old):
                out_list[i] = _reset(out_list[i], old[i], rest)
        return out_list
    return new


def apply_ignore_changes(new_inputs: Mapping[str, Any], old_inputs: Mapping[str, Any],
                         ignore_changes: Iterable[str]) -> dict[str, Any]:
    out: Any = dict(new_inputs)
    for p in ignore_changes:
        out = _reset(out, old_inputs, parse_path(p))
    return out


# ------------------------------------------------------------------------------------------- leaf diffs
def _secret_only(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value) and all(_secret_only(v) for v in value.values())
    if isinstance(value, list):
        return bool(value) and all(_secret_only(v) for v in value)
    return value == "[secret]"


def _equal(a: Any, b: Any) -> bool:
    # Secrets are placeholders offline (render and state export never show plaintexts): not comparable, not a change.
    if _secret_only(a) and _secret_only(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


def leaf_changes(old: Any, new: Any, path: tuple = ()) -> list[tuple[tuple, str, Any]]:
    """(path, add|update|delete, new value) for every difference, walked as pulumi-kubernetes' patchConverter
    walks a JSON merge patch: maps key by key, lists index by index, anything else compared whole."""
    if _secret_only(old) and _secret_only(new):
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            o, n = old.get(k, _MISSING), new.get(k, _MISSING)
            if o is _MISSING:
                out.append((path + (k,), "add", n))
            elif n is _MISSING:
                out.append((path + (k,), "delete", None))
            else:
                out += leaf_changes(o, n, path + (k,))
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = []
        for i in range(max(len(old), len(new))):
            if i >= len(old):
                out.append((path + (i,), "add", new[i]))
            elif i >= len(new):
                out.append((path + (i,), "delete", None))
            else:
                out += leaf_changes(old[i], new[i], path + (i,))
        return out
    return [] if _equal(old, new) else [(path, "update", new)]


def _reaches(pattern: Sequence[Any], value: Any) -> bool:
    """`pattern` resolves inside `value` (client-go jsonpath over the patch slice: a [*] needs one element)."""
    if not pattern:
        return True
    head, rest = pattern[0], pattern[1:]
    if isinstance(value, dict):
        return head in value and _reaches(rest, value[head])
    if isinstance(value, list):
        if head == "*":
            return any(_reaches(rest, v) for v in value)
        return isinstance(head, int) and head < len(value) and _reaches(rest, value[head])
    return False


def force_new_match(force_new: Iterable[str], path: Sequence[Any], value: Any) -> Optional[str]:
    """The first force-new path this change hits (openapi.PatchPropertiesChanged over makePatchSlice)."""
    for fn in force_new:
        pattern = parse_path(fn)
        common = min(len(pattern), len(path))
        if not all(_segment_matches(a, b) for a, b in zip(pattern[:common], path[:common])):
            continue
        if len(pattern) <= len(path):
            return fn
        # The change sits above the force-new field: it replaces when the new value contains that field
        # (a delete carries no value, and jsonpath finds nothing below it).
        if value is not None and _reaches(pattern[len(path):], value):
            return fn
    return None


# --------------------------------------------------------------------------------------------- Kubernetes
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
    return bool(new_meta.get("name")) and not autonamed and new_meta.get("name") == old_meta.get("name") \
        and new_meta.get("namespace") == old_meta.get("namespace")


def _diff(old: Any, new: Any, force_new: Sequence[str]) -> list[PropertyChange]:
    out = []
    for path, kind, value in leaf_changes(old, new):
        hit = force_new_match(force_new, path, value)
        if path == ("metadata",) and kind == "delete":
            hit = "metadata"
        out.append(PropertyChange(format_path(path), kind, hit is not None, hit))
    return out


# ------------------------------------------------------------------------------------------------- AWS
@dataclass(frozen=True)
class AwsRules:
    force_new: tuple[str, ...]
    when_decreased: tuple[str, ...]
    known: frozenset[str]


@lru_cache(maxsize=1)
def aws_rules() -> dict[str, AwsRules]:
    """Pulumi type -> which inputs force a new resource (recipes/aws-force-new.yaml, sources there)."""
    data = recipe_file("aws-force-new.yaml")
    return {t: AwsRules(tuple(v.get("forceNew") or ()), tuple(v.get("forceNewWhenDecreased") or ()),
                        frozenset(v.get("known") or ())) for t, v in data["types"].items()}


def _aws_changes(rules: AwsRules, old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[PropertyChange], bool]:
    changes = _diff(old, new, rules.force_new)
    out = []
    for c in changes:
        parts = parse_path(c.path)
        hit = next((p for p in rules.when_decreased if parse_path(p) == parts), None)
        if hit and not c.replaces:
            before, after = _get(old, parts), _get(new, parts)
            if isinstance(before, (int, float)) and isinstance(after, (int, float)) and after < before:
                c = PropertyChange(c.path, c.kind, True, f"{hit} decreased (CustomizeDiff)")
        out.append(c)
    certain = all(str(parse_path(c.path)[0]) in rules.known for c in out)
    return out, certain


def _get(value: Any, parts: Sequence[Any]) -> Any:
    for p in parts:
        if isinstance(value, dict) and p in value:
            value = value[p]
        elif isinstance(value, list) and isinstance(p, int) and p < len(value):
            value = value[p]
        else:
            return None
    return value


# ---------------------------------------------------------------------------------------- providers
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
    out += [k for k in ("kubeconfig", "context", "cluster") if o.get(k) != n.get(k)]
    return out


def _is_provider(rtype: str) -> bool:
    return rtype.startswith("pulumi:providers:")


# ---------------------------------------------------------------------------------------------- classify
def _records(resources: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {r["urn"]: r for r in resources}


def _object_identity(r: Mapping[str, Any]) -> Optional[str]:
    if r["type"] == HELM_RELEASE:
        inputs = r.get("inputs") or {}
        return f"helm/Release/{inputs.get('namespace') or 'default'}/{inputs.get('name')}" if inputs.get("name") else None
    if r["type"].startswith("kubernetes:"):
        return k8s_identity(r.get("inputs") or {})
    return None


def _classify_provider(old: Mapping[str, Any], new: Mapping[str, Any]) -> Classification:
    o, n = _provider_config(old.get("inputs") or {}), _provider_config(new.get("inputs") or {})
    changes = [PropertyChange(format_path(p), kind) for p, kind, _ in leaf_changes(o, n)]
    if new["type"] == K8S_PROVIDER:
        replaces = k8s_provider_replaces(o, n)
        certain = True
    else:  # other providers' DiffConfig is not modelled: any config change is assumed to replace
        replaces = [c.path for c in changes]
        certain = not changes
    changes = [PropertyChange(c.path, c.kind, c.path.split(".")[0].split("[")[0] in replaces,
                              "provider DiffConfig" if c.path.split(".")[0].split("[")[0] in replaces else None)
               for c in changes]
    action = REPLACE if replaces else UPDATE if changes else SAME
    reasons = tuple(f"provider config {k} changes the target cluster/output: every resource it manages is replaced"
                    for k in replaces)
    return Classification(new["urn"], new["type"], new.get("name", ""), action, tuple(changes), reasons,
                          certain=certain)


def classify_pair(old: Mapping[str, Any], new: Mapping[str, Any],
                  old_by_urn: Mapping[str, Mapping[str, Any]], new_by_urn: Mapping[str, Mapping[str, Any]],
                  replaced_providers: frozenset[str] = frozenset()) -> Classification:
    """One URN present in both renders."""
    rtype, urn = new["type"], new["urn"]
    if _is_provider(rtype):
        return _classify_provider(old, new)
    old_inputs = old.get("inputs") or {}
    if old.get("fromState") and not rtype.startswith("kubernetes:"):
        # A bridged provider's Check writes schema defaults into the state's inputs; a render (mocks) has none.
        # Both sides of a real preview carry them, so a key only the state has is a default, not a removal.
        old_inputs = {k: v for k, v in old_inputs.items() if k in (new.get("inputs") or {})}
    new_inputs = apply_ignore_changes(new.get("inputs") or {}, old_inputs, new.get("ignoreChanges") or [])
    protected = bool(old.get("protect")) and bool(new.get("protect"))
    common = dict(urn=urn, type=rtype, name=new.get("name", ""), protected=protected,
                  retained=bool(new.get("retainOnDelete")), identity=_object_identity(new))
    # Engine: a changed provider reference replaces the resource when the new provider's DiffConfig says so.
    old_p, new_p = old.get("provider") or "", new.get("provider") or ""
    provider_reasons = []
    if new_p in replaced_providers:
        provider_reasons.append(f"its provider {new_p.rsplit('::', 1)[-1]} is replaced")
    elif old_p != new_p and old_p and new_p:
        o_prov, n_prov = old_by_urn.get(old_p), new_by_urn.get(new_p)
        if o_prov is None or n_prov is None or (n_prov["type"] == K8S_PROVIDER and k8s_provider_replaces(
                o_prov.get("inputs") or {}, n_prov.get("inputs") or {})):
            provider_reasons.append(f"provider reference changed ({old_p} -> {new_p}) and the new provider's "
                                    "config targets another cluster/output")
    if provider_reasons:
        return Classification(action=REPLACE, changes=(PropertyChange("provider", "update", True, "provider"),),
                              reasons=tuple(provider_reasons), **common)

    certain = True
    dbr = False
    if rtype == HELM_RELEASE:
        changes = _diff(old_inputs, new_inputs, ("name", "namespace"))
    elif rtype.startswith("kubernetes:") and "kind" in new_inputs:
        provider_inputs = (new_by_urn.get(new_p) or {}).get("inputs") or {}
        o, n = _canonical_k8s(old_inputs), _canonical_k8s(new_inputs)
        changes = _diff(o, n, k8s_force_new(n, provider_inputs))
        dbr = _k8s_delete_before_replace(o, n)
    elif rtype in aws_rules():
        changes, certain = _aws_changes(aws_rules()[rtype], old_inputs, new_inputs)
    elif rtype.startswith("aws:"):
        changes = _diff(old_inputs, new_inputs, ())
        certain = not changes
    else:  # component resources and anything else: no provider diff, inputs compared as they are
        changes = _diff(old_inputs, new_inputs, ())

    # Engine: replaceOnChanges turns changes under those paths into replacements.
    roc = [(p, parse_path(p)) for p in new.get("replaceOnChanges") or []]
    if roc:
        marked = []
        for c in changes:
            hit = next((p for p, parsed in roc if path_contains(parsed, parse_path(c.path))), None)
            marked.append(PropertyChange(c.path, c.kind, True, f"replaceOnChanges {hit}") if hit and not c.replaces
                          else c)
        changes = marked
    replaces = [c for c in changes if c.replaces]
    if new.get("deleteBeforeReplace") is not None:
        dbr = bool(new["deleteBeforeReplace"])
    action = REPLACE if replaces else UPDATE if changes else SAME
    reasons = tuple(f"{c.path} ({c.kind}) forces replacement: {c.why}" for c in replaces)
    if action == REPLACE and protected:
        reasons += ("protected: `pulumi up` stops with 'unable to replace resource ... marked for protection'",)
    return Classification(action=action, changes=tuple(changes), reasons=reasons,
                          delete_before_replace=dbr and action == REPLACE, certain=certain, **common)


def classify(base: Iterable[Mapping[str, Any]], head: Iterable[Mapping[str, Any]]) -> list[Classification]:
    """Every URN of either render, in URN order: what `pulumi up` from `base` to `head` does to it."""
    old_by_urn, new_by_urn = _records(base), _records(head)
    # Providers first: a replaced provider replaces what it manages.
    replaced_providers = frozenset(
        urn for urn in set(old_by_urn) & set(new_by_urn) if _is_provider(new_by_urn[urn]["type"])
        and _classify_provider(old_by_urn[urn], new_by_urn[urn]).action == REPLACE)
    old_ids = {i: u for u, r in old_by_urn.items() if (i := _object_identity(r))}
    new_ids = {i: u for u, r in new_by_urn.items() if (i := _object_identity(r))}
    out = []
    for urn in sorted(set(old_by_urn) | set(new_by_urn)):
        old, new = old_by_urn.get(urn), new_by_urn.get(urn)
        if old is not None and new is not None:
            out.append(classify_pair(old, new, old_by_urn, new_by_urn, replaced_providers))
            continue
        r = new if new is not None else old
        assert r is not None
        ident = _object_identity(r)
        if new is not None:
            other = old_ids.get(ident) if ident else None
            moved = other if other and other not in new_by_urn else None
            upsert = _truthy(((new_by_urn.get(r.get("provider") or "") or {}).get("inputs") or {})
                             .get("upsertExistingObjects"))
            reasons = ((f"new URN for an object the old URN {other} still holds: " + (
                "with upsertExistingObjects the create adopts the live object, then deleting the old URN deletes it"
                if upsert else "the create fails with 'already exists'") + "; keep the URN (or add an alias)",)
                if moved else ())
            out.append(Classification(urn, r["type"], r.get("name", ""), CREATE, reasons=reasons, moved=moved,
                                      identity=ident))
        else:
            other = new_ids.get(ident) if ident else None
            moved = other if other and other not in old_by_urn else None
            reasons = ("no longer registered by the program",)
            if moved:
                reasons = (f"the same object is registered under the new URN {moved}: deleting this one deletes it",)
            protected = bool(r.get("protect"))
            if protected:
                reasons += ("protected: `pulumi up` stops before deleting it",)
            out.append(Classification(urn, r["type"], r.get("name", ""), DELETE, reasons=reasons,
                                      protected=protected, retained=bool(r.get("retainOnDelete")), moved=moved,
                                      identity=ident))
    return out


def summary(classes: Iterable[Classification]) -> dict[str, int]:
    counts = {a: 0 for a in ACTIONS}
    for c in classes:
        counts[c.action] += 1
    return counts


# ------------------------------------------------------------------------------ `pulumi stack export` state
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET = "[secret]"


def _unsecret(value: Any) -> Any:
    """State values with secrets replaced by the placeholder render uses (render never sees plaintexts)."""
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return SECRET
        return {k: _unsecret(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsecret(v) for v in value]
    return value


def records_from_state(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Resource records (as in resources.json) from `pulumi stack export` output (checkpoint version 3).

    The stack resource and default providers (which render never registers) are left out; references to a
    default provider become "" as in a render."""
    deployment = doc.get("deployment") if "deployment" in doc else doc
    out = []
    for r in (deployment or {}).get("resources") or []:
        rtype, urn = r.get("type", ""), r.get("urn", "")
        if rtype == "pulumi:pulumi:Stack" or (_is_provider(rtype) and urn.rsplit("::", 1)[-1].startswith("default")):
            continue
        provider = (r.get("provider") or "").rsplit("::", 1)[0]
        if provider.rsplit("::", 1)[-1].startswith("default"):
            provider = ""
        out.append({"urn": urn, "type": rtype, "name": urn.rsplit("::", 1)[-1], "parent": r.get("parent", ""),
                    "provider": provider, "protect": bool(r.get("protect")),
                    "retainOnDelete": bool(r.get("retainOnDelete")), "ignoreChanges": list(r.get("ignoreChanges") or []),
                    "replaceOnChanges": list(r.get("replaceOnChanges") or []),
                    "deleteBeforeReplace": r.get("deleteBeforeReplace"),
                    "inputs": _unsecret(r.get("inputs") or {}), "fromState": True})
    return out
