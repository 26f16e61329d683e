"""Copy the verified checkpoint onto this GPU node's instance-store NVMe, each byte crossing the Local Zone link about
once, and never waiting on another node for longer than a bound.

Runs in the weights-prefetch DaemonSet (one pod per GPU node, stdlib only, mounted from a ConfigMap) once the
download Job has verified the checkpoint in the stack's bucket. What a file *is* comes from the checkpoint's
manifest (CHECKPOINT/.kimi-k3/manifest-<i>-of-<n>.json: size and sha256 per file, written by whoever verified the
bytes against the Hub: the S3 fetchers, or the download Job's verify step), never from a size alone.

Correct by construction (docs/aws.md "Node-local weights: the peer copy"):
- Every node may always read any file from the bucket (SOURCE, the Mountpoint mount). Peers only save link traffic.
- A peer serves a file only by its content hash (GET /sha256/<hex>) and only once it has hashed its own copy and
  found the manifest's sha256; the receiver hashes again. So no revision, name or size can be confused: an
  old-revision peer serves a shard only if it is byte-identical, a renamed shard is found by its content.
- A pod still listing its peers (at most PEER_JOIN_SECONDS) answers 202 for every file of the manifest, so
  peers that started a little earlier wait for it (within STALL_SECONDS) instead of reading its files too.
- Each file has a preferred reader (rendezvous hash of its name over the peers this pod listed): it reads the file
  from the bucket, own files first, and the others ask it. An asked peer answers 200 (verified copy), 202 (it is
  reading that file from the bucket itself: it waits on no one for it) or 404 (anything else). A pod waits only on
  a 202, and only while that peer's bucket reads progress (STALL_SECONDS) and for at most PEER_WAIT_SECONDS per file;
  every other answer, a refused or dropped connection, a timeout or a wrong hash sends it to the bucket at once.
  Waits therefore form no cycle (a 202 never depends on another peer), and pods that listed different peers (late
  joins, autoscaling, a rolling update) only read some files from the bucket twice: nothing hangs, nothing mixes.

Layout: LOCAL_ROOT/<revision>/<repo>/... mirrors SOURCE (= <remote mount>/<repo>). Before anything is copied every
file is a symlink to its SOURCE path, so the tree is complete at once (workers mount the bucket at the same remote
path and can read through it); each copy is written beside it, hashed, checked against the manifest and renamed over
the link, and recorded in LOCAL_ROOT/<revision>/VERIFIED (a restarted pod keeps what it verified). Other revisions'
directories under LOCAL_ROOT are removed, oldest first, only as far as this revision's copy needs the room (the old
graph's workers on the node mount theirs until the new graph replaces them). The pod turns Ready (READY_MARKER) when every file is a
verified local copy, or when the disk cannot hold them (then workers read through the links, and the log says so).

Environment: SOURCE, LOCAL_ROOT, MODEL_REPO, MODEL_REVISION, POD_IP, PEERS_DNS (headless Service; names separated by
commas are all resolved), EXPECTED_PEERS (how many to wait for, at most PEER_JOIN_SECONDS), PORT, THREADS,
PEER_WAIT_SECONDS, STALL_SECONDS, PEER_TIMEOUT_SECONDS, FS_PATH (where LOCAL_ROOT must sit within its filesystem: on
the instance-store array mounted at /mnt/k8s-disks/0 that is /kimi-k3-weights; anywhere else, e.g. on the root volume
when nodeadm made no array, nothing is copied).
"""
from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

READY_MARKER = ".kimi-k3-node-local-complete"   # in LOCAL_ROOT/<revision>, beside (not inside) the repo directory
VERIFIED = ".kimi-k3-verified.json"             # in LOCAL_ROOT/<revision>: rel -> sha256 of each verified local copy
MANIFEST_DIR = ".kimi-k3"                        # in the checkpoint directory: manifest-<i>-of-<n>.json, failed-*
CHUNK = 16 << 20
SPACE_MARGIN = 1.02                             # keep 2% of the filesystem's free space beyond the checkpoint
# ...and kubelet's hard-eviction reserve of the array, which also holds /var/lib/kubelet and /var/lib/containerd
# (amazon-eks-ami setup-local-disks); kubelet defaults imagefs.available<15%, nodefs.available<10%
# (kubernetes pkg/kubelet/eviction/defaults_linux.go): below it the node turns DiskPressure and evicts pods.
EVICTION_RESERVE = 0.15
MAX_SERVING = 32                                # concurrent transfers a peer serves (32 x 16 MiB buffers)
SOCKET_TIMEOUT = 60                             # seconds a peer connection may stall, both sides
SHA256 = re.compile(r"^[0-9a-f]{64}$")
MANIFEST_NAME = re.compile(r"^manifest-(\d+)-of-(\d+)\.json$")


