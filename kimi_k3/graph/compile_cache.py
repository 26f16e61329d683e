"""build.py -> compile_cache.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kimi_k3.data import recipe_file


def compile_cache_spec() -> dict[str, Any]:
    return recipe_file("facts/compile_cache.yaml")


def compile_cache_key(image: str, args: tuple[str, ...]) -> str:
    """One cache directory per image + worker flags (issue 15): artifacts built by another image or for other
    shapes and kernels are never picked up, and the pods of a role share theirs. Settings passed by environment are
    left to the caches' own keys (vLLM hashes its config and env into the torch.compile cache path; Triton,
    DeepGEMM and FlashInfer key each kernel by its source and parameters)."""
    payload = json.dumps({"image": image, "args": list(args)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def compile_cache_env() -> dict[str, str]:
    """Cache locations under the mount; the mount itself is the role's keyed subdirectory (subPath), so a changed
    flag changes one line of the pod, not every variable."""
    spec = compile_cache_spec()
    return {name: f"{spec['mount_path']}/{sub}" for name, sub in spec["env"].items()}
