"""The engine's form of a resource as the rules read it: a Pulumi resource's inputs -> a Kubernetes object.

The pack receives inputs through pulumi_policy's read-only proxies, `kimi-k3 check` and a render as plain dicts;
both become the same plain object here, and what the rules know of the resource besides (ResourceInfo)."""

from collections import abc
from typing import Any, Mapping, Optional

from policies.rules.base import ResourceInfo, safe_target


def _api_version(type_token: str) -> Optional[tuple[str, str]]:
    """`kubernetes:core/v1:PersistentVolumeClaim` -> ('v1', 'PersistentVolumeClaim')."""
    parts = type_token.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes" or "/" not in parts[1]:
        return None
    group, version = parts[1].split("/", 1)
    return (version if group == "core" else f"{group}/{version}"), parts[2]


_SCALARS = frozenset({str, int, float, bool, type(None)})  # plain already: no isinstance against the ABCs


def plain(value: Any) -> Any:
    """A value the engine hands the pack as plain dicts and lists, as `kimi-k3 check` sees it.

    pulumi_policy wraps resource inputs in read-only Mapping/Sequence proxies that raise UnknownValueError on
    values unknown during preview; rules written over rendered YAML concatenate, copy and compare lists, which
    the proxies do not support. A subtree holding an unknown value stays a proxy, so a rule reading that value
    is not applicable (pulumi_policy's own rule) rather than judged on a placeholder."""
    kind = type(value)
    if kind is dict:  # kimi-k3 check, a render: a plain container cannot raise; its children convert on their own
        return {k: plain(v) for k, v in value.items()}
    if kind is list:
        return [plain(v) for v in value]
    if kind in _SCALARS or isinstance(value, (str, bytes)) or not isinstance(value, (abc.Mapping, abc.Sequence)):
        return value
    try:  # each child converts on its own: only the containers right above an unknown value stay proxies
        if isinstance(value, abc.Mapping):
            return {k: plain(value[k]) for k in value}
        return [plain(value[i]) for i in range(len(value))]
    except Exception as exc:  # noqa: BLE001 - only the proxy's unknown marker is expected here
        if type(exc).__name__ != "UnknownValueError":
            raise
        return value


def object_from_resource(type_token: str, props: Mapping[str, Any], name: str) -> Optional[dict]:
    """The Kubernetes object a Pulumi Kubernetes resource's inputs describe (None for other providers)."""
    api = _api_version(type_token)
    if api is None:
        return None
    obj = plain(props)
    if not isinstance(obj, dict):  # a top-level input unknown in preview: not applicable, as before the conversion
        obj = dict(props)
    obj.setdefault("apiVersion", api[0])
    obj.setdefault("kind", api[1])
    if isinstance(obj.get("metadata") or {}, Mapping):  # any other shape is the shape rule's to report
        metadata = dict(obj.get("metadata") or {})
        metadata.setdefault("name", name)
        obj["metadata"] = metadata
    return obj


def resource_info(
    type_token: str, name: str, props: Mapping[str, Any], protect: bool, retain_on_delete: Optional[bool], obj=None
) -> ResourceInfo:
    obj = obj if obj is not None else object_from_resource(type_token, props, name)  # the pack converts once
    pool = None
    if type_token == "aws:eks/nodeGroup:NodeGroup" and "NVIDIA" in str(props.get("amiType", "")):
        scaling = props.get("scalingConfig")
        pool = scaling.get("maxSize") if isinstance(scaling, Mapping) else None
        try:  # the engine passes numbers as floats (protobuf doubles); one that is no whole number is unknown here
            pool = int(pool) if pool is not None and float(pool).is_integer() else None
        except (TypeError, ValueError):
            pool = None
    return ResourceInfo(
        type_token,
        name,
        safe_target(obj) if obj else None,
        protect,
        retain_on_delete,
        pool,
        plain(props) if type_token.startswith(("aws:", "gcp:container/nodePool:")) else None,  # GKE pools: gke_pool.py
    )
