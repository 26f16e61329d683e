"""Fetch one share of the checkpoint from the Hugging Face Hub into the stack's S3 bucket, checked by content.

Runs on each EC2 fetcher of `kimi-k3:storage.kind: s3` at t=0, before and independently of the cluster
(components/aws/storage.py; user data from kimi_k3.aws.fetcher_user_data). MODEL_REVISION is a commit sha (the
config refuses anything else), so every fetcher lists the same files with the Hub's content ids: sha256 for each LFS
file, the git blob sha1 for the others (huggingface_hub hf_api.py: RepoSibling.lfs.sha256, RepoSibling.blob_id).
Each computes the same partition and transfers only its own share, file by file: download into memory-backed staging
(hf_xet high-performance mode), hash it and compare with the Hub's id, upload with its sha256 as object metadata,
delete. A file already in the bucket with the Hub's sha256 in its metadata is skipped (a re-run resumes; size alone
never counts). When the share is done it writes PREFIX/.kimi-k3/manifest-<i>-of-<n>.json (size + sha256 of every file
of the share, of this revision): the manifest the verify Job and the node-local copy check against. The user data
writes .kimi-k3/failed-<i>-of-<n>.txt instead when anything fails, and powers off either way.
Stdlib + huggingface_hub + the AWS CLI v2 of Amazon Linux 2023.
Environment: MODEL_REPO, MODEL_REVISION, BUCKET, PREFIX, FETCHER_INDEX, FETCHERS, STAGING, HF_TOKEN.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

PARALLEL_FILES = 8   # files in flight per fetcher: enough to keep hf_xet and the S3 upload at line rate
MANIFEST_DIR = ".kimi-k3"   # = weights_prefetch.MANIFEST_DIR (the pods read what this writes)
COMMIT = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 16 << 20


def manifest_key(prefix: str, index: int, count: int) -> str:
    return f"{prefix}/{MANIFEST_DIR}/manifest-{index}-of-{count}.json"


def failure_key(prefix: str, index: int, count: int) -> str:
    return f"{prefix}/{MANIFEST_DIR}/failed-{index}-of-{count}.txt"


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


def hub_files(siblings) -> dict[str, dict]:
    """rel -> {size, sha256 (LFS files; None otherwise), blob_id} from model_info(files_metadata=True).siblings."""
    return {s.rfilename: {"size": s.size, "sha256": s.lfs.sha256 if s.lfs else None, "blob_id": s.blob_id}
            for s in siblings}


def todo(share: list[str], expected: dict[str, dict], in_bucket: dict[str, tuple[int, str]]) -> list[str]:
    """The files of a share not yet in the bucket with the Hub's content: an LFS file is skipped only when the
    object's recorded sha256 and size are the Hub's; small non-LFS files are always fetched again (the Hub gives
    no sha256 for them)."""
    def done(f: str) -> bool:
        e = expected[f]
        return e["sha256"] is not None and in_bucket.get(f) == (e["size"], e["sha256"])
    return [f for f in share if not done(f)]


def content_ids(path: Path) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file: the Hub's LFS id and its git id."""
    size = path.stat().st_size
    sha256, blob = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha256.update(chunk)
            blob.update(chunk)
    return sha256.hexdigest(), blob.hexdigest()


def check_download(name: str, path: Path, expected: dict) -> str:
    """The file's sha256 if its bytes are what the Hub lists for this revision; ValueError naming the file if not."""
    size = path.stat().st_size
    sha256, blob = content_ids(path)
    if size != expected["size"]:
        raise ValueError(f"{name}: downloaded {size} bytes, the Hub lists {expected['size']}")
    if expected["sha256"] is not None and sha256 != expected["sha256"]:
        raise ValueError(f"{name}: sha256 {sha256} is not the Hub's {expected['sha256']}")
    if expected["sha256"] is None and expected["blob_id"] and blob != expected["blob_id"]:
        raise ValueError(f"{name}: git blob id {blob} is not the Hub's {expected['blob_id']}")
    return sha256


