"""Fail unless every shard the checkpoint's index lists is in the cache at the size the Hub reports.

Runs inside the model-download Job (mounted from a ConfigMap, stdlib + huggingface_hub only) after
`hf download`, or, when the weights arrive from outside the cluster (the S3 fetchers of storage kind s3), polling
until they are complete; the pure functions are also what the tests exercise.
Environment: MODEL_PATH, MODEL_REPO, MODEL_REVISION, HF_TOKEN; VERIFY_WAIT_SECONDS (poll that long, default 0 =
check once), VERIFY_WRITE_MARKER (default 1; 0 on a read-only volume).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

INDEX = "model.safetensors.index.json"
MARKER = ".kimi-k3-verified"


def shards_from_index(index: dict) -> list[str]:
    return sorted(set(index.get("weight_map", {}).values()))


def size_problems(model_dir: Path, expected: dict[str, int]) -> list[str]:
    """Missing or wrong-size files, one line each; empty when the checkpoint is complete."""
    problems = []
    for name, size in sorted(expected.items()):
        path = model_dir / name
        if not path.is_file():
            problems.append(f"missing: {name}")
        elif path.stat().st_size != size:
            problems.append(f"wrong size: {name} is {path.stat().st_size} bytes, expected {size}")
    return problems


def verify(model_dir: Path, hub_sizes) -> list[str]:
    """hub_sizes(paths) -> {path: size in bytes} for the pinned revision."""
    index_path = model_dir / INDEX
    if not index_path.is_file():
        return [f"missing: {INDEX}"]
    shards = shards_from_index(json.loads(index_path.read_text()))
    if not shards:
        return [f"{INDEX} lists no shards"]
    expected = hub_sizes(shards)
    unknown = [s for s in shards if s not in expected]
    return [f"not on the Hub at this revision: {s}" for s in unknown] + size_problems(model_dir, expected)


def _hub_sizes(repo: str, revision: str, token: str | None):
    from huggingface_hub import HfApi

    def sizes(paths: list[str]) -> dict[str, int]:
        infos = HfApi(token=token).get_paths_info(repo, paths, revision=revision)
        return {info.path: info.size for info in infos}

    return sizes


POLL_SECONDS = 30


def verify_until(model_dir: Path, hub_sizes, wait_seconds: float, sleep=time.sleep, clock=time.monotonic) -> list[str]:
    """verify() until it finds no problem or `wait_seconds` have passed; the last problems (empty: complete)."""
    deadline = clock() + wait_seconds
    cached: dict[str, int] = {}

    def sizes(paths: list[str]) -> dict[str, int]:  # the Hub is asked once; only the cache is polled
        missing = [p for p in paths if p not in cached]
        if missing:
            cached.update(hub_sizes(missing))
        return {p: cached[p] for p in paths if p in cached}

    while True:
        problems = verify(model_dir, sizes)
        if not problems or clock() >= deadline:
            return problems
        print(f"waiting for the checkpoint in {model_dir}: {len(problems)} files missing or incomplete "
              f"(first: {problems[0]})", flush=True)
        sleep(POLL_SECONDS)


def main() -> int:
    model_dir = Path(os.environ["MODEL_PATH"])
    problems = verify_until(model_dir, _hub_sizes(os.environ["MODEL_REPO"], os.environ["MODEL_REVISION"],
                                                  os.environ.get("HF_TOKEN")),
                            float(os.environ.get("VERIFY_WAIT_SECONDS", "0")))
    if problems:
        print(f"checkpoint in {model_dir} is incomplete ({len(problems)} problems):", *problems, sep="\n  ")
        return 1
    if os.environ.get("VERIFY_WRITE_MARKER", "1") == "1":
        (model_dir / MARKER).write_text(os.environ["MODEL_REVISION"] + "\n")
    print(f"checkpoint in {model_dir} verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
