"""Fail unless the cache holds exactly the pinned revision's checkpoint, by content (sha256), not by size.

Runs inside the model-download Job (mounted from a ConfigMap, stdlib + huggingface_hub only); the pure functions are
also what the tests exercise. Two modes:
- hash (after `hf download` into a writable cache): every file is hashed and compared with the Hub's id for the
  pinned commit (sha256 for LFS files, the git blob sha1 for the others: huggingface_hub hf_api.py RepoFile.lfs,
  RepoFile.blob_id); then the manifest (.kimi-k3/manifest-0-of-1.json: size + sha256 per file) and the marker are
  written, for the node-local copy to check against.
- manifest (storage kind s3: the weights arrive from the EC2 fetchers, the mount is read-only): poll until every
  fetcher has written its share's manifest, and fail at once, naming the reason, when one wrote a failure record
  (.kimi-k3/failed-<i>-of-<n>.txt, kimi_k3.aws.fetcher_user_data). The manifests' sha256 must be the Hub's for every
  LFS file (the fetchers hashed the bytes they uploaded), every indexed shard must be listed, and every object must be
  in the bucket at the manifest's size.
Environment: MODEL_PATH, MODEL_REPO, MODEL_REVISION, HF_TOKEN; VERIFY_MODE (hash | manifest); VERIFY_WAIT_SECONDS
(poll that long, default 0 = check once), VERIFY_WRITE_MARKER (default 1; 0 on a read-only volume).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

INDEX = "model.safetensors.index.json"
MARKER = ".kimi-k3-verified"
MANIFEST_DIR = ".kimi-k3"        # = weights_prefetch.MANIFEST_DIR = fetch_checkpoint.MANIFEST_DIR
SKIP_DIRS = {".cache", MANIFEST_DIR}   # hf download's metadata, our records: not part of the checkpoint
MANIFEST_NAME = re.compile(r"^manifest-(\d+)-of-(\d+)\.json$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 16 << 20
HASH_THREADS = 8                 # hashlib releases the GIL on large buffers: files hash in parallel


def shards_from_index(index: dict) -> list[str]:
    return sorted(set(index.get("weight_map", {}).values()))


def _indexed(model_dir: Path) -> tuple[list[str], list[str]]:
    index_path = model_dir / INDEX
    if not index_path.is_file():
        return [], [f"missing: {INDEX}"]
    shards = shards_from_index(json.loads(index_path.read_text()))
    return shards, [] if shards else [f"{INDEX} lists no shards"]


def local_files(model_dir: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(model_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        out += [Path(dirpath, n).relative_to(model_dir).as_posix() for n in filenames]
    return sorted(f for f in out if f != MARKER)


def content_ids(path: Path) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file."""
    size = path.stat().st_size
    sha256, blob = hashlib.sha256(), hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha256.update(chunk)
            blob.update(chunk)
    return sha256.hexdigest(), blob.hexdigest()


def verify_hashed(model_dir: Path, hub_files) -> tuple[list[str], dict[str, tuple[int, str]]]:
    """hub_files(paths) -> {path: {size, sha256 (LFS) or None, blob_id}} at the pinned commit. Returns the problems
    and, when there are none, rel -> (size, sha256) of every file (the manifest)."""
    shards, problems = _indexed(model_dir)
    if problems:
        return problems, {}
    names = local_files(model_dir)
    problems = [f"missing: {s}" for s in shards if s not in names]
    hub = hub_files(names)
    problems += [f"not on the Hub at this revision: {n}" for n in names if n not in hub]
    known = [n for n in names if n in hub]
    with ThreadPoolExecutor(HASH_THREADS) as pool:
        ids = dict(zip(known, pool.map(lambda n: content_ids(model_dir / n), known)))
    out = {}
    for n in known:
        e, (sha256, blob) = hub[n], ids[n]
        size = (model_dir / n).stat().st_size
        if size != e["size"]:
            problems.append(f"wrong size: {n} is {size} bytes, expected {e['size']}")
        elif e.get("sha256") and sha256 != e["sha256"]:
            problems.append(f"wrong content: {n} has sha256 {sha256}, the Hub lists {e['sha256']}")
        elif not e.get("sha256") and e.get("blob_id") and blob != e["blob_id"]:
            problems.append(f"wrong content: {n} has git blob id {blob}, the Hub lists {e['blob_id']}")
        out[n] = (size, sha256)
    return problems, out if not problems else {}


def read_manifest(model_dir: Path, revision: str) -> tuple[list[str], dict[str, tuple[int, str]]]:
    """(problems, rel -> (size, sha256)) from the share manifests: a complete set of one share count, all of this
    revision (weights_prefetch.read_manifest applies the same rules in the pods)."""
    where = model_dir / MANIFEST_DIR
    groups: dict[int, dict[int, dict]] = {}
    for p in sorted(where.glob("manifest-*-of-*.json")) if where.is_dir() else []:
        m = MANIFEST_NAME.match(p.name)
        if m:
            try:
                doc = json.loads(p.read_text())
            except (OSError, ValueError) as err:
                return [f"{p.name}: not readable JSON ({err})"], {}
            if doc.get("revision") != revision:
                return [f"{p.name}: of revision {doc.get('revision')!r}, not {revision}"], {}
            groups.setdefault(int(m.group(2)), {})[int(m.group(1))] = doc
    complete = sorted(n for n, shares in groups.items() if set(shares) == set(range(n)))
    if not complete:
        have = {n: sorted(s) for n, s in groups.items()}
        return [f"waiting for the fetchers' manifests in {where} (have shares {have or 'none'})"], {}
    out: dict[str, tuple[int, str]] = {}
    for i, doc in sorted(groups[complete[0]].items()):
        for rel, f in sorted(doc.get("files", {}).items()):
            entry = (f.get("size"), f.get("sha256"))
            if not isinstance(entry[0], int) or not isinstance(entry[1], str) or not SHA256.match(entry[1]):
                return [f"manifest-{i}-of-{complete[0]}.json: {rel}: needs a size and a sha256"], {}
            if out.setdefault(rel, entry) != entry:
                return [f"manifests list {rel} twice with different content"], {}
    return [], out


