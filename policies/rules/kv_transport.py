"""KV transport and routing: disaggregation, NIXL/UCX/EFA, block sizes, KV events."""

from __future__ import annotations

import json
from typing import Iterator, Mapping, Sequence

from kimi_k3 import flags
from kimi_k3.facts.images import image_facts
from kimi_k3.names import EFA_RESOURCE as EFA
from policies.rules.base import (
    CLIQUE_LABEL as CLIQUE,
)
from policies.rules.base import (
    REMOVED_FLAGS,
    Context,
    Finding,
    Result,
    Skipped,
    _json_flag,
    all_containers,
    components,
    frontends,
    name_of,
    pod_spec,
    pod_specs,
    shown,
    target_of,
    workers,
)


def _component_type(comp: Mapping) -> str:
    return str(comp.get("type") or comp.get("componentType") or "").lower()


def check_disagg_roles_use_nixl(obj: Mapping, ctx: Context) -> Iterator[Result]:
    types = {_component_type(c) for c in components(obj)}
    if not {"prefill", "decode"} <= types:
        return
    for comp, _, tokens in workers(obj):
        role = _component_type(comp)
        if role not in ("prefill", "decode"):
            continue
        where = f"component {name_of(comp)} ({role})"
        mode = flags.flag_value(tokens, "--disaggregation-mode")
        if mode != role:
            yield Finding(target_of(obj), f"{where}: --disaggregation-mode is {shown(mode)}, expected {role!r}")
        connector = _json_flag(tokens, "--kv-transfer-config").get("kv_connector")
        if connector != "NixlConnector":
            yield Finding(
                target_of(obj),
                f"{where}: --kv-transfer-config kv_connector is {shown(connector)}, expected 'NixlConnector'",
            )