def share_manifest(repo: str, revision: str, index: int, count: int, files: dict[str, tuple[int, str]]) -> str:
    return json.dumps({"repo": repo, "revision": revision, "share": index, "shares": count,
                       "files": {f: {"size": s, "sha256": h} for f, (s, h) in sorted(files.items())}},
                      indent=1, sort_keys=True) + "\n"


def _in_bucket(bucket: str, prefix: str, names: list[str]) -> dict[str, tuple[int, str]]:
    """(size, recorded sha256) of each object of the share that exists (head-object: user metadata is not listed)."""
    out = {}
    for name in names:
        r = subprocess.run(["aws", "s3api", "head-object", "--bucket", bucket, "--key", f"{prefix}/{name}",
                            "--output", "json"], capture_output=True, text=True)
        if r.returncode == 0:
            head = json.loads(r.stdout)
            out[name] = (head.get("ContentLength"), head.get("Metadata", {}).get("sha256", ""))
        elif "Not Found" not in r.stderr and "404" not in r.stderr:
            raise RuntimeError(f"head-object s3://{bucket}/{prefix}/{name}: {r.stderr.strip()}")
    return out


def main() -> int:
    repo, revision = os.environ["MODEL_REPO"], os.environ["MODEL_REVISION"]
    bucket, prefix = os.environ["BUCKET"], os.environ["PREFIX"].strip("/")
    index, count = int(os.environ["FETCHER_INDEX"]), int(os.environ["FETCHERS"])
    staging = Path(os.environ.get("STAGING", "/dev/shm/kimi-k3"))
    token = os.environ.get("HF_TOKEN")
    if not COMMIT.match(revision) or revision == "0" * 40:   # stacks.REVISION_PLACEHOLDER: no commit
        print(f"MODEL_REVISION={revision!r} is not a 40-hex commit sha: refusing to fetch a moving ref", flush=True)
        return 2
    from huggingface_hub import HfApi, hf_hub_download
    info = HfApi(token=token).model_info(repo, revision=revision, files_metadata=True)
    if info.sha != revision:
        print(f"{repo}@{revision} resolved to commit {info.sha}: refusing (pin the commit itself)", flush=True)
        return 2
    expected = hub_files(info.siblings)
    share = partition({f: e["size"] for f, e in expected.items()}, count)[index]
    present = _in_bucket(bucket, prefix, share)
    files = todo(share, expected, present)
    verified = {f: present[f] for f in share if f not in files}
    total = sum(expected[f]["size"] for f in files)
    print(f"fetcher {index + 1}/{count}: {len(files)} of {len(share)} files, {total / 1e9:.1f} GB to fetch "
          f"({repo}@{revision})", flush=True)
    done, started = 0, time.monotonic()

    def fetch(name: str) -> tuple[str, str]:
        local = Path(hf_hub_download(repo, name, revision=revision, token=token, local_dir=staging))
        sha256 = check_download(name, local, expected[name])
        subprocess.run(["aws", "s3", "cp", "--only-show-errors", "--metadata", f"sha256={sha256}", str(local),
                        f"s3://{bucket}/{prefix}/{name}"], check=True)
        local.unlink()
        return name, sha256

    with ThreadPoolExecutor(PARALLEL_FILES) as pool:
        for future in as_completed([pool.submit(fetch, f) for f in files]):
            name, sha256 = future.result()
            verified[name] = (expected[name]["size"], sha256)
            done += expected[name]["size"]
            elapsed = time.monotonic() - started
            print(f"  {done / 1e9:.1f} / {total / 1e9:.1f} GB, {done / 1e9 / max(elapsed, 1e-9):.2f} GB/s", flush=True)
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run(["aws", "s3", "cp", "--only-show-errors", "-", f"s3://{bucket}/{manifest_key(prefix, index, count)}"],
                   input=share_manifest(repo, revision, index, count, verified), text=True, check=True)
    print(f"fetcher {index + 1}/{count}: done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
