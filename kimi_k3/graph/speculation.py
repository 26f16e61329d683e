"""kimi-k3:serving.speculation -> the workers' --speculative-config and the drafter the weights path stages.

The drafter is a second checkpoint: pinned to a commit, downloaded and hashed by the model-download Job beside the
weights (kimi_k3/k8s/model_cache.py), and read by the workers from the cache as a local path, never from the Hub
(upstream's DSpark pods snapshot_download it into an emptyDir at every start). Where a weights path does not stage it
yet, the option is refused, naming the path and what to set instead: a worker never starts pointing at nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from kimi_k3.config.base import ConfigError, FlagValue
from kimi_k3.config.stack import StackConfig
from kimi_k3.data import recipe_file

WHERE = "kimi-k3:serving.speculation"


@dataclass(frozen=True)
class Drafter:
    method: str
    repo: str
    revision: str
    path: str  # where the download Job stages it and the workers read it: <cache mount>/<repo>@<revision>
    bytes: int  # its weights, all ranks together (the planner shards them by TP)


def drafter_bytes(method: str) -> int:
    d = recipe_file("facts/speculation.yaml")["drafters"][method]
    return int(float(d["params"]) * int(d["bytes_per_param"]))


def _refuse_unstaged(cfg: StackConfig, node_local: bool, prestaged: bool) -> None:
    kind = cfg.storage.resolved_kind
    why = None
    if kind == "s3":
        why = "storage kind s3: the EC2 fetchers fetch only the main checkpoint into the bucket"
    elif prestaged:
        why = "an FSx import (kimi-k3:storage.fsx.s3ImportPath) carries only what its bucket holds"
    elif node_local:
        why = "the node-local copy (kimi-k3:storage.nodeLocalWeights) copies only the main checkpoint's manifest"
    if why:
        raise ConfigError(
            f"{WHERE}: the drafter must be staged with the weights (pinned, hashed, no Hub access at pod start), "
            f"and this stack's weights path does not stage it yet ({why}); allowed: storage kind efs, fsx-lustre "
            "(no s3ImportPath) or existing with kimi-k3:storage.nodeLocalWeights: false, or remove "
            f"{WHERE}"
        )


def resolve(
    cfg: StackConfig, image: str, *, node_local: bool, prestaged: bool
) -> tuple[dict[str, FlagValue], Optional[Drafter]]:
    """The worker flags and the drafter to stage, or ({}, None) without speculation; refused where it cannot run."""
    spec = cfg.serving.speculation
    if spec is None:
        return {}, None
    facts = recipe_file("facts/speculation.yaml")
    d = facts["drafters"][spec.method]
    runs = facts["runs_on_image"]
    if not runs.get(image, False):
        ok = ", ".join(sorted(k for k, v in runs.items() if v)) or "none"
        raise ConfigError(
            f"{WHERE}.method = {spec.method}: the vLLM in {image} cannot run Kimi K3 {spec.method} "
            f"(recipes/facts/speculation.yaml; ai-dynamo/dynamo#12843 for the 1.4.0 build); allowed images: {ok}"
        )
    if spec.num_speculative_tokens > d["max_speculative_tokens"]:
        raise ConfigError(
            f"{WHERE}.numSpeculativeTokens = {spec.num_speculative_tokens}: {d['repo']} drafts blocks of "
            f"{d['max_speculative_tokens']} (recipes/facts/speculation.yaml); allowed: 1..{d['max_speculative_tokens']}"
        )
    _refuse_unstaged(cfg, node_local, prestaged)
    path = f"{cfg.model.cache_mount_path.rstrip('/')}/{d['repo']}@{spec.drafter_revision}"
    config = {"method": spec.method, "model": path, "num_speculative_tokens": spec.num_speculative_tokens}
    config.update({k: v for k, v in d["speculative_config"].items() if k != "method"})
    flags: dict[str, FlagValue] = {"--speculative-config": json.dumps(config, separators=(",", ":"))}
    return flags, Drafter(spec.method, d["repo"], spec.drafter_revision, path, drafter_bytes(spec.method))