def check_no_removed_flags(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, _, tokens in workers(obj):
        for removed in REMOVED_FLAGS:
            if flags.has_flag(tokens, removed):
                yield Finding(
                    target_of(obj), f"component {name_of(comp)}: {removed} was removed; use --disaggregation-mode"
                )


def _ucx_excludes_cuda_ipc(tls: str) -> bool:
    items = [t.strip() for t in tls.split(",") if t.strip()]
    if items and items[0].startswith("^"):
        excluded = {items[0][1:], *items[1:]}
        return bool(excluded & {"cuda_ipc", "cuda"})
    return not (set(items) & {"all", "cuda", "cuda_ipc"})


def check_ucx_settings_consistent(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            env = flags.container_env(container)
            tls, mnnvl = env.get("UCX_TLS"), env.get("UCX_CUDA_IPC_ENABLE_MNNVL")
            if tls and mnnvl and mnnvl.lower() in ("y", "yes", "1", "true", "on") and _ucx_excludes_cuda_ipc(tls):
                yield Finding(
                    target_of(obj),
                    f"{label} container {name_of(container)}: UCX_TLS={tls} excludes "
                    "cuda_ipc while UCX_CUDA_IPC_ENABLE_MNNVL=y; KV transfer leaves NVLink for RDMA/TCP",
                )


def _requests_efa(container: Mapping) -> bool:
    res = container.get("resources") or {}
    return any(EFA in (res.get(k) or {}) for k in ("limits", "requests"))


def check_efa_uses_libfabric(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        config = _json_flag(tokens, "--kv-transfer-config")
        if not _requests_efa(container) or config.get("kv_connector") != "NixlConnector":
            continue
        extra = config.get("kv_connector_extra_config") or {}
        backends = extra.get("backends") if isinstance(extra, dict) else None
        dotted = config.get("kv_connector_extra_config.backends")
        names = [str(b).upper() for b in (backends or [])] + ([str(dotted).upper()] if dotted else [])
        if "LIBFABRIC" not in names:
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: requests {EFA} but NIXL backends are "
                f"{names or ['UCX (default)']}; set kv_connector_extra_config.backends to ['LIBFABRIC']",
            )


def check_frontend_block_size_matches_workers(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for fe, _, fe_tokens in frontends(obj):
        router_block = flags.flag_value(fe_tokens, "--kv-cache-block-size")
        if router_block is None:
            continue
        for comp, _, tokens in workers(obj):
            block = flags.flag_value(tokens, "--block-size")
            if block is None:
                yield Finding(
                    target_of(obj),
                    f"component {name_of(comp)}: no --block-size while frontend "
                    f"{name_of(fe)} routes with --kv-cache-block-size {router_block}; vLLM's default "
                    "(16 on CUDA, raised to the attention backend's kernel block, e.g. 64 for MLA) "
                    "cannot be proven equal",
                )
            elif block != router_block:
                yield Finding(
                    target_of(obj),
                    f"component {name_of(comp)}: --block-size {block} != frontend "
                    f"{name_of(fe)} --kv-cache-block-size {router_block}",
                )


def _publishes_kv_events(tokens: Sequence[str]) -> bool:
    config = _json_flag(tokens, "--kv-events-config")
    enabled = str(config.get("enable_kv_cache_events", "")).lower() == "true"
    return enabled and str(config.get("publisher", "zmq")).lower() != "null"


def check_kv_router_has_kv_events(obj: Mapping, ctx: Context) -> Iterator[Result]:
    disagg = {"prefill", "decode"} <= {_component_type(c) for c in components(obj)}
    for fe, fe_container, fe_tokens in frontends(obj):
        approximate = flags.has_flag(fe_tokens, "--no-router-kv-events") or flags.has_flag(fe_tokens, "--no-kv-events")
        # The flag, else its environment form (Dynamo's router_args.py: --router-mode <- DYN_ROUTER_MODE), which
        # NVIDIA's Kubernetes docs use; either way the router is KV-aware (#11473).
        mode = flags.flag_value(fe_tokens, "--router-mode") or flags.container_env(fe_container).get("DYN_ROUTER_MODE")
        if mode != "kv" or approximate:
            continue
        for comp, _, tokens in workers(obj):
            # Disaggregated: prefix hits are realised where the prompt is computed, the prefill role.
            routed = _component_type(comp) == "prefill" if disagg else True
            if routed and not _publishes_kv_events(tokens):
                yield Finding(
                    target_of(obj),
                    f"component {name_of(comp)}: frontend {name_of(fe)} uses "
                    "--router-mode kv but this worker publishes no KV events "
                    "(--kv-events-config with enable_kv_cache_events true)",
                )


def _nixl_backends(tokens: Sequence[str]) -> list[str]:
    config = _json_flag(tokens, "--kv-transfer-config")
    extra = config.get("kv_connector_extra_config") or {}
    backends = extra.get("backends") if isinstance(extra, dict) else None
    dotted = config.get("kv_connector_extra_config.backends")
    return [str(b).upper() for b in (backends or [])] + ([str(dotted).upper()] if dotted else [])


def kv_over_nvlink(container: Mapping, tokens: Sequence[str]) -> bool:
    """NIXL over UCX with cuda_ipc available and no EFA: KV moves GPU to GPU over NVLink (MNNVL)."""
    config = _json_flag(tokens, "--kv-transfer-config")
    if config.get("kv_connector") != "NixlConnector" or "LIBFABRIC" in _nixl_backends(tokens):
        return False
    tls = flags.container_env(container).get("UCX_TLS")
    return not _requests_efa(container) and not (tls and _ucx_excludes_cuda_ipc(tls))


def _channel_templates(comp: Mapping, container: Mapping) -> list[str]:
    claims = {c.get("name"): c.get("resourceClaimTemplateName") for c in pod_spec(comp).get("resourceClaims") or []}
    return sorted({str(claims.get(c.get("name"))) for c in (container.get("resources") or {}).get("claims") or []})


def _plain(value):
    """Plain dicts/lists from the Pulumi analyzer's proxies, so selectors compare as JSON."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (hasattr(value, "__iter__") and not isinstance(value, (str, bytes))):
        return [_plain(v) for v in value]
    return value


def _clique_selectors(comp: Mapping) -> list[str]:
    terms = ((pod_spec(comp).get("affinity") or {}).get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    return sorted(
        json.dumps(_plain(t.get("labelSelector")), sort_keys=True) for t in terms if t.get("topologyKey") == CLIQUE
    )


def check_nvlink_kv_roles_share_compute_domain(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Prefill and decode that hand KV over NVLink must be in one ComputeDomain (one IMEX domain: a pod cannot
    import memory another domain exported) and, where pinned, in one NVLink clique."""
    if not {"prefill", "decode"} <= {_component_type(c) for c in components(obj)}:
        return
    nvlink = [
        (comp, container)
        for comp, container, tokens in workers(obj)
        if _component_type(comp) in ("prefill", "decode") and kv_over_nvlink(container, tokens)
    ]
    if len(nvlink) < 2:
        return
    domains = {str(comp.get("name")): _channel_templates(comp, container) for comp, container in nvlink}
    if len({tuple(v) for v in domains.values()}) > 1:
        described = "; ".join(f"{name} claims {v or 'no channel'}" for name, v in sorted(domains.items()))
        yield Finding(
            target_of(obj),
            f"KV moves prefill -> decode over NVLink (NIXL UCX, cuda_ipc) but the roles "
            f"sit in different ComputeDomains ({described}); each ComputeDomain is its own IMEX domain, "
            "so claim one channel template in every role",
        )
    cliques = {str(comp.get("name")): _clique_selectors(comp) for comp, _ in nvlink}
    pinned = {k: v for k, v in cliques.items() if v}
    if len(pinned) == len(cliques) and len({tuple(v) for v in pinned.values()}) > 1:
        yield Finding(
            target_of(obj),
            "KV moves over NVLink but prefill and decode are pinned to different "
            f"{CLIQUE} groups ({', '.join(sorted(pinned))}): they may land in different NVLink domains",
        )


def check_kv_transport_consistent(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Transport, image and devices agree: NIXL LIBFABRIC needs EFA devices and an EFA runtime image
    (Dynamo publishes `vllm-runtime:<version>-efa`; recipes/facts/images.yaml records which images have it)."""
    for comp, container, tokens in workers(obj):
        where = f"component {comp.get('name')}"
        libfabric = "LIBFABRIC" in _nixl_backends(tokens)
        efa = _requests_efa(container)
        if not (libfabric or efa):
            continue
        image = str(container.get("image") or "")
        facts = image_facts(image)
        if libfabric and not efa:
            yield Finding(target_of(obj), f"{where}: NIXL LIBFABRIC backend but no {EFA} devices requested")
        if facts.arch is None:
            yield Skipped(
                target_of(obj), f"{where}: image {image} not in recipes/facts/images.yaml: EFA support unknown"
            )
        elif not facts.efa:
            yield Finding(
                target_of(obj),
                f"{where}: KV over EFA ({'NIXL LIBFABRIC' if libfabric else EFA}) on image "
                f"{image}, which has no EFA stack (recipes/facts/images.yaml); Dynamo publishes EFA runtime "
                "images as vllm-runtime:<version>-efa. Use one, or keep KV on NVLink",
            )


def check_worker_block_size_is_vllms(obj: Mapping, ctx: Context) -> Iterator[Result]:
    from kimi_k3.sizing.memory import vllm_block_size

    for comp, _, tokens in workers(obj):
        block = flags.flag_value(tokens, "--block-size")
        aligned = vllm_block_size(tokens)
        # vLLM raises a smaller (or absent) block to the aligned one in its engine only: the API process, Dynamo's
        # fallback card/publisher (ai-dynamo/dynamo#9376) and the frontend then disagree with the KV events.
        if block is None or int(block) < aligned:
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: --block-size {block or '(unset)'} but vLLM "
                f"runs this Kimi K3 worker with {aligned}-token blocks (planner.aligned_block_size); "
                f"set --block-size {aligned} and the frontend's --kv-cache-block-size to it",
            )
