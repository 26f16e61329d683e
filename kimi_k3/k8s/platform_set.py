"""The pinned, compatible platform set (recipes/platform/platform-set.yaml), checked before anything is registered (pure).

Every add-on the stack installs must be at a version the set lists; the Dynamo platform's requirements (DRA
driver versions, minimum Kubernetes) must hold; and the API versions our manifests use must be served by the
CRDs of the versions installed. Add-ons an existing cluster already has (install: false) are not ours to pin.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from kimi_k3.config.base import ConfigError
from kimi_k3.data import recipe_file

SOURCE = "recipes/platform/platform-set.yaml"


def platform_set() -> dict[str, Any]:
    return recipe_file("platform/platform-set.yaml")


def _key(addon_key: str) -> str:
    return f"kimi-k3:platform.{addon_key}.version"


def check(addons: Sequence[Any], kubernetes_version: str | None, api_versions: Mapping[str, str]) -> None:
    """Raise ConfigError naming the key, the value and what is allowed.

    addons: kimi_k3.k8s.addons.AddonSpec list; api_versions: kind -> apiVersion our manifests emit."""
    data = platform_set()
    installed = {a.key: str(a.version) for a in addons if a.install}
    for key, version in installed.items():
        known = data.get(key) or {}
        if version not in known:
            raise ConfigError(
                f"{_key(key)} = {version}: not in the tested platform set; allowed: "
                f"{', '.join(known) or 'none'} ({SOURCE}: add the version with what it bundles and "
                "needs, then upgrade in the order docs/operating.md gives)"
            )
    dynamo = installed.get("dynamoPlatform")
    if dynamo is None:
        return
    entry = data["dynamoPlatform"][dynamo]
    for dep, allowed in (entry.get("requires") or {}).items():
        have = installed.get(dep)
        if have is not None and have not in [str(a) for a in allowed]:
            raise ConfigError(
                f"{_key(dep)} = {have}: dynamo-platform {dynamo} needs {dep} "
                f"{' or '.join(map(str, allowed))} ({SOURCE})"
            )
    minimum = entry.get("kubernetes")
    if kubernetes_version and minimum and _version(kubernetes_version) < _version(str(minimum)):
        raise ConfigError(
            f"kimi-k3:cluster.kubernetesVersion = {kubernetes_version}: dynamo-platform {dynamo} "
            f"needs Kubernetes >= {minimum} ({SOURCE})"
        )
    served = {}
    for key, version in installed.items():
        served.update((data.get(key) or {}).get(version, {}).get("serves") or {})
    for kind, api in api_versions.items():
        if kind in served and api not in served[kind]:
            raise ConfigError(
                f"{kind} {api}: not served by the installed platform set (serves {', '.join(served[kind])}; {SOURCE})"
            )


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.lstrip("v").split(".")[:2])


def upgrade_order() -> list[str]:
    return list(platform_set()["upgradeOrder"])


def members(addons: Iterable[Any]) -> dict[str, Any]:
    """What the stack runs, for `kimi-k3 plan`/docs: chart versions plus what the Dynamo chart bundles."""
    data = platform_set()
    out: dict[str, Any] = {}
    for a in addons:
        if a.install:
            out[a.key] = str(a.version)
            out.update(
                {k: str(v) for k, v in ((data.get(a.key) or {}).get(str(a.version), {}).get("bundles") or {}).items()}
            )
    return out
