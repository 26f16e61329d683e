"""What Dynamo's SGLang worker accepts and does (recipes/facts/sglang.yaml), typed: flag names, KV dtype names,
the KV router's block rule, disaggregation backends, parsers and what the operator injects."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from kimi_k3.data import recipe_file

ENGINES = ("vllm", "sglang")
# The worker module each engine runs (`python3 -m <module>`) and the DGD's spec.backendFramework.
ENGINE_MODULES = {"vllm": "dynamo.vllm", "sglang": "dynamo.sglang"}


@dataclass(frozen=True)
class SglangFacts:
    module: str
    backend_framework: str
    flags: dict[str, str]  # typed field -> SGLang flag (model, tp, dcp, page_size, ...)
    kv_cache_dtype: dict[str, str]  # recipe kvCacheDtype -> --kv-cache-dtype value
    default_page_size: Optional[int]
    transfer_backends: tuple[str, ...]
    default_transfer_backend: str
    default_bootstrap_port: int
    parsers: dict[str, str]
    exclusive_with_dyn_tool_call_parser: str
    operator_injected: tuple[str, ...]
    dist_init_port: int
    vllm_only_env: tuple[str, ...]

    def flag(self, field: str) -> str:
        return self.flags[field]

    @staticmethod
    def router_block(page_size: int, dcp: int = 1) -> int:
        """The block an SGLang worker registers with the KV router and emits KV events in (capacity.py)."""
        return page_size * max(dcp, 1)


@lru_cache(maxsize=None)
def load_sglang_facts() -> SglangFacts:
    raw = recipe_file("facts/sglang.yaml")
    if raw.get("router_block") != "page_size_times_dcp":
        raise ValueError(
            f"recipes/facts/sglang.yaml: router_block = {raw.get('router_block')!r}: allowed: page_size_times_dcp"
        )
    return SglangFacts(
        module=raw["module"],
        backend_framework=raw["backend_framework"],
        flags=dict(raw["flags"]),
        kv_cache_dtype=dict(raw["kv_cache_dtype"]),
        default_page_size=raw.get("default_page_size"),
        transfer_backends=tuple(raw["transfer_backends"]),
        default_transfer_backend=raw["default_transfer_backend"],
        default_bootstrap_port=int(raw["default_bootstrap_port"]),
        parsers=dict(raw["parsers"]),
        exclusive_with_dyn_tool_call_parser=raw["exclusive_with_dyn_tool_call_parser"],
        operator_injected=tuple(raw["operator_injected"]),
        dist_init_port=int(raw["dist_init_port"]),
        vllm_only_env=tuple(raw["vllm_only_env"]),
    )
