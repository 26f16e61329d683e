"""One SGLang worker role of the serving graph (build.py calls it for recipes with `engine: sglang`): SGLang's own
flags (recipes/facts/sglang.yaml), its page-based KV block, no vLLM-only environment."""

from __future__ import annotations

from typing import Any

from kimi_k3.config.base import ConfigError, FlagValue
from kimi_k3.graph.compile_cache import compile_cache_env, compile_cache_key
from kimi_k3.graph.model import Role
from kimi_k3.graph.recipe import Recipe, RoleRecipe, _check_overridable, flag_list, merge
from kimi_k3.graph.sglang_flags import (
    derived_sglang_flags,
    sglang_dcp,
    sglang_kv_events,
    sglang_role_fields,
    sglang_typed_flags,
    strip_vllm_env,
)


def sglang_role(
    key: str,
    rr: RoleRecipe,
    over: Any,
    recipe: Recipe,
    cfg: Any,
    tp: int,
    nodes: int,
    util: float,
    model_path: str,
    base_env: dict[str, str],
    image: str,
    ctx: dict[str, Any],
) -> Role:
    extra = over.extra_args if over else {}
    _check_overridable(extra, derived_sglang_flags(), f"kimi-k3:serving.roles.{key}.extraArgs")
    if ctx["efa"]:  # choose_kv_transport picks EFA only with an -efa image; no SGLang K3 image has one
        raise ConfigError(f"kimi-k3:serving: role {key}: KV over EFA is not supported for SGLang recipes here")
    typed = sglang_typed_flags(
        model_path=model_path,
        served_model_name=cfg.model.served_model_name,
        tp=tp,
        util=util,
        kv_cache_dtype=recipe.kv_cache_dtype,
        context=recipe.max_model_len,
        page=recipe.page_size,
    )
    events: dict[str, FlagValue] = sglang_kv_events(recipe.kv_events_port) if rr.publishes_kv_events else {}
    flags = merge(merge(merge(merge(typed, recipe.worker.args), rr.args), events), extra)
    dcp = sglang_dcp(flags, key, tp, over.dcp if over else None)
    fields = sglang_role_fields(flags, dcp)
    env = strip_vllm_env(merge(merge(merge(base_env, recipe.worker.env), rr.env), over.env if over else {}))
    cache_key = compile_cache_key(image, flag_list(flags)) if ctx["compile_cache"] else ""
    if ctx["compile_cache"]:
        env = merge(env, compile_cache_env())
    name, platform = ctx["name"], ctx["platform"]
    return Role(
        key=key,
        component=rr.component,
        type=rr.type,
        tp=tp,
        gpus_per_node=platform.gpus_per_node,
        nodes_per_replica=nodes,
        replicas=ctx["replicas"][key],
        gpu_memory_utilization=util,
        kv_cache_dtype=recipe.kv_cache_dtype,
        max_model_len=recipe.max_model_len,
        shared_memory_size=over.shared_memory_size if over and over.shared_memory_size else rr.shared_memory_size,
        publishes_kv_events=rr.publishes_kv_events,
        cpu=rr.cpu,
        memory=rr.memory,
        args=flag_list(flags),
        env=tuple(env.items()),
        pod_annotations=tuple(sorted(recipe.worker.pod_annotations.items())),
        efa_devices=0,
        dcp=dcp,
        compile_cache_key=cache_key,
        nvlink_group=name if ctx["transport"] == "nvlink" else f"{name}-{key}",
        compute_domain="nvlink" if ctx["shared_domain"] else key,
        engine="sglang",
        **fields,
    )
