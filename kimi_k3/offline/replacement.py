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
- AWS and Google Cloud resources: the ForceNew arguments of terraform-provider-aws / -google, which the bridged
  providers apply, for the types whose source we read (recipes/facts/aws-force-new.yaml, gcp-force-new.yaml, with
  sources). A change to any other AWS or GCP input is classified `update` with `certain=False`: the real
  `pulumi preview` decides.

A URN that changes (Pulumi name, parent, or type token, which for Kubernetes carries apiVersion and kind) is a
delete of the old URN and a create of the new one. When both name the same Kubernetes object, the create fails
with "already exists" (pulumi-kubernetes await.go), or, with the provider's upsertExistingObjects, adopts the live
object, which the delete of the old URN then removes: `moved` marks both.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping, Optional, Sequence

from kimi_k3.data import recipe_file
from kimi_k3.offline.k8s_replace import (
    _canonical_k8s,
    _get,
    _k8s_delete_before_replace,
    _provider_config,
    _truthy,
    k8s_force_new,
    k8s_identity,
    k8s_provider_replaces,
)
from kimi_k3.offline.property_paths import (
    apply_ignore_changes,
    force_new_match,
    format_path,
    leaf_changes,
    parse_path,
    path_contains,
)
from kimi_k3.offline.state import _is_provider

CREATE, UPDATE, REPLACE, DELETE, SAME = "create", "update", "replace", "delete", "same"
ACTIONS = (CREATE, UPDATE, REPLACE, DELETE, SAME)
K8S_PROVIDER = "pulumi:providers:kubernetes"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"

# ---------------------------------------------------------------------- pulumi-kubernetes diff.go (force-new)


# ------------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class PropertyChange:
    path: str  # Pulumi property path, e.g. spec.template.spec.containers[0].image
    kind: str  # add | update | delete
    replaces: bool = False
    why: Optional[str] = None  # the force-new path or option that makes this change a replacement


@dataclass(frozen=True)
class Classification:
    urn: str
    type: str
    name: str
    action: str  # create | update | replace | delete | same
    changes: tuple[PropertyChange, ...] = ()
    reasons: tuple[str, ...] = ()  # why a replace/delete happens, in words
    delete_before_replace: bool = False
    protected: bool = False  # replace/delete of a protected resource: `pulumi up` stops
    retained: bool = False  # a delete leaves the object in place (retainOnDelete)
    moved: Optional[str] = None  # the other URN that names the same object
    certain: bool = True  # False: the provider's rules for this type are not modelled
    identity: Optional[str] = None  # Kubernetes: group/Kind/namespace/name

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


# ------------------------------------------------------------------------------------------- leaf diffs


# --------------------------------------------------------------------------------------------- Kubernetes


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
    """Pulumi type -> which inputs force a new resource, for the bridged clouds (recipes/facts/aws-force-new.yaml and
    gcp-force-new.yaml, sources there)."""
    types = {**recipe_file("facts/aws-force-new.yaml")["types"], **recipe_file("facts/gcp-force-new.yaml")["types"]}
    return {
        t: AwsRules(
            tuple(v.get("forceNew") or ()), tuple(v.get("forceNewWhenDecreased") or ()), frozenset(v.get("known") or ())
        )
        for t, v in types.items()
    }


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


# ---------------------------------------------------------------------------------------- providers


