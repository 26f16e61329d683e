"""vLLM's accepted values for enum-valued worker flags, and the recipe kvCacheDtype -> --kv-cache-dtype spelling
(recipes/facts/vllm-flags.yaml)."""

from __future__ import annotations

from functools import lru_cache

from kimi_k3.data import recipe_file


@lru_cache(maxsize=None)
def flag_choices() -> dict[str, tuple[str, ...]]:
    """flag -> the values vLLM accepts for it."""
    return {flag: tuple(values) for flag, values in recipe_file("facts/vllm-flags.yaml")["choices"].items()}


def kv_cache_dtype_flag(recipe_dtype: str) -> str:
    """The --kv-cache-dtype value vLLM takes for a recipe's kvCacheDtype (bf16 -> bfloat16)."""
    return recipe_file("facts/vllm-flags.yaml")["kv_cache_dtype"][recipe_dtype]


def planner_kv_dtype(flag_value: str) -> str:
    """The planner's dtype name for a rendered --kv-cache-dtype value (bfloat16 -> bf16; auto is BF16 for K3)."""
    back = {v: k for k, v in recipe_file("facts/vllm-flags.yaml")["kv_cache_dtype"].items()}
    dtype = back.get(flag_value, flag_value)
    return "bf16" if dtype == "auto" else dtype
