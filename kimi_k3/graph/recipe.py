"""build.py -> recipe.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, ValidationError, field_validator, model_validator

from kimi_k3.config.base import ConfigError, FlagValue, Quantity, Strict, allowed_as, format_validation_error
from kimi_k3.data import recipe_file

# Flags the graph derives from typed fields: set them through their config keys, not extraArgs.
DERIVED_WORKER_FLAGS = {
    "--model": "kimi-k3:model",
    "--served-model-name": "kimi-k3:model.servedModelName",
    "--tensor-parallel-size": "kimi-k3:serving.roles.<role>.tp",
    "--pipeline-parallel-size": "the recipe role's pp",
    "--gpu-memory-utilization": "kimi-k3:serving.roles.<role>.gpuMemoryUtilization",
    "--kv-cache-dtype": "the recipe's kvCacheDtype",
    "--max-model-len": "the recipe's maxModelLen",
    "--block-size": "vLLM's aligned hybrid block (planner.aligned_block_size)",
    "--kv-events-config": "the recipe's publishesKvEvents",
    "--decode-context-parallel-size": "kimi-k3:serving.roles.<role>.dcp",
}


DERIVED_FRONTEND_FLAGS = {
    "--kv-cache-block-size": "the workers' --block-size (planner.aligned_block_size)",
    "--migration-limit": "kimi-k3:serving.frontend.migrationLimit (default: recipes/defaults/request-migration.yaml)",
}


class RoleRecipe(Strict):
    component: str = Field(
        pattern=allowed_as(r"^[A-Za-z][A-Za-z0-9]*$", "letters and digits, starting with a letter, e.g. DecodeWorker")
    )
    type: Literal["prefill", "decode", "worker"]
    tp: int = Field(ge=1)
    # vLLM pipeline stages (--pipeline-parallel-size): each TP group in one NVLink domain, stages across nodes.
    pp: int = Field(1, ge=1)
    replicas: int = Field(ge=0)
    gpu_memory_utilization: float = Field(alias="gpuMemoryUtilization", gt=0, le=1)
    shared_memory_size: Quantity = Field(alias="sharedMemorySize")
    publishes_kv_events: bool = Field(alias="publishesKvEvents")
    cpu: Optional[str] = None
    memory: Optional[Quantity] = None
    args: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict)


class FrontendRecipe(Strict):
    replicas: int = Field(1, ge=1)
    cpu: Optional[str] = None
    memory: Optional[Quantity] = None
    args: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict)


class WorkerRecipe(Strict):
    pod_annotations: dict[str, str] = Field(default_factory=dict, alias="podAnnotations")
    args: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict)


class Recipe(Strict):
    platform: Literal["gb200", "gb300", "h200"]
    # The engine every worker role runs (recipes/facts/sglang.yaml for SGLang's flags, parsers, KV transfer, block).
    engine: Literal["vllm", "sglang"] = "vllm"
    image: str
    runtime_version: Optional[str] = Field(None, alias="runtimeVersion")
    # Optional: derived per role (vllm_block_size); a value vLLM would raise is refused, not rendered.
    block_size: Optional[int] = Field(None, alias="blockSize", ge=1)
    # SGLang only (engine: sglang): tokens per KV page (--page-size); the router's block is pageSize x the role's DCP.
    page_size: Optional[int] = Field(None, alias="pageSize", ge=1)
    max_model_len: int = Field(alias="maxModelLen", ge=1)
    kv_cache_dtype: Literal["fp8", "bf16", "auto"] = Field(alias="kvCacheDtype")
    kv_events_port: int = Field(alias="kvEventsPort", ge=1024, le=65535)
    # How disaggregated KV moves between prefill and decode: `nvlink` (NIXL default UCX backend, cuda_ipc over MNNVL,
    # every role in one ComputeDomain), `efa` (NIXL LIBFABRIC backend, workers request the node's EFA devices, needs
    # an EFA runtime image), or `auto`: NVLink when the whole graph fits one NVLink domain, else EFA.
    kv_transport: Literal["auto", "nvlink", "efa"] = Field("auto", alias="kvTransport")
    frontend: FrontendRecipe
    worker: WorkerRecipe
    roles: dict[str, RoleRecipe]

    @field_validator("max_model_len")
    @classmethod
    def _within_model(cls, v: int) -> int:
        most = recipe_file("facts/model.yaml")["text"]["max_position_embeddings"]
        if v > most:  # vLLM refuses a max_model_len past the model's max_position_embeddings
            raise ValueError(
                f"beyond Kimi K3's max_position_embeddings {most:,} (recipes/facts/model.yaml); allowed: 1..{most}"
            )
        return v

    @model_validator(mode="after")
    def _engine_block(self) -> "Recipe":
        # Each engine states its KV unit its own way: vLLM --block-size (derived), SGLang --page-size (stated).
        if self.engine == "sglang" and (self.page_size is None or self.block_size is not None):
            raise ValueError("engine sglang: set pageSize (SGLang's --page-size), not blockSize; allowed: e.g. 64")
        if self.engine == "vllm" and self.page_size is not None:
            raise ValueError("pageSize is SGLang's (engine: sglang); vLLM recipes use blockSize or leave it derived")
        return self


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge maps key by key; a `None` value removes the key."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _recipe_data(name: str) -> dict[str, Any]:
    raw = recipe_file(f"profiles/{name}.yaml")
    base_name = raw.pop("extends", None)
    if base_name is None:
        return raw
    base = dict(_recipe_data(base_name))
    base.pop("roles")  # a derived recipe states its roles whole
    return merge(base, raw)


def load_recipe(name: str) -> Recipe:
    try:
        return Recipe.model_validate(_recipe_data(name))
    except ValidationError as err:  # a broken recipe file is a bug in this repo, reported like config errors
        raise ConfigError(f"recipes/profiles/{name}.yaml: " + format_validation_error(err)) from None


def flag_list(flags: dict[str, FlagValue]) -> tuple[str, ...]:
    out: list[str] = []
    for flag, value in flags.items():
        if value is True:
            out.append(flag)
        elif value is not False and value is not None:
            out += [flag, str(value)]
    return tuple(out)


def _check_overridable(flags: dict[str, FlagValue], derived: dict[str, str], key: str) -> None:
    for flag in flags:
        if flag in derived:
            raise ConfigError(f"{key}: {flag} is derived by the graph; set {derived[flag]} instead")