def failures(model_dir: Path) -> list[str]:
    """What the fetchers reported failing (their share's manifest missing: a later success supersedes it)."""
    where = model_dir / MANIFEST_DIR
    out = []
    for p in sorted(where.glob("failed-*-of-*.txt")) if where.is_dir() else []:
        if not (where / p.name.replace("failed-", "manifest-").replace(".txt", ".json")).exists():
            out.append(f"{p.name}: " + p.read_text(errors="replace").strip().replace("\n", "\n    "))
    return out


def verify_manifest(model_dir: Path, hub_files, revision: str) -> tuple[list[str], bool]:
    """(problems, final): final problems are not cured by waiting (a fetcher failed, bytes not the Hub's)."""
    if failed := failures(model_dir):
        return [f"a fetcher failed: {f}" for f in failed], True
    problems, files = read_manifest(model_dir, revision)
    if problems:
        return problems, False
    shards, problems = _indexed(model_dir)
    if problems:
        return problems, False
    problems = [f"not in the fetchers' manifests: {s}" for s in shards if s not in files]
    hub = hub_files(sorted(files))
    wrong = [f"not on the Hub at this revision: {n}" for n in files if n not in hub]
    for n, (size, sha256) in files.items():
        e = hub.get(n)
        if e and (size != e["size"] or (e.get("sha256") and sha256 != e["sha256"])):
            wrong.append(f"wrong content: the manifest lists {n} as {size} bytes, sha256 {sha256}; the Hub: "
                         f"{e['size']} bytes, sha256 {e.get('sha256')}")
    if wrong:
        return wrong, True
    for n, (size, _) in files.items():
        path = model_dir / n
        if not path.is_file():
            problems.append(f"missing: {n}")
        elif path.stat().st_size != size:
            problems.append(f"wrong size: {n} is {path.stat().st_size} bytes, the manifest says {size}")
    return problems, False


def write_manifest(model_dir: Path, repo: str, revision: str, files: dict[str, tuple[int, str]]) -> Path:
    where = model_dir / MANIFEST_DIR
    where.mkdir(exist_ok=True)
    path = where / "manifest-0-of-1.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"repo": repo, "revision": revision, "share": 0, "shares": 1,
                               "files": {f: {"size": s, "sha256": h} for f, (s, h) in sorted(files.items())}},
                              indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def _hub_files(repo: str, revision: str, token: str | None):
    from huggingface_hub import HfApi

    def files(paths: list[str]) -> dict[str, dict]:
        infos = HfApi(token=token).get_paths_info(repo, paths, revision=revision)
        return {i.path: {"size": i.size, "sha256": i.lfs.sha256 if i.lfs else None, "blob_id": i.blob_id}
                for i in infos}

    return files


POLL_SECONDS = 30


def cached(hub_files):
    """The Hub is asked once per path; only the mount is polled."""
    memo: dict[str, dict] = {}

    def files(paths: list[str]) -> dict[str, dict]:
        if missing := [p for p in paths if p not in memo]:
            memo.update(hub_files(missing))
        return {p: memo[p] for p in paths if p in memo}

    return files


def verify_until(model_dir: Path, hub_files, revision: str, wait_seconds: float, sleep=time.sleep,
                 clock=time.monotonic) -> list[str]:
    """verify_manifest() until it finds no problem, a final one, or `wait_seconds` have passed."""
    deadline = clock() + wait_seconds
    hub = cached(hub_files)
    while True:
        problems, final = verify_manifest(model_dir, hub, revision)
        if not problems or final or clock() >= deadline:
            return problems
        print(f"waiting for the checkpoint in {model_dir}: {len(problems)} problems (first: {problems[0]})",
              flush=True)
        sleep(POLL_SECONDS)


def main() -> int:
    model_dir = Path(os.environ["MODEL_PATH"])
    repo, revision = os.environ["MODEL_REPO"], os.environ["MODEL_REVISION"]
    hub = _hub_files(repo, revision, os.environ.get("HF_TOKEN"))
    if os.environ.get("VERIFY_MODE", "hash") == "manifest":
        problems = verify_until(model_dir, hub, revision, float(os.environ.get("VERIFY_WAIT_SECONDS", "0")))
        files = {}
    else:
        problems, files = verify_hashed(model_dir, hub)
    if problems:
        print(f"checkpoint in {model_dir} is not {repo}@{revision} ({len(problems)} problems):", *problems,
              sep="\n  ")
        return 1
    if os.environ.get("VERIFY_WRITE_MARKER", "1") == "1":
        if files:
            write_manifest(model_dir, repo, revision, files)
        (model_dir / MARKER).write_text(revision + "\n")
    print(f"checkpoint in {model_dir} verified: {repo}@{revision}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
