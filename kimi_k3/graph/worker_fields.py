"""A worker's typed fields, read once from its merged flags before they are rendered to argv (recipe.flag_list):
Role.block_size, load_format, prefix_caching, max_num_seqs, max_num_batched_tokens, speculative_config. Nothing parses the argv back."""

from __future__ import annotations

import json
from typing import Optional

from kimi_k3.config.base import FlagValue
from kimi_k3.facts.vllm_flags import planner_kv_dtype
from kimi_k3.sizing.memory import aligned_block_size


def _flag(flags: dict[str, FlagValue], flag: str) -> Optional[str]:
    """The value `flag` renders with (flag_list): None when it is dropped (None/False) or bare (True)."""
    value = flags.get(flag)
    return None if value is None or isinstance(value, bool) else str(value)


def role_fields(flags: dict[str, FlagValue]) -> dict[str, object]:
    """A worker's typed fields, read once from its merged flags (before they are rendered to argv): what vLLM
    does with them, e.g. the last of the two prefix-caching flags wins and neither means vLLM V1's default, on."""
    caching = [f for f, v in flags.items() if f in PREFIX_CACHING_FLAGS and v is not None and v is not False]
    seqs = _flag(flags, "--max-num-seqs")
    budget = _flag(flags, "--max-num-batched-tokens")
    spec = _flag(flags, "--speculative-config") or ""
    prefix_caching = not caching or caching[-1] == "--enable-prefix-caching"
    dtype = _flag(flags, "--kv-cache-dtype") or "auto"
    return {
        "load_format": _flag(flags, "--load-format") or "auto",
        "prefix_caching": prefix_caching,
        "max_num_seqs": None if seqs is None else int(seqs),
        "max_num_batched_tokens": None if budget is None else int(budget),
        "speculative_config": spec,
        # vLLM raises a smaller --block-size to its aligned hybrid block (_align_hybrid_block_size); prefix hashes,
        # KV events and Dynamo's model card all use it.
        "block_size": aligned_block_size(
            int(_flag(flags, "--tensor-parallel-size") or 1),
            kv_cache_dtype=planner_kv_dtype(dtype),
            spec_tokens=int(json.loads(spec or "{}").get("num_speculative_tokens", 0) or 0),
            prefix_caching=prefix_caching,
        ),
    }


PREFIX_CACHING_FLAGS = ("--enable-prefix-caching", "--no-enable-prefix-caching")
