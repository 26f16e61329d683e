"""nodes.py -> aws.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kimi_k3.data import recipe_file


@dataclass(frozen=True)
class EfaLayout:
    primary_card: int
    efa_only_cards: tuple[int, ...]

    @property
    def devices(self) -> int:
        return len(self.efa_only_cards)


@dataclass(frozen=True)
class InstanceFacts:
    name: str
    platform: str
    arch: str
    capacity_block_only: bool
    ultraserver_nodes: tuple[int, ...]
    efa: EfaLayout


@dataclass(frozen=True)
class AwsFacts:
    ami_types: dict[str, str]
    instance_types: dict[str, InstanceFacts]
    fsx_size_step_gib: int


@lru_cache(maxsize=None)
def load_aws_facts() -> AwsFacts:
    raw = recipe_file("facts/aws.yaml")
    types = {
        name: InstanceFacts(
            name=name,
            platform=t["platform"],
            arch=t["arch"],
            capacity_block_only=t["capacity_block_only"],
            ultraserver_nodes=tuple(t["ultraserver_nodes"]),
            efa=EfaLayout(t["efa"]["primary_card"], tuple(t["efa"]["efa_only_cards"])),
        )
        for name, t in raw["instance_types"].items()
    }
    fsx = raw["fsx_persistent_2"]
    return AwsFacts(ami_types=dict(raw["ami_types"]), instance_types=types, fsx_size_step_gib=fsx["size_step_gib"])


def default_instance_type(platform: str) -> str:
    return f"p6e-{platform}.36xlarge"