class ManifestError(Exception):
    """The checkpoint's manifest is missing, incomplete or not of this revision."""


def read_manifest(checkpoint: Path, revision: str) -> dict[str, tuple[int, str]]:
    """rel -> (size, sha256) of every file of the checkpoint: the union of its share manifests, all of one revision,
    every share present, every hash a sha256. (verify_checkpoint.read_manifest reads the same files: same rules.)"""
    where = checkpoint / MANIFEST_DIR
    groups: dict[int, dict[int, dict]] = {}
    for p in sorted(where.glob("manifest-*-of-*.json")) if where.is_dir() else []:
        m = MANIFEST_NAME.match(p.name)
        if not m:
            continue
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as err:
            raise ManifestError(f"{p}: not readable JSON ({err})") from None
        if doc.get("revision") != revision:
            raise ManifestError(f"{p}: revision {doc.get('revision')!r}, expected {revision!r}")
        groups.setdefault(int(m.group(2)), {})[int(m.group(1))] = doc
    complete = sorted(n for n, shares in groups.items() if set(shares) == set(range(n)))
    if not complete:
        raise ManifestError(f"no complete set of manifest-<i>-of-<n>.json under {where} "
                            f"(have {({n: sorted(s) for n, s in groups.items()}) or 'none'})")
    n, shares = complete[0], groups[complete[0]]
    out: dict[str, tuple[int, str]] = {}
    for i, doc in sorted(shares.items()):
        for rel, f in sorted(doc.get("files", {}).items()):
            size, digest = f.get("size"), f.get("sha256")
            if not isinstance(size, int) or not isinstance(digest, str) or not SHA256.match(digest) \
                    or rel.startswith("/") or ".." in rel.split("/"):
                raise ManifestError(f"{where}/manifest-{i}-of-{n}.json: {rel!r}: needs a size and a sha256")
            if out.setdefault(rel, (size, digest)) != (size, digest):
                raise ManifestError(f"{where}: {rel} listed twice with different content")
    return dict(sorted(out.items()))


def owner(rel: str, peers: list[str]) -> str:
    """The peer that prefers to read `rel` from the bucket (rendezvous hashing: views that differ by one peer move
    only that peer's files)."""
    return max(peers, key=lambda p: hashlib.sha256(f"{p}\0{rel}".encode()).digest())


class Local:
    """This node's verified copies (rel -> sha256, persisted), and what it is reading from the bucket itself."""

    def __init__(self, state: Path, dest: Path, files: dict[str, tuple[int, str]]):
        self.state, self.dest, self.files = state, dest, files
        self.lock = threading.Lock()
        try:
            recorded = json.loads(state.read_text())
        except (OSError, ValueError):
            recorded = {}
        self.verified = {rel for rel, digest in recorded.items()
                         if rel in files and files[rel][1] == digest and self._intact(rel)}
        self.bucket_queue: set[str] = set()     # sha256 of files this node reads from the bucket itself
        self.joining = True                     # still listing its peers: it does not know its own files yet
        self.digests = {digest for _, digest in files.values()}
        self.bucket_bytes = 0                   # bytes read from the bucket so far (the progress peers watch)

    def _intact(self, rel: str) -> bool:
        path = self.dest / rel
        return path.is_file() and not path.is_symlink() and path.stat().st_size == self.files[rel][0]

    def is_verified(self, rel: str) -> bool:
        with self.lock:
            return rel in self.verified and self._intact(rel)

    def mark(self, rel: str) -> None:
        with self.lock:
            self.verified.add(rel)
            tmp = self.state.with_name(self.state.name + ".tmp")
            tmp.write_text(json.dumps({r: self.files[r][1] for r in sorted(self.verified)}))
            os.replace(tmp, self.state)

    def lookup(self, digest: str) -> tuple[str, Path | int | None]:
        """('have', path) | ('reading', bucket bytes so far) | ('absent', None) for a content hash."""
        with self.lock:
            for rel in self.verified:
                if self.files[rel][1] == digest and self._intact(rel):
                    return "have", self.dest / rel
            if digest in self.bucket_queue or (self.joining and digest in self.digests):
                return "reading", self.bucket_bytes  # joining: askers wait at most their stall bound for it
        return "absent", None

    def read_from_bucket(self, n: int) -> None:
        with self.lock:
            self.bucket_bytes += n


