"""kimi-k3:serving.speculation -> the workers' --speculative-config and the drafter the weights path stages.

The drafter is a second checkpoint: pinned to a commit, staged beside the weights and verified like them before any
worker starts, and read by the workers from the cache as a local path, never from the Hub (upstream's DSpark pods
snapshot_download it into an emptyDir at every start). It travels every path the weights do: the EC2 fetchers fetch
and hash it into the bucket (kimi_k3/aws/storage.py) or the download Job downloads and hashes it into a writable
cache, the download Job verifies it (kimi_k3/k8s/model_cache.py), the node-local copy copies it beside them
(kimi_k3/k8s/node_local.py); always under a directory keyed by its own revision, so revisions never mix."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from kimi_k3.config.base import ConfigError, FlagValue
from kimi_k3.config.stack import StackConfig
from kimi_k3.data import recipe_file

WHERE = "kimi-k3:serving.speculation"
NODE_LOCAL_DIR = "drafter"  # in a node-local revision's directory: <revision>/drafter/<drafter revision>/<repo>@...


@dataclass(frozen=True)
class Drafter:
    method: str
    repo: str
    revision: str
    path: str  # where the workers read it: the staged copy, or (node-local weights) this node's copy of it
    bytes: int  # its weights, all ranks together (the planner shards them by TP)
    staged_path: str = ""  # where the download Job stages it in the shared cache: <cache mount>/<repo>@<revision>

    @property
    def cache_dir(self) -> str:
        """Its directory in the shared cache (the bucket's key prefix with kind s3): <repo>@<revision>."""
        return f"{self.repo}@{self.revision}"


def drafter_bytes(method: str) -> int:
    d = recipe_file("facts/speculation.yaml")["drafters"][method]
    return int(float(d["params"]) * int(d["bytes_per_param"]))


def resolve(cfg: StackConfig, image: str, *, node_local: bool) -> tuple[dict[str, FlagValue], Optional[Drafter]]:
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
    cache = cfg.model.cache_mount_path.rstrip("/")
    staged = f"{cache}/{d['repo']}@{spec.drafter_revision}"
    # Node-local weights: the prefetch DaemonSet copies it into <its node-local root>/<drafter dir>/<revision>/
    # (kimi_k3/k8s/node_local.py), which the workers see under the model-cache mount.
    path = (
        f"{cache}/{NODE_LOCAL_DIR}/{spec.drafter_revision}/{d['repo']}@{spec.drafter_revision}"
        if node_local
        else staged
    )
    config = {"method": spec.method, "model": path, "num_speculative_tokens": spec.num_speculative_tokens}
    config.update({k: v for k, v in d["speculative_config"].items() if k != "method"})
    flags: dict[str, FlagValue] = {"--speculative-config": json.dumps(config, separators=(",", ":"))}
    return flags, Drafter(spec.method, d["repo"], spec.drafter_revision, path, drafter_bytes(spec.method), staged)
