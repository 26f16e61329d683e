"""Model path and cache: $(VAR) references, --model under a read-only cache mount."""

from __future__ import annotations

from typing import Iterator, Mapping, Optional

from kimi_k3 import flags
from policies.rules.base import (
    name_of, shown,
    Context,
    Finding,
    Result,
    all_containers,
    model_mount,
    pod_spec,
    pod_specs,
    resolved_model,
    serving,
    target_of,
    workers,
)


def _env_ref_problems(container: Mapping) -> Iterator[tuple[str, bool]]:
    """(message, provable) for every variable reference the container's env does not define."""
    env = flags.container_env(container)
    for text in flags.raw_argv(container):
        for name in flags.kube_refs(text):
            if name not in env:
                yield f"$({name}) has no env entry; Kubernetes passes the literal text '$({name})'", False
    script = flags.shell_script(container)
    for name in flags.shell_refs(script or ""):
        if name not in env:
            yield f"shell script reads ${{{name}}} which no env entry defines", False


def _env_refs(obj: Mapping, with_env_from: bool) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            if bool(container.get("envFrom")) != with_env_from:
                continue
            for message, _ in _env_ref_problems(container):
                suffix = " (envFrom may define it: cannot be proven)" if with_env_from else ""
                yield Finding(target_of(obj), f"{label} container {name_of(container)}: {message}{suffix}")


def check_env_refs_resolve(obj: Mapping, ctx: Context) -> Iterator[Result]:
    return _env_refs(obj, with_env_from=False)


def check_env_refs_provable(obj: Mapping, ctx: Context) -> Iterator[Result]:
    return _env_refs(obj, with_env_from=True)


def _is_placeholder(value: str) -> bool:
    return value.strip() in ("", "MODEL_PATH") or value.startswith("$")


def check_model_path_under_cache_mount(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in spec.get("containers") or []:
            tokens, _ = serving(container)
            raw, value = resolved_model(container, tokens)
            if raw is None:
                continue
            where = f"{label} container {name_of(container)}"
            if value is None or _is_placeholder(value):
                yield Finding(target_of(obj), f"{where}: model path {shown(raw)} does not resolve to a value")
            elif not value.startswith("/"):
                yield Finding(target_of(obj), f"{where}: model {shown(value)} (from {shown(raw)}) is not an absolute path; "
                              "a Hub id makes every cold start depend on the Hub and the cache layout")
            else:
                found = model_mount(container, spec, value)
                volume = found[1] if found else {}
                if not (volume.get("persistentVolumeClaim") or volume.get("hostPath")):
                    yield Finding(target_of(obj), f"{where}: model path {value} is not under a volumeMount of a "
                                  "model-cache volume (PVC or hostPath)")


def check_roles_agree_on_model(obj: Mapping, ctx: Context) -> Iterator[Result]:
    seen: dict[tuple[Optional[str], Optional[str]], list[str]] = {}
    for comp, container, tokens in workers(obj):
        _, path = resolved_model(container, tokens)
        served_raw = flags.flag_value(tokens, "--served-model-name")
        env = flags.container_env(container)
        served = flags.resolve(served_raw, env, flags.shell_script(container) is not None) if served_raw else path
        seen.setdefault((path, served), []).append(name_of(comp))
    if len(seen) > 1:
        described = "; ".join(f"{', '.join(names)} -> path {shown(p)}, served as {shown(s)}" for (p, s), names in sorted(
            seen.items(), key=lambda kv: kv[1]))
        yield Finding(target_of(obj), f"workers disagree on the model: {described}")


def check_model_cache_read_only(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        _, value = resolved_model(container, tokens)
        found = model_mount(container, pod_spec(comp), value) if value and value.startswith("/") else None
        if found and not found[0].get("readOnly"):
            yield Finding(target_of(obj), f"component {name_of(comp)}: model-cache mount "
                          f"{found[0].get('mountPath')} is writable; workers only read weights")