# ---------------------------------------------------------------------------------------------- classify
def _records(resources: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {r["urn"]: r for r in resources}


def _object_identity(r: Mapping[str, Any]) -> Optional[str]:
    if r["type"] == HELM_RELEASE:
        inputs = r.get("inputs") or {}
        return (
            f"helm/Release/{inputs.get('namespace') or 'default'}/{inputs.get('name')}" if inputs.get("name") else None
        )
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
    changes = [
        PropertyChange(
            c.path,
            c.kind,
            c.path.split(".")[0].split("[")[0] in replaces,
            "provider DiffConfig" if c.path.split(".")[0].split("[")[0] in replaces else None,
        )
        for c in changes
    ]
    action = REPLACE if replaces else UPDATE if changes else SAME
    reasons = tuple(
        f"provider config {k} changes the target cluster/output: every resource it manages is replaced"
        for k in replaces
    )
    return Classification(
        new["urn"], new["type"], new.get("name", ""), action, tuple(changes), reasons, certain=certain
    )


def classify_pair(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    old_by_urn: Mapping[str, Mapping[str, Any]],
    new_by_urn: Mapping[str, Mapping[str, Any]],
    replaced_providers: frozenset[str] = frozenset(),
) -> Classification:
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
    common = dict(
        urn=urn,
        type=rtype,
        name=new.get("name", ""),
        protected=protected,
        retained=bool(new.get("retainOnDelete")),
        identity=_object_identity(new),
    )
    # Engine: a changed provider reference replaces the resource when the new provider's DiffConfig says so.
    old_p, new_p = old.get("provider") or "", new.get("provider") or ""
    provider_reasons = []
    if new_p in replaced_providers:
        provider_reasons.append(f"its provider {new_p.rsplit('::', 1)[-1]} is replaced")
    elif old_p != new_p and old_p and new_p:
        o_prov, n_prov = old_by_urn.get(old_p), new_by_urn.get(new_p)
        if (
            o_prov is None
            or n_prov is None
            or (
                n_prov["type"] == K8S_PROVIDER
                and k8s_provider_replaces(o_prov.get("inputs") or {}, n_prov.get("inputs") or {})
            )
        ):
            provider_reasons.append(
                f"provider reference changed ({old_p} -> {new_p}) and the new provider's "
                "config targets another cluster/output"
            )
    if provider_reasons:
        return Classification(
            action=REPLACE,
            changes=(PropertyChange("provider", "update", True, "provider"),),
            reasons=tuple(provider_reasons),
            **common,
        )

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
    elif rtype.startswith(("aws:", "gcp:")):  # a bridged cloud's type whose ForceNew arguments were not read
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
            marked.append(
                PropertyChange(c.path, c.kind, True, f"replaceOnChanges {hit}") if hit and not c.replaces else c
            )
        changes = marked
    replaces = [c for c in changes if c.replaces]
    if new.get("deleteBeforeReplace") is not None:
        dbr = bool(new["deleteBeforeReplace"])
    action = REPLACE if replaces else UPDATE if changes else SAME
    reasons = tuple(f"{c.path} ({c.kind}) forces replacement: {c.why}" for c in replaces)
    if action == REPLACE and protected:
        reasons += ("protected: `pulumi up` stops with 'unable to replace resource ... marked for protection'",)
    return Classification(
        action=action,
        changes=tuple(changes),
        reasons=reasons,
        delete_before_replace=dbr and action == REPLACE,
        certain=certain,
        **common,
    )


def classify(base: Iterable[Mapping[str, Any]], head: Iterable[Mapping[str, Any]]) -> list[Classification]:
    """Every URN of either render, in URN order: what `pulumi up` from `base` to `head` does to it."""
    old_by_urn, new_by_urn = _records(base), _records(head)
    # Providers first: a replaced provider replaces what it manages.
    replaced_providers = frozenset(
        urn
        for urn in set(old_by_urn) & set(new_by_urn)
        if _is_provider(new_by_urn[urn]["type"])
        and _classify_provider(old_by_urn[urn], new_by_urn[urn]).action == REPLACE
    )
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
            upsert = _truthy(
                ((new_by_urn.get(r.get("provider") or "") or {}).get("inputs") or {}).get("upsertExistingObjects")
            )
            reasons = (
                (
                    f"new URN for an object the old URN {other} still holds: "
                    + (
                        "with upsertExistingObjects the create adopts the live object, then deleting the old URN deletes it"
                        if upsert
                        else "the create fails with 'already exists'"
                    )
                    + "; keep the URN (or add an alias)",
                )
                if moved
                else ()
            )
            out.append(
                Classification(urn, r["type"], r.get("name", ""), CREATE, reasons=reasons, moved=moved, identity=ident)
            )
        else:
            other = new_ids.get(ident) if ident else None
            moved = other if other and other not in old_by_urn else None
            reasons = ("no longer registered by the program",)
            if moved:
                reasons = (f"the same object is registered under the new URN {moved}: deleting this one deletes it",)
            protected = bool(r.get("protect"))
            if protected:
                reasons += ("protected: `pulumi up` stops before deleting it",)
            out.append(
                Classification(
                    urn,
                    r["type"],
                    r.get("name", ""),
                    DELETE,
                    reasons=reasons,
                    protected=protected,
                    retained=bool(r.get("retainOnDelete")),
                    moved=moved,
                    identity=ident,
                )
            )
    return out


def summary(classes: Iterable[Classification]) -> dict[str, int]:
    counts = {a: 0 for a in ACTIONS}
    for c in classes:
        counts[c.action] += 1
    return counts


# ------------------------------------------------------------------------------ `pulumi stack export` state
