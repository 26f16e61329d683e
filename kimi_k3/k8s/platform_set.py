"""The pinned, compatible platform set (recipes/platform/platform-set.yaml), checked before anything is registered (pure).

Every add-on the stack installs must be at a version the set lists; the Dynamo platform's requirements (DRA
driver versions, minimum Kubernetes) must hold; and the API versions our manifests use must be served by the
CRDs of the versions installed. Add-ons an existing cluster already has (install: false) are not ours to pin.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from kimi_k3.config.base import ConfigError
from kimi_k3.data import recipe_file

SOURCE = "recipes/platform/platform-set.yaml"
ADDONS_SOURCE = "recipes/platform/addons.yaml"


def platform_set() -> dict[str, Any]:
    return recipe_file("platform/platform-set.yaml")


def _key(addon_key: str) -> str:
    return f"kimi-k3:platform.{addon_key}.version"


def runnable(key: str) -> list[str]:
    """The versions of an add-on a stack may run: listed, with nothing `unsourced`."""
    return [str(v) for v, e in (platform_set().get(key) or {}).items() if not (e or {}).get("unsourced")]


def check(
    addons: Sequence[Any],
    kubernetes_version: str | None,
    api_versions: Mapping[str, str],
    images: Mapping[str, str] | None = None,
    set_name: str | None = None,
) -> None:
    """Raise ConfigError naming the key, the value and what is allowed.

    addons: kimi_k3.k8s.addons.AddonSpec list; api_versions: kind -> apiVersion our manifests emit;
    images: config key -> the Dynamo runtime image it runs (checked against `runtimeImages`)."""
    data = platform_set()
    installed = {a.key: str(a.version) for a in addons if a.install}
    chosen = f"kimi-k3:platformSet = {set_name} ({{}})" if set_name else "{}"
    for key, version in installed.items():
        known = data.get(key) or {}
        if version not in known:
            raise ConfigError(
                f"{_key(key)} = {version}: not in the tested platform set; allowed: "
                f"{', '.join(runnable(key)) or 'none'} ({SOURCE}: add the version with what it bundles and "
                "needs, then upgrade in the order docs/operating.md gives)"
            )
        missing = (known[version] or {}).get("unsourced")
        if missing:
            raise ConfigError(
                chosen.format(f"{_key(key)} = {version}") + f": what {key} {version} {', '.join(missing)} is not "
                f"sourced yet ({SOURCE}: read its Chart.yaml at the release tag); allowed: {', '.join(runnable(key))}"
            )
    dynamo = installed.get("dynamoPlatform")
    if dynamo is None:
        return
    entry = data["dynamoPlatform"][dynamo]
    spec = next(a for a in addons if a.key == "dynamoPlatform" and a.install)
    problem = chart_values_problem(dynamo, spec.values, entry)
    if problem:
        raise ConfigError(problem)
    for where, image in (images or {}).items():
        allowed = image_platforms(image)
        if allowed is not None and minor(dynamo) not in allowed:
            raise ConfigError(
                f"{where} = {image}: runs on dynamo-platform {' or '.join(f'{m}.x' for m in allowed) or 'none'} "
                f"(runtimeImages in {SOURCE}), but the stack installs dynamo-platform {dynamo} "
                + (f"(kimi-k3:platformSet = {set_name})" if set_name else f"({_key('dynamoPlatform')})")
                + f"; allowed: an image that runs on {minor(dynamo)}.x, or a platform set with "
                + " or ".join(f"dynamoPlatform {m}.x" for m in allowed)
            )
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


def _at(values: Mapping[str, Any], path: str) -> Any:
    for part in path.split("."):
        values = values.get(part) if isinstance(values, Mapping) else None
    return values


def chart_values_problem(version: str, values: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """Why dynamo-platform `version`'s own validate-values template would `fail` the install on `values`
    (`groveWithBundledKai` in the set), or None. Mirrors the chart: Grove enabled or installed, KAI installed."""
    grove, kai = _at(values, "global.grove") or {}, _at(values, "global.kai-scheduler") or {}
    if not ((grove.get("enabled") or grove.get("install")) and kai.get("install")):
        return None
    for path, want in (entry.get("groveWithBundledKai") or {}).items():
        have = _at(values, path)
        if have is None or str(have) != str(want):
            return (
                f"kimi-k3:platform.dynamoPlatform.values.{path} = {have if have is not None else '(unset)'}: "
                f"dynamo-platform {version} installs Grove and KAI together here, and its chart refuses the install "
                f'unless this is "{want}" ({SOURCE}, groveWithBundledKai; the default in {ADDONS_SOURCE}); '
                f'allowed: "{want}", or global.kai-scheduler.install = false with your own KAI'
            )
    return None


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.lstrip("v").split(".")[:2])


DYNAMO_RUNTIME = re.compile(r"^nvcr\.io/nvidia/ai-dynamo/[\w-]+-runtime:(\d+)\.(\d+)\.\d+(-efa(-amd64)?|-cuda\d+)?$")


def minor(version: str) -> str:
    """1.5.0 -> "1.5" (a Dynamo line)."""
    return ".".join(version.lstrip("v").split(".")[:2])


def image_platforms(image: str) -> list[str] | None:
    """The dynamoPlatform minors a Dynamo runtime image runs on; None for an image that is not a Dynamo runtime
    (the operator does not care what a Job or a sidecar runs). An unknown tag of a Dynamo runtime runs on none."""
    data = platform_set()
    entry = (data.get("runtimeImages") or {}).get(image)
    if entry is not None:
        return [str(m) for m in entry["platforms"]]
    if not re.match(r"^nvcr\.io/nvidia/ai-dynamo/[\w-]+-runtime:", image):
        return None
    release = DYNAMO_RUNTIME.match(image)  # a plain release tag (or its -efa / -cuda variant): its own line
    return [f"{release[1]}.{release[2]}"] if release and data.get("releaseTagsRunOnTheirMinor") else []


def set_versions(name: str | None) -> dict[str, str]:
    """The add-on versions of a named platform set (`kimi-k3:platformSet`; None = `seed`), or ConfigError."""
    sets = platform_set()["sets"]
    if (name or "seed") not in sets:
        raise ConfigError(f"kimi-k3:platformSet = {name}: no such platform set; allowed: {', '.join(sets)} ({SOURCE})")
    return {k: str(v) for k, v in sets[name or "seed"].items()}


def upgrade_steps(before: str, after: str) -> list[tuple[str, str]]:
    """dynamo-platform before -> after as the steps Dynamo supports: within a minor, or to the adjacent minor
    (docs.nvidia.com/dynamo/latest/reference/releases/v1-6-0, "Apply every intermediate minor release in
    order"). A jump over a minor raises ConfigError naming the steps to take instead (pure)."""
    if before == after:
        return []
    (bmaj, bmin), (amaj, amin) = (tuple(int(p) for p in minor(v).split(".")) for v in (before, after))
    if (amaj, amin) < (bmaj, bmin):
        raise ConfigError(f"dynamo-platform {before} -> {after}: a downgrade; allowed: {before} or later")
    if amaj != bmaj or amin - bmin <= 1:
        return [(before, after)]
    listed = [str(v) for v in platform_set()["dynamoPlatform"]]
    path, at = [], before
    for m in range(bmin + 1, amin):
        line = [v for v in listed if minor(v) == f"{bmaj}.{m}"]
        step = max(line, key=_patch) if line else f"{bmaj}.{m}.x"
        path.append((at, step))
        at = step
    path.append((at, after))
    raise ConfigError(
        f"dynamo-platform {before} -> {after}: crosses {amin - bmin} minor releases; Dynamo upgrades only within "
        "a minor or to the adjacent one; allowed: " + ", then ".join(f"{a} -> {b}" for a, b in path)
    )


def _patch(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.lstrip("v").split("."))


def step_changes(before: str, after: str) -> list[str]:
    """What one dynamo-platform step replaces on the cluster, from the set's data (pure)."""
    data = platform_set()["dynamoPlatform"]
    old, new = data.get(before) or {}, data.get(after) or {}
    out = [f"helm release dynamo-platform: chart {before} -> {after} (the operator Deployment's pods roll)"]
    missing = sorted(set(old.get("unsourced") or []) | set(new.get("unsourced") or []))
    if "bundles" in missing:
        out.append(f"bundled Grove, KAI Scheduler, operator: not sourced for {before} -> {after} ({SOURCE})")
    else:
        for name, v in (new.get("bundles") or {}).items():
            was = (old.get("bundles") or {}).get(name)
            if was != v:
                out.append(f"{name}: {was} -> {v} (its pods roll; its CRDs are re-applied)")
    if "serves" not in missing and old.get("serves") != new.get("serves"):
        out.append(f"CRDs served: {old.get('serves')} -> {new.get('serves')}")
    if minor(before) != minor(after):
        out.append(f"a minor step: read the {minor(after)}.0 release notes' breaking changes before it")
    return out


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
