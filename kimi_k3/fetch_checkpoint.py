"""Fetch one share of the checkpoint from the Hugging Face Hub into the stack's S3 bucket.

Runs on each EC2 fetcher of `kimi-k3:storage.kind: s3` at t=0, before and independently of the cluster
(components/aws/storage.py; user data from kimi_k3.aws.fetcher_user_data). Every fetcher lists the pinned revision,
computes the same partition of its files and transfers only its own share, file by file: download into memory-backed
staging (hf_xet high-performance mode), upload with the AWS CLI, delete. Files already in the bucket at the Hub's size
are skipped, so a re-run resumes. Stdlib + huggingface_hub + the AWS CLI v2 of Amazon Linux 2023.
Environment: MODEL_REPO, MODEL_REVISION, BUCKET, PREFIX, FETCHER_INDEX, FETCHERS, STAGING, HF_TOKEN.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

PARALLEL_FILES = 8   # files in flight per fetcher: enough to keep hf_xet and the S3 upload at line rate


def partition(files: dict[str, int], count: int) -> list[list[str]]:
    """Deterministic, size-balanced shares: largest file first onto the least-loaded share (ties: lowest index)."""
    if count < 1:
        raise ValueError("count must be >= 1")
    loads = [0] * count
    shares: list[list[str]] = [[] for _ in range(count)]
    for name, size in sorted(files.items(), key=lambda kv: (-kv[1], kv[0])):
        i = min(range(count), key=lambda k: (loads[k], k))
        shares[i].append(name)
        loads[i] += size
    return [sorted(s) for s in shares]


def todo(share: list[str], sizes: dict[str, int], in_bucket: dict[str, int]) -> list[str]:
    """The files of a share not yet in the bucket at their Hub size."""
    return [f for f in share if in_bucket.get(f) != sizes[f]]


def _bucket_sizes(bucket: str, prefix: str) -> dict[str, int]:
    out = subprocess.run(["aws", "s3api", "list-objects-v2", "--bucket", bucket, "--prefix", prefix + "/",
                          "--query", "Contents[].[Key,Size]", "--output", "json"],
                         check=True, capture_output=True, text=True).stdout
    return {key[len(prefix) + 1:]: size for key, size in (json.loads(out) or [])}


def main() -> int:
    from huggingface_hub import HfApi, hf_hub_download

    repo, revision = os.environ["MODEL_REPO"], os.environ["MODEL_REVISION"]
    bucket, prefix = os.environ["BUCKET"], os.environ["PREFIX"].strip("/")
    index, count = int(os.environ["FETCHER_INDEX"]), int(os.environ["FETCHERS"])
    staging = Path(os.environ.get("STAGING", "/dev/shm/kimi-k3"))
    token = os.environ.get("HF_TOKEN")
    info = HfApi(token=token).model_info(repo, revision=revision, files_metadata=True)
    sizes = {s.rfilename: s.size for s in info.siblings}
    share = partition(sizes, count)[index]
    files = todo(share, sizes, _bucket_sizes(bucket, prefix))
    total = sum(sizes[f] for f in files)
    print(f"fetcher {index + 1}/{count}: {len(files)} of {len(share)} files, {total / 1e9:.1f} GB to fetch "
          f"({repo}@{info.sha})", flush=True)
    done, started = 0, time.monotonic()

    def fetch(name: str) -> int:
        local = Path(hf_hub_download(repo, name, revision=info.sha, token=token, local_dir=staging))
        subprocess.run(["aws", "s3", "cp", "--only-show-errors", str(local), f"s3://{bucket}/{prefix}/{name}"],
                       check=True)
        local.unlink()
        return sizes[name]

    with ThreadPoolExecutor(PARALLEL_FILES) as pool:
        for future in as_completed([pool.submit(fetch, f) for f in files]):
            done += future.result()
            elapsed = time.monotonic() - started
            print(f"  {done / 1e9:.1f} / {total / 1e9:.1f} GB, {done / 1e9 / max(elapsed, 1e-9):.2f} GB/s", flush=True)
    shutil.rmtree(staging, ignore_errors=True)
    print(f"fetcher {index + 1}/{count}: done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
