"""cost.py -> platforms.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kimi_k3.data import recipe_file


@dataclass(frozen=True)
class Platform:
    name: str
    gpu_product_label: str
    gpus_per_node: int
    hbm_gb: float
    nvlink_domain_nodes: int
    arch: str


@dataclass(frozen=True)
class StorageBackend:
    name: str
    description: str
    shared: bool
    per_client_gbps: float
    aggregate_gbps: float | None


@lru_cache(maxsize=None)
def load_platforms() -> dict[str, Platform]:
    return {name: Platform(name=name, **p) for name, p in recipe_file("facts/platforms.yaml").items()}


def load_storage_backends(
    fsx_size_gib: float | None = None, fsx_mbps_per_tib: float | None = None
) -> dict[str, StorageBackend]:
    """Backends from recipes/facts/storage.yaml; FSx aggregate = size x per-unit throughput (overridable per stack)."""
    out = {}
    for name, b in recipe_file("facts/storage.yaml").items():
        if name == "local_zone_link":
            continue
        aggregate = b.get("aggregate_gbps")
        if "size_gib" in b:
            size = fsx_size_gib if fsx_size_gib is not None else b["size_gib"]
            unit = fsx_mbps_per_tib if fsx_mbps_per_tib is not None else b["per_unit_mbps_per_tib"]
            aggregate = size / 1024 * unit / 1000
        out[name] = StorageBackend(
            name=name,
            description=b["description"],
            shared=b["shared"],
            per_client_gbps=b["per_client_gbps"],
            aggregate_gbps=aggregate,
        )
    return out


def local_zone_link_gbps() -> float:
    """Assumed bandwidth between a Local Zone and its parent Region for all GPU nodes together (storage.yaml)."""
    return float(recipe_file("facts/storage.yaml")["local_zone_link"]["aggregate_gbps"])
