"""SGLang workers of the serving graph: the flags derived from typed fields (recipes/facts/sglang.yaml names them) and
the typed fields read back from a role's merged flags, as worker_fields.py does for vLLM."""

from __future__ import annotations

from typing import Optional

from kimi_k3.config.base import ConfigError, FlagValue
from kimi_k3.facts.sglang import load_sglang_facts


def derived_sglang_flags() -> dict[str, str]:
    """SGLang flags the graph derives (extraArgs may not set them), with the key to set instead."""
    f = load_sglang_facts()
    out = {
        f.flag("model"): "kimi-k3:model",
        f.flag("served_model_name"): "kimi-k3:model.servedModelName",
        f.flag("tp"): "kimi-k3:serving.roles.<role>.tp",
        f.flag("memory_fraction"): "kimi-k3:serving.roles.<role>.gpuMemoryUtilization",
        f.flag("kv_cache_dtype"): "the recipe's kvCacheDtype",
        f.flag("context_length"): "the recipe's maxModelLen",
        f.flag("page_size"): "the recipe's pageSize",
        f.flag("kv_events"): "the recipe's publishesKvEvents",
    }
    # The operator appends these to every pod of a multinode worker (backend_sglang.go): a second copy would clash.
    out.update({flag: "nothing: the Dynamo operator injects it" for flag in f.operator_injected})
    return out


def sglang_typed_flags(
    *, model_path: str, served_model_name: str, tp: int, util: float, kv_cache_dtype: str, context: int, page: int
) -> dict[str, FlagValue]:
    f = load_sglang_facts()
    return {
        f.flag("model"): model_path,
        f.flag("served_model_name"): served_model_name,
        f.flag("tp"): tp,
        f.flag("memory_fraction"): util,
        f.flag("kv_cache_dtype"): f.kv_cache_dtype[kv_cache_dtype],
        f.flag("context_length"): context,
        f.flag("page_size"): page,
    }


def sglang_kv_events(port: int) -> dict[str, FlagValue]:
    # SGLang's KvEventsConfig (upstream agg K3 SGLang recipes): publisher/topic/endpoint, no enable_kv_cache_events.
    return {
        load_sglang_facts().flag("kv_events"): '{"publisher":"zmq","topic":"kv-events","endpoint":"tcp://*:%d"}' % port
    }


def _value(flags: dict[str, FlagValue], flag: str) -> Optional[str]:
    value = flags.get(flag)
    return None if value is None or isinstance(value, bool) else str(value)


def sglang_dcp(flags: dict[str, FlagValue], key: str, tp: int, over_dcp: Optional[int]) -> int:
    """The role's --dcp-size (stated in the profile's role args); kimi-k3:serving.roles.<role>.dcp is vLLM's."""
    if over_dcp is not None:
        raise ConfigError(
            f"kimi-k3:serving.roles.{key}.dcp = {over_dcp}: decode context parallelism of an SGLang recipe is its "
            f"role's {load_sglang_facts().flag('dcp')} (recipes/profiles); allowed: leave dcp unset"
        )
    raw = _value(flags, load_sglang_facts().flag("dcp"))
    dcp = int(raw) if raw else 1
    if dcp < 1 or tp % dcp:
        raise ConfigError(f"role {key}: --dcp-size {dcp} must divide the role's tp {tp} (SGLang splits the TP group)")
    return dcp


def sglang_role_fields(flags: dict[str, FlagValue], dcp: int) -> dict[str, object]:
    """The typed Role fields of an SGLang worker: block = the KV router's (page x DCP), radix cache on unless
    --disable-radix-cache, --max-running-requests as the batch limit."""
    f = load_sglang_facts()
    page = int(_value(flags, f.flag("page_size")) or 0)
    seqs = _value(flags, "--max-running-requests")
    return {
        "load_format": "auto",
        "prefix_caching": flags.get("--disable-radix-cache") in (None, False),
        "max_num_seqs": None if seqs is None else int(seqs),
        "max_num_batched_tokens": None,  # SGLang's chunked prefill (--chunked-prefill-size) is not modelled
        "speculative_config": "",
        "block_size": f.router_block(page, dcp),
    }


def strip_vllm_env(env: dict[str, Optional[str]]) -> dict[str, Optional[str]]:
    return {k: v for k, v in env.items() if k not in load_sglang_facts().vllm_only_env}
