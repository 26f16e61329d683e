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
PORT, THREADS, PEER_WAIT_SECONDS, FS_PATH (where LOCAL_ROOT must sit within its filesystem: on the instance-store
array mounted at /mnt/k8s-disks/0 that is /kimi-k3-weights; anywhere else, e.g. on the root volume when nodeadm made
no array, nothing is copied).
"""
from __future__ import annotations

import http.client
import http.server
import os
import re
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
MAX_SERVING = 32                                # concurrent transfers a peer serves (32 x 16 MiB buffers)
SOCKET_TIMEOUT = 60                             # seconds a peer connection may stall, both sides


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


def copy_from_peer(peer: str, port: int, path: Path, rel: str, size: int, timeout: float | None = None) -> bool:
    """True when the peer served the complete file; False while it does not have it yet (404) or is busy (503)."""
    conn = http.client.HTTPConnection(peer, port, timeout=SOCKET_TIMEOUT if timeout is None else timeout)
    try:
        conn.request("GET", "/" + urllib.parse.quote(rel))
        resp = conn.getresponse()
        if resp.status in (404, 503):
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


def _unescape(field_: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)   # mountinfo escapes " " as \040


def filesystem_path(mountinfo: str, path: str) -> tuple[str, str]:
    """(path within its filesystem, mount source) of `path`, from /proc/self/mountinfo (proc(5): field 4 is the
    mount's root within the filesystem, field 5 its mount point; the source follows the " - " separator). Inside the
    pod, a hostPath mount's root is the host directory relative to the host filesystem that holds it."""
    best = ("", "/", "")
    for line in mountinfo.splitlines():
        pre, _, post = line.partition(" - ")
        f = pre.split()
        if len(f) < 5:
            continue
        root, point = _unescape(f[3]), _unescape(f[4])
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
            best = (point, root, (post.split() + ["", ""])[1])
    point, root, source = best
    rest = path[len(point.rstrip("/")):]
    return (root.rstrip("/") + rest) or "/", source


def serve(dest: Path, files: dict[str, int], host: str, port: int) -> http.server.ThreadingHTTPServer:
    """Serve this node's complete local copies (never links, partial files or anything outside the checkpoint).
    Bounded: at most MAX_SERVING transfers at once (each holds one CHUNK buffer; more get 503, which a peer treats
    like 404 and asks again), and a client that stalls for SOCKET_TIMEOUT seconds is dropped."""
    slots = threading.BoundedSemaphore(MAX_SERVING) if MAX_SERVING else None

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = SOCKET_TIMEOUT                 # StreamRequestHandler: applied to the connection's socket

        def do_GET(self):  # noqa: N802 - the http.server API
            rel = urllib.parse.unquote(self.path.lstrip("/"))
            size = files.get(rel)
            path = dest / rel
            if size is None or not is_local(path, size):
                self.send_error(404)
                return
            if slots is None or not slots.acquire(blocking=False):
                self.send_error(503)
                return
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                with open(path, "rb") as f:
                    shutil.copyfileobj(f, self.wfile, CHUNK)
            finally:
                slots.release()

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
    where, device = filesystem_path(Path("/proc/self/mountinfo").read_text(), str(root))
    wanted = env.get("FS_PATH")
    why = (f"{root} is {where} on {device}, not {wanted}: no instance-store array at the host path (nodeadm's "
           f"localStorage), and the root volume must not take the checkpoint" if wanted and where != wanted else
           f"{missing / 1e9:.0f} GB to copy, {free / 1e9:.0f} GB free under {root}" if missing * SPACE_MARGIN > free
           else "")
    if why:
        print(f"NOT COPYING: {why}; workers read the bucket through the links", flush=True)
        marker.write_text("links\n")
        while True:
            time.sleep(3600)
    serve(dest, files, me, port)                  # the pod IP only: peers reach it there, nothing else listens
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
