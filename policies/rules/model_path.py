"""Model path and cache: $(VAR) references, --model under a read-only cache mount."""

from __future__ import annotations

from typing import Iterator, Mapping, Optional

from kimi_k3 import flags
from kimi_k3.offline import operator_rewrite
from policies.rules.base import (
    Context,
    Finding,
    Result,
    Skipped,
    all_containers,
    model_mount,
    name_of,
    node_count,
    pod_spec,
    pod_specs,
    resolved_model,
    serving,
    shown,
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
                yield Finding(
                    target_of(obj),
                    f"{where}: model {shown(value)} (from {shown(raw)}) is not an absolute path; "
                    "a Hub id makes every cold start depend on the Hub and the cache layout",
                )
            else:
                found = model_mount(container, spec, value)
                volume = found[1] if found else {}
                if not (volume.get("persistentVolumeClaim") or volume.get("hostPath")):
                    yield Finding(
                        target_of(obj),
                        f"{where}: model path {value} is not under a volumeMount of a "
                        "model-cache volume (PVC or hostPath)",
                    )


def check_roles_agree_on_model(obj: Mapping, ctx: Context) -> Iterator[Result]:
    seen: dict[tuple[Optional[str], Optional[str]], list[str]] = {}
    for comp, container, tokens in workers(obj):
        _, path = resolved_model(container, tokens)
        served_raw = flags.flag_value(tokens, "--served-model-name")
        env = flags.container_env(container)
        served = flags.resolve(served_raw, env, flags.shell_script(container) is not None) if served_raw else path
        seen.setdefault((path, served), []).append(name_of(comp))
    if len(seen) > 1:
        described = "; ".join(
            f"{', '.join(names)} -> path {shown(p)}, served as {shown(s)}"
            for (p, s), names in sorted(seen.items(), key=lambda kv: kv[1])
        )
        yield Finding(target_of(obj), f"workers disagree on the model: {described}")


def check_model_cache_read_only(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        _, value = resolved_model(container, tokens)
        found = model_mount(container, pod_spec(comp), value) if value and value.startswith("/") else None
        if found and not found[0].get("readOnly"):
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: model-cache mount "
                f"{found[0].get('mountPath')} is writable; workers only read weights",
            )


def _backend(comp: Mapping) -> str:
    """The operator's mp/ray choice: its override annotation, else mp (the operator's default for new graphs)."""
    annotations = {
        **(comp.get("annotations") or {}),
        **(((comp.get("podTemplate") or {}).get("metadata") or {}).get("annotations") or {}),
    }
    return "ray" if str(annotations.get(operator_rewrite.BACKEND_ANNOTATION, "")).lower() == "ray" else "mp"


def check_multinode_args_survive_operator_rewrite(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Emulate the Dynamo operator's Grove multinode rewrite + kubelet expansion + `sh -c` per pod and compare
    each pod's argv with what the spec means (kimi_k3/offline/operator_rewrite.py cites the operator source)."""
    dgd = str((obj.get("metadata") or {}).get("name") or "graph")
    for comp, container, _ in workers(obj):
        if node_count(comp) < 2:
            continue
        argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        if not argv or not operator_rewrite.is_python_command(argv[0]):
            continue  # a shell-script command only gets flags inserted into its script, nothing re-quoted
        grove = operator_rewrite.grove_env_for(dgd, str(comp.get("name")))
        backend = _backend(comp)
        try:
            launches = operator_rewrite.multinode_pod_launches(comp, container, grove, backend)
        except operator_rewrite.ShellSyntaxError as exc:
            yield Finding(
                target_of(obj),
                f"component {comp.get('name')}: the operator's shell-quoted launch line is "
                f"not valid sh ({exc}; a single quote in an arg does this): its pods exit with status 2",
            )
            continue
        except operator_rewrite.UnsupportedShell as exc:
            yield Skipped(
                target_of(obj), f"component {comp.get('name')}: cannot evaluate the rewritten command ({exc})"
            )
            continue
        broken: dict[tuple[int, str, str], list[str]] = {}
        for pod in launches:
            env = operator_rewrite.container_env_map(
                container.get("env") or [], {**grove, "GROVE_PCLQ_POD_INDEX": str(pod.index)}
            )
            meant = [operator_rewrite.kubelet_expand(a, env) for a in argv]
            if pod.role == "worker" and backend == "ray":
                continue  # ray workers run only `ray start`; the leader spawns their ranks
            for k, want in enumerate(meant):
                got = pod.argv[k] if k < len(pod.argv) else None
                if got != want:
                    broken.setdefault((k, want, str(got)), []).append(f"{pod.role} {pod.index}")
                    break
        for (k, want, got), pods in sorted(broken.items()):
            flag = argv[k - 1] if k > 0 and argv[k - 1].startswith("-") else f"argument {k}"
            yield Finding(
                target_of(obj),
                f"component {comp.get('name')}: {len(pods)} pod(s) ({', '.join(pods)}) "
                f"receive {flag} {got!r} instead of {want!r} (spec: {argv[k]!r}): the Dynamo operator "
                f"runs multinode vLLM pods as `sh -c` with shell-quoted args ($ -> \\$) after kubelet "
                "expanded $(VAR); write the value literally",
            )


def check_frontend_reads_model_path(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Workers register model cards pointing at their local model path; the frontend (offline) loads tokenizer
    and config from that path itself, so it must mount it (upstream's GB200 profiles mount the weights there)."""
    paths = set()
    for comp, container, tokens in workers(obj):
        _, value = resolved_model(container, tokens)
        if value and value.startswith("/"):
            paths.add(value)
    if not paths:
        return  # workers serve a Hub id: the frontend fetches (or finds) it the same way
    for label, spec in pod_specs(obj):
        for container in spec.get("containers") or []:
            tokens, mod = serving(container)
            if mod != "dynamo.frontend":
                continue
            for path in sorted(paths):
                found = model_mount(container, spec, path)
                volume = found[1] if found else {}
                if not (volume.get("persistentVolumeClaim") or volume.get("hostPath")):
                    yield Finding(
                        target_of(obj),
                        f"{label} container {container.get('name')}: cannot read {path}, "
                        "the local model path workers register; the frontend loads tokenizer and config "
                        "from it: mount the model cache (read-only) at the same path",
                    )
