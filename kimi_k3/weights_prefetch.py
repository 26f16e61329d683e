"""Copy the verified checkpoint onto this GPU node's instance-store NVMe, each byte crossing the Local Zone link once.

Runs in the weights-prefetch DaemonSet (one pod per GPU node, stdlib only, mounted from a ConfigMap) once the
download Job has verified the checkpoint in the stack's bucket. The N pods of a stack split the files: file i is
read from the bucket (Mountpoint, across the Local Zone link) by peer i mod N only, and every other peer copies it
from that peer over the zone's own network (HTTP on the pod network). So the link carries the checkpoint once, not
once per node or per replica, and every node ends with the whole checkpoint: whichever node a worker pod lands on,
and whichever rank it holds (vLLM's fastsafetensors loader gives rank r file r of every group of WORLD-size files,
and Grove, not the node, decides a pod's node rank), its share is local. A re-deploy on the same nodes reads it
again without touching the link.

Layout: LOCAL_ROOT/<revision>/<repo>/... mirrors SOURCE (= <remote mount>/<repo>). Before anything is copied every
file is a symlink to its SOURCE path, so the tree is complete at once (workers mount the bucket at the same remote
path and can read through it); each copy is written beside it, checked against the bucket's size and renamed over
the link. Other revisions' directories under LOCAL_ROOT are removed (they are copies). The pod turns Ready
(READY_MARKER) when every file is local, or when the disk cannot hold them (then workers read through the links, and
the log says so). A peer that cannot be reached for PEER_WAIT_SECONDS is replaced by reading the bucket directly.

Environment: SOURCE, LOCAL_ROOT, MODEL_REPO, MODEL_REVISION, POD_IP, PEERS_DNS (headless Service), EXPECTED_PEERS,
PORT, THREADS, PEER_WAIT_SECONDS.
"""
from __future__ import annotations

import http.client
import http.server
import os
import shutil
import socket
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

READY_MARKER = ".kimi-k3-node-local-complete"   # in LOCAL_ROOT/<revision>, beside (not inside) the repo directory
CHUNK = 16 << 20
SPACE_MARGIN = 1.02                             # keep 2% of the filesystem's free space beyond the checkpoint


def source_files(source: Path) -> dict[str, int]:
    """Relative path -> size of every file of the checkpoint (hf download's `.cache` metadata excluded)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d != ".cache")
        for name in filenames:
            p = Path(dirpath, name)
            out[p.relative_to(source).as_posix()] = p.stat().st_size
    return dict(sorted(out.items()))


def owner(index: int, peers: list[str]) -> str:
    """The peer that reads file number `index` (in sorted order) from the bucket."""
    return peers[index % len(peers)]


def is_local(path: Path, size: int) -> bool:
    return path.is_file() and not path.is_symlink() and path.stat().st_size == size


def prepare_tree(source: Path, dest: Path, files: dict[str, int]) -> int:
    """Every file present: a verified local copy, else a symlink to its source. Returns bytes still to copy."""
    missing = 0
    for rel, size in files.items():
        path = dest / rel
        if is_local(path, size):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        target = source / rel
        if not (path.is_symlink() and os.readlink(path) == str(target)):
            tmp = path.with_name(path.name + ".link")
            tmp.unlink(missing_ok=True)
            os.symlink(target, tmp)
            os.replace(tmp, path)                # replaces a stale copy or link atomically
        missing += size
    return missing


def remove_other_revisions(root: Path, revision: str) -> list[str]:
    removed = []
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        if child.name != revision and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
            removed.append(child.name)
    return removed


def _finish(part: Path, path: Path, size: int) -> None:
    got = part.stat().st_size
    if got != size:
        part.unlink(missing_ok=True)
        raise OSError(f"{path.name}: copied {got} bytes, the bucket holds {size}")
    os.replace(part, path)                       # over the symlink: readers that opened it keep the old file


def copy_from_source(source: Path, path: Path, rel: str, size: int) -> None:
    part = path.with_name(path.name + ".part")
    with open(source / rel, "rb") as src, open(part, "wb") as out:
        shutil.copyfileobj(src, out, CHUNK)
    _finish(part, path, size)


def copy_from_peer(peer: str, port: int, path: Path, rel: str, size: int, timeout: float = 60) -> bool:
    """True when the peer served the complete file; False while it does not have it yet (404)."""
    conn = http.client.HTTPConnection(peer, port, timeout=timeout)
    try:
        conn.request("GET", "/" + urllib.parse.quote(rel))
        resp = conn.getresponse()
        if resp.status == 404:
            resp.read()
            return False
        if resp.status != 200:
            raise OSError(f"{peer}: HTTP {resp.status} for {rel}")
        part = path.with_name(path.name + ".part")
        with open(part, "wb") as out:
            shutil.copyfileobj(resp, out, CHUNK)
        _finish(part, path, size)
        return True
    finally:
        conn.close()


def serve(dest: Path, files: dict[str, int], host: str, port: int) -> http.server.ThreadingHTTPServer:
    """Serve this node's complete local copies (never links, partial files or anything outside the checkpoint)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            rel = urllib.parse.unquote(self.path.lstrip("/"))
            size = files.get(rel)
            path = dest / rel
            if size is None or not is_local(path, size):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(path, "rb") as f:
                shutil.copyfileobj(f, self.wfile, CHUNK)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@dataclass