def prepare_tree(source: Path, dest: Path, files: dict[str, tuple[int, str]], local: Local) -> int:
    """Every file present: a verified local copy, else a symlink to its source. Returns bytes still to copy."""
    missing = 0
    for rel, (size, _) in files.items():
        path = dest / rel
        if local.is_verified(rel):
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


def too_full(missing: int, usage) -> bool:
    """Whether copying `missing` bytes would eat into the margin or kubelet's eviction reserve (usage: disk_usage)."""
    return missing * SPACE_MARGIN + usage.total * EVICTION_RESERVE > usage.free


def make_room(root: Path, revision: str, missing: int, disk_usage=shutil.disk_usage) -> list[str]:
    """Remove other revisions' copies, oldest first, only while this revision's copy would not fit: workers of the
    old graph still on this node mount theirs (hostPath) and reload from it when they restart."""
    removed = []
    others = sorted((c for c in root.iterdir() if c.name != revision and c.is_dir() and not c.is_symlink()),
                    key=lambda c: c.stat().st_mtime) if root.is_dir() else []
    for child in others:
        if not too_full(missing, disk_usage(root)):
            break
        shutil.rmtree(child)
        removed.append(child.name)
    return removed


def _write_verified(read: Callable[[int], bytes], path: Path, rel: str, size: int, digest: str,
                    progress: Callable[[int], None] | None = None) -> None:
    """Stream into <file>.part, hashing; rename over the link only if size and sha256 are the manifest's."""
    part = path.with_name(path.name + ".part")
    h, got = hashlib.sha256(), 0
    try:
        with open(part, "wb") as out:
            while chunk := read(CHUNK):
                h.update(chunk)
                out.write(chunk)
                got += len(chunk)
                if progress:
                    progress(len(chunk))
            out.flush()
            os.fsync(out.fileno())               # on disk before the rename: XFS does not flush on rename
        if got != size or h.hexdigest() != digest:
            raise OSError(f"{rel}: got {got} bytes with sha256 {h.hexdigest()[:12]}..., the manifest says {size} "
                          f"bytes, {digest[:12]}...")
        os.replace(part, path)                   # over the symlink: readers that opened it keep the old file
    finally:
        part.unlink(missing_ok=True)


def copy_from_source(source: Path, path: Path, rel: str, size: int, digest: str,
                     progress: Callable[[int], None] | None = None) -> None:
    with open(source / rel, "rb") as src:
        _write_verified(src.read, path, rel, size, digest, progress)


def ask_peer(peer: str, port: int, path: Path, rel: str, size: int, digest: str,
             timeout: float | None = None) -> tuple[str, int | None]:
    """('copied', None) when the peer served the file and it hashed right; ('reading', its bucket progress) while the
    peer reads that file from the bucket itself; ('busy', None) when it serves too many; ('absent', None) otherwise.
    OSError for an unreachable peer, a dropped transfer or wrong bytes."""
    conn = http.client.HTTPConnection(peer, port, timeout=SOCKET_TIMEOUT if timeout is None else timeout)
    try:
        conn.request("GET", f"/sha256/{digest}")
        resp = conn.getresponse()
        if resp.status == 200:
            _write_verified(resp.read, path, rel, size, digest)
            return "copied", None
        body = resp.read()
        if resp.status == 202:
            return "reading", int(json.loads(body)["bucket_bytes"])
        if resp.status == 503:
            return "busy", None
        return "absent", None
    except (ValueError, KeyError, http.client.HTTPException) as err:
        raise OSError(f"{peer}: {err!r}") from None
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