class Result:
    from_source: int = 0
    from_peers: int = 0
    fallbacks: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, n: int, rel: str = "") -> None:
        with self.lock:
            if what == "peer":
                self.from_peers += n
            else:
                self.from_source += n
                if what == "fallback":
                    self.fallbacks.append(rel)


def fetch_all(source: Path, dest: Path, files: dict[str, int], me: str, peers: list[str], port: int,
              threads: int = 8, peer_wait_seconds: float = 600, poll_seconds: float = 2,
              clock: Callable[[], float] = time.monotonic) -> Result:
    """Make every file local: this peer's own files from the source, the others from their owners. An owner that
    answers "not yet" (404) is waited for: it is copying; one that cannot be reached for peer_wait_seconds is
    replaced by the source (reading its files here too would multiply the link's load, so only then). Own files go
    first, so peers get them early."""
    result = Result()
    names = list(files)
    todo = [(i, rel) for i, rel in enumerate(names) if not is_local(dest / rel, files[rel])]
    mine = [(i, rel) for i, rel in todo if owner(i, peers) == me]
    theirs = [(i, rel) for i, rel in todo if owner(i, peers) != me]
    started = clock()

    def one(item: tuple[int, str]) -> None:
        i, rel = item
        path, size = dest / rel, files[rel]
        src = owner(i, peers)
        answered = started
        while src != me:
            try:
                if copy_from_peer(src, port, path, rel, size):
                    result.add("peer", size)
                    return
                answered = clock()                 # alive, still copying its own files
            except OSError as err:
                if clock() - answered >= peer_wait_seconds:
                    print(f"peer {src} unreachable for {peer_wait_seconds:g} s ({err}): {rel} from the bucket",
                          flush=True)
                    break
            time.sleep(poll_seconds)
        copy_from_source(source, path, rel, size)
        result.add("source" if src == me else "fallback", size, rel)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, mine + theirs))
    return result


def resolve_peers(dns_name: str, me: str, expected: int, wait_seconds: float) -> list[str]:
    """The pod IPs behind the headless Service (published before they are Ready), once `expected` are listed."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            ips = {a[4][0] for a in socket.getaddrinfo(dns_name, None, socket.AF_INET, socket.SOCK_STREAM)}
        except socket.gaierror:
            ips = set()
        ips.add(me)
        if len(ips) >= expected or time.monotonic() > deadline:
            return sorted(ips, key=lambda ip: tuple(int(p) for p in ip.split(".")))
        time.sleep(5)


def main() -> int:
    env = os.environ
    source = Path(env["SOURCE"])
    root = Path(env["LOCAL_ROOT"])
    revision, repo = env["MODEL_REVISION"], env["MODEL_REPO"]
    dest = root / revision / repo
    port = int(env.get("PORT", "8080"))
    me = env["POD_IP"]
    t0 = time.monotonic()
    files = source_files(source)
    if not files:
        print(f"no checkpoint under {source}", file=sys.stderr)
        return 1
    for old in remove_other_revisions(root, revision):
        print(f"removed the node-local copy of revision {old}", flush=True)
    marker = root / revision / READY_MARKER
    marker.unlink(missing_ok=True)
    missing = prepare_tree(source, dest, files)
    total = sum(files.values())
    free = shutil.disk_usage(dest).free
    if missing * SPACE_MARGIN > free:
        print(f"NOT COPYING: {missing / 1e9:.0f} GB to copy, {free / 1e9:.0f} GB free under {root}; workers read "
              f"the bucket through the links (no instance-store RAID0 at the host path?)", flush=True)
        marker.write_text("links\n")
        while True:
            time.sleep(3600)
    serve(dest, files, "0.0.0.0", port)
    peers = resolve_peers(env["PEERS_DNS"], me, int(env.get("EXPECTED_PEERS", "1")),
                          float(env.get("PEER_WAIT_SECONDS", "600")))
    print(f"{len(files)} files, {total / 1e9:.0f} GB ({missing / 1e9:.0f} GB to copy); peers {peers}", flush=True)
    res = fetch_all(source, dest, files, me, peers, port, int(env.get("THREADS", "8")),
                    float(env.get("PEER_WAIT_SECONDS", "600")))
    left = [rel for rel, size in files.items() if not is_local(dest / rel, size)]
    if left:
        print(f"not local after the copy: {left[:5]}", file=sys.stderr)
        return 1
    marker.write_text("local\n")
    print(f"node-local copy complete in {time.monotonic() - t0:.0f} s: {res.from_source / 1e9:.0f} GB from the "
          f"bucket, {res.from_peers / 1e9:.0f} GB from peers"
          + (f"; read from the bucket because a peer did not serve them: {res.fallbacks}" if res.fallbacks else ""),
          flush=True)
    while True:                                   # keep serving peers that are still copying
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