def serve(local: Local, host: str, port: int) -> http.server.ThreadingHTTPServer:
    """Serve this node's verified copies by content hash (never links, partial files or anything else).
    Bounded: at most MAX_SERVING transfers at once (each holds one CHUNK buffer; more get 503), and a client that
    stalls for SOCKET_TIMEOUT seconds is dropped."""
    slots = threading.BoundedSemaphore(MAX_SERVING) if MAX_SERVING else None

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = SOCKET_TIMEOUT                 # StreamRequestHandler: applied to the connection's socket

        def _json(self, status: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - the http.server API
            digest = self.path.removeprefix("/sha256/")
            state, what = local.lookup(digest) if SHA256.match(digest) else ("absent", None)
            if state == "reading":
                self._json(202, {"bucket_bytes": what})
                return
            if state != "have":
                self.send_error(404)
                return
            if slots is None or not slots.acquire(blocking=False):
                self.send_error(503)
                return
            try:
                with open(what, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    self.send_response(200)
                    self.send_header("Content-Length", str(size))
                    self.end_headers()
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
    fallbacks: dict[str, str] = field(default_factory=dict)   # rel -> why a peer did not serve it
    failed: dict[str, str] = field(default_factory=dict)      # rel -> why the bucket's copy could not be made
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, n: int, rel: str = "", why: str = "") -> None:
        with self.lock:
            if what == "peer":
                self.from_peers += n
            else:
                self.from_source += n
                if what == "fallback":
                    self.fallbacks[rel] = why


class Health:
    """Peers that refused connections or timed out for stall_seconds: asked no more (shared by a pod's threads)."""

    def __init__(self, stall_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.stall, self.clock, self.since, self.lock = stall_seconds, clock, {}, threading.Lock()

    def failed(self, peer: str) -> bool:
        """Record a failure; True once the peer has failed for stall_seconds (or is already written off)."""
        with self.lock:
            first = self.since.setdefault(peer, self.clock())
            return self.clock() - first >= self.stall

    def ok(self, peer: str) -> None:
        with self.lock:
            self.since.pop(peer, None)

    def down(self, peer: str) -> bool:
        with self.lock:
            return peer in self.since and self.clock() - self.since[peer] >= self.stall


def from_peer(peer: str, port: int, path: Path, rel: str, size: int, digest: str, peer_wait_seconds: float,
              stall_seconds: float, poll_seconds: float, timeout: float | None, health: Health | None = None,
              clock: Callable[[], float] = time.monotonic) -> str:
    """'' when the peer served the verified file, else why the bucket must: bounded by peer_wait_seconds in all, and
    by stall_seconds without the peer's bucket reads moving on. A refused connection (the pod listed, its server not
    up yet) is retried within stall_seconds; a peer refused or timed out that long is asked no more."""
    health = health or Health(stall_seconds, clock)
    started = clock()
    seen, moved = None, started
    while True:
        if health.down(peer):
            return f"peer {peer} unreachable for {stall_seconds:g} s"
        try:
            state, progress = ask_peer(peer, port, path, rel, size, digest, timeout)
        except (ConnectionRefusedError, socket.timeout, TimeoutError) as err:
            if health.failed(peer):
                return f"peer {peer} unreachable for {stall_seconds:g} s ({err})"
            time.sleep(poll_seconds)
            continue
        except OSError as err:
            return f"peer {peer}: {err}"
        health.ok(peer)
        if state == "copied":
            return ""
        if state == "absent":
            return f"peer {peer} neither has nor reads it"
        now = clock()
        if progress is not None and progress != seen:
            seen, moved = progress, now
        if now - moved >= stall_seconds:
            return f"peer {peer} made no progress for {stall_seconds:g} s ({state})"
        if now - started >= peer_wait_seconds:
            return f"peer {peer} not done after {peer_wait_seconds:g} s"
        time.sleep(poll_seconds)


def fetch_all(source: Path, dest: Path, local: Local, me: str, peers: list[str], port: int, threads: int = 8,
              peer_wait_seconds: float = 1800, stall_seconds: float = 120, poll_seconds: float = 2,
              timeout: float | None = None) -> Result:
    """Make every file a verified local copy: this node's preferred files from the bucket (first, so peers get them
    early), the others from their preferred reader if it serves them within the bounds, else from the bucket."""
    result = Result()
    files = local.files
    todo = [rel for rel in files if not local.is_verified(rel)]
    mine = [rel for rel in todo if owner(rel, peers) == me]
    theirs = [rel for rel in todo if owner(rel, peers) != me]
    with local.lock:
        local.bucket_queue |= {files[rel][1] for rel in mine}
        local.joining = False
    health = Health(stall_seconds)

    def one(rel: str) -> None:
        size, digest = files[rel]
        path, src = dest / rel, owner(rel, peers)
        why = ""
        if src != me:
            why = from_peer(src, port, path, rel, size, digest, peer_wait_seconds, stall_seconds, poll_seconds,
                            timeout, health)
            if not why:
                local.mark(rel)
                result.add("peer", size)
                return
            print(f"{rel} from the bucket: {why}", flush=True)
        try:
            copy_from_source(source, path, rel, size, digest, local.read_from_bucket)
        except OSError as err:   # wrong bytes in the bucket or a read error: named once, never a traceback
            with result.lock:
                result.failed[rel] = str(err)
            return
        else:
            local.mark(rel)      # recorded before it leaves the queue: askers see 202 then 200, never a 404 between
        finally:
            with local.lock:
                local.bucket_queue.discard(digest)
        result.add("fallback" if why else "source", size, rel, why)

    with ThreadPoolExecutor(max_workers=threads) as pool:   # FIFO: every own file starts before any wait
        list(pool.map(one, mine + theirs))
    return result


def resolve_peers(dns_names: str, me: str, expected: int, wait_seconds: float) -> list[str]:
    """The pod IPs behind the headless Service (published before they are Ready), once `expected` are listed or
    after wait_seconds: who is listed only decides who prefers which file, never whether the copy completes."""
    deadline = time.monotonic() + wait_seconds
    while True:
        ips = {me}
        for name in filter(None, (n.strip() for n in dns_names.split(","))):
            try:
                ips |= {a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)}
            except socket.gaierror:
                pass
        if len(ips) >= expected or time.monotonic() > deadline:
            return sorted(ips, key=lambda ip: tuple(int(p) for p in ip.split(".")))
        time.sleep(2)


def main() -> int:
    env = os.environ
    source = Path(env["SOURCE"])
    root = Path(env["LOCAL_ROOT"])
    revision, repo = env["MODEL_REVISION"], env["MODEL_REPO"]
    dest = root / revision / repo
    port = int(env.get("PORT", "8080"))
    me = env["POD_IP"]
    t0 = time.monotonic()
    try:
        files = read_manifest(source, revision)
    except ManifestError as err:
        print(f"cannot copy the checkpoint: {err} (the download Job verifies it first; is it done?)", file=sys.stderr)
        return 1
    marker = root / revision / READY_MARKER
    marker.unlink(missing_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    local = Local(root / revision / VERIFIED, dest, files)
    missing = prepare_tree(source, dest, files, local)
    for old in make_room(root, revision, missing):
        print(f"removed the node-local copy of revision {old} to make room", flush=True)
    total = sum(size for size, _ in files.values())
    usage = shutil.disk_usage(dest)
    free = usage.free
    where, device = filesystem_path(Path("/proc/self/mountinfo").read_text(), str(root))
    wanted = env.get("FS_PATH")
    why = (f"{root} is {where} on {device}, not {wanted}: no instance-store array at the host path (nodeadm's "
           f"localStorage), and the root volume must not take the checkpoint" if wanted and where != wanted else
           f"{missing / 1e9:.0f} GB to copy, {free / 1e9:.0f} GB free under {root} of {usage.total / 1e9:.0f} GB, "
           f"{EVICTION_RESERVE:.0%} of which kubelet's eviction keeps free" if too_full(missing, usage) else "")
    if why:
        print(f"NOT COPYING: {why}; workers read the bucket through the links", flush=True)
        marker.write_text("links\n")
        while True:
            time.sleep(3600)
    serve(local, me, port)                        # the pod IP only: peers reach it there, nothing else listens
    wait = float(env.get("PEER_WAIT_SECONDS", "1800"))
    peers = resolve_peers(env["PEERS_DNS"], me, int(env.get("EXPECTED_PEERS", "1")),
                          float(env.get("PEER_JOIN_SECONDS", "60")))
    print(f"{len(files)} files, {total / 1e9:.0f} GB ({missing / 1e9:.0f} GB to copy) of revision {revision}; "
          f"peers {peers}", flush=True)
    timeout = float(env["PEER_TIMEOUT_SECONDS"]) if env.get("PEER_TIMEOUT_SECONDS") else None
    res = fetch_all(source, dest, local, me, peers, port, int(env.get("THREADS", "8")), wait,
                    float(env.get("STALL_SECONDS", "120")), float(env.get("POLL_SECONDS", "2")), timeout)
    if res.failed:
        first = "; ".join(res.failed[rel] for rel in sorted(res.failed)[:3])
        print(f"FAILED: {len(res.failed)} of {len(files)} files of revision {revision} could not be copied from the "
              f"bucket ({first}); the bucket does not hold the manifest's bytes: re-run the fetchers (or the "
              f"download Job) for this revision", file=sys.stderr, flush=True)
        return 1
    left = [rel for rel in files if not local.is_verified(rel)]
    if left:
        print(f"not local after the copy: {left[:5]}", file=sys.stderr)
        return 1
    marker.write_text("local\n")
    print(f"node-local copy complete in {time.monotonic() - t0:.0f} s: {res.from_source / 1e9:.0f} GB "
          f"({res.from_source} bytes) from the bucket, {res.from_peers / 1e9:.0f} GB ({res.from_peers} bytes) from peers"
          + (f"; {len(res.fallbacks)} files from the bucket because a peer did not serve them" if res.fallbacks
             else ""), flush=True)
    while True:                                   # keep serving peers that are still copying
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
