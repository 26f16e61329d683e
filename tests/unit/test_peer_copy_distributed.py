"""Issue 19 findings 3 and 4, "the peer copy: correct by construction": the shipped weights-prefetch program
(kimi_k3/pods/weights_prefetch.py) run as several real processes on loopback (127.0.0.x, one per GPU node), each with
its own view of who its peers are (what DNS listed when it looked), and a local directory standing in for the bucket
(the pods read the bucket through the Mountpoint mount: a directory). Every scenario must end, within a bound, with
every node holding exactly the manifest's bytes of the revision it runs (checked by hashing every file).

On the previous program these scenarios hang (pods whose views differ wait on each other's 404s forever) or end
with old-revision bytes under new-revision names (same-name, same-size shards copied from old peers)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kimi_k3.pods import weights_prefetch as wp

pytestmark = pytest.mark.slow  # beyond the `make test` budget: peer-copy processes with skewed joins and failures

REPO = "moonshotai/Kimi-K3"
REV1 = "1" * 40
REV2 = "2" * 40
BOUND = 60  # seconds every scenario has to end in (each runs in a few seconds when correct)
MANIFEST_DIR = ".kimi-k3"  # where the fetchers and the verify step leave the manifests (weights_prefetch.MANIFEST_DIR)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_revision(bucket: Path, revision: str, data: dict[str, bytes], shares: int = 2) -> Path:
    """The bucket's directory of one revision, as the fetchers leave it: files + one manifest per share."""
    d = bucket / f"{REPO}@{revision}"
    names = sorted(data)
    for rel, blob in data.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(blob)
    (d / MANIFEST_DIR).mkdir(parents=True)
    for i in range(shares):
        files = {
            rel: {"size": len(data[rel]), "sha256": hashlib.sha256(data[rel]).hexdigest()} for rel in names[i::shares]
        }
        (d / MANIFEST_DIR / f"manifest-{i}-of-{shares}.json").write_text(
            json.dumps({"repo": REPO, "revision": revision, "share": i, "shares": shares, "files": files})
        )
    return d


def checkpoint(seed: int, n: int = 12, size: int = 1 << 20) -> dict[str, bytes]:
    rnd = __import__("random").Random(seed)
    data = {f"model-{i:05d}-of-{n:05d}.safetensors": rnd.randbytes(size + 4099 * i) for i in range(n)}
    return data | {
        "config.json": b'{"model_type": "kimi_k3"}',
        "model.safetensors.index.json": b"{}",
        "sub/tokenizer.model": rnd.randbytes(3000),
    }


class Node:
    """One GPU node: its host directory and its prefetch process (the DaemonSet pod's command and environment)."""

    def __init__(self, tmp: Path, ip: str, port: int):
        self.ip, self.port, self.root = ip, port, tmp / "nodes" / ip
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.revision = ""

    def start(self, source: Path, revision: str, peers: list[str], expected: int, **extra: str) -> "Node":
        self.revision = revision
        env = {
            "SOURCE": str(source),
            "LOCAL_ROOT": str(self.root),
            "MODEL_REPO": f"{REPO}@{revision}",
            "MODEL_REVISION": revision,
            "POD_IP": self.ip,
            "PEERS_DNS": ",".join(peers),
            "EXPECTED_PEERS": str(expected),
            "PORT": str(self.port),
            "THREADS": "4",
            "PEER_JOIN_SECONDS": "1",
            "PEER_WAIT_SECONDS": "20",
            "STALL_SECONDS": "3",
            "POLL_SECONDS": "0.05",
            "PEER_TIMEOUT_SECONDS": "2",
            "PATH": os.environ.get("PATH", ""),
            **extra,
        }
        self.log = open(self.root.parent / f"{self.ip}-{revision[:4]}.log", "w")
        self.proc = subprocess.Popen([sys.executable, wp.__file__], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    @property
    def marker(self) -> Path:
        return self.root / self.revision / wp.READY_MARKER

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        if self.proc:
            self.proc.wait(10)
            self.log.close()

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()


@pytest.fixture
def cluster(tmp_path):
    port = _port()
    nodes: list[Node] = []

    def make(count: int) -> list[Node]:
        for _ in range(count):
            nodes.append(Node(tmp_path, f"127.0.0.{len(nodes) + 2}", port))
        return nodes[-count:]

    yield make
    for n in nodes:
        n.stop()


def wait_ready(nodes: list[Node], bound: float = BOUND) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound:
        if all(n.marker.exists() for n in nodes):
            return time.monotonic() - t0
        dead = [n for n in nodes if n.proc.poll() is not None and not n.marker.exists()]
        assert not dead, f"{dead[0].ip} exited {dead[0].proc.returncode}:\n{dead[0].output()}"
        time.sleep(0.05)
    late = [n.ip for n in nodes if not n.marker.exists()]
    pytest.fail(f"not Ready within {bound} s: {late}\n" + "\n".join(n.output()[-2000:] for n in nodes if n.ip in late))


def assert_holds_exactly(node: Node, data: dict[str, bytes]) -> None:
    """The node's tree of its revision is the manifest's files, each a regular file with the manifest's sha256;
    other revisions' directories are not part of it."""
    dest = node.root / node.revision / f"{REPO}@{node.revision}"
    got = {
        p.relative_to(dest).as_posix(): p
        for p in dest.rglob("*")
        if (p.is_file() or p.is_symlink()) and not p.relative_to(dest).as_posix().startswith(MANIFEST_DIR + "/")
    }  # records, not weights
    assert sorted(got) == sorted(data), f"{node.ip}: files {sorted(set(got) ^ set(data))} differ"
    for rel, blob in data.items():
        p = got[rel]
        assert not p.is_symlink(), f"{node.ip}: {rel} is still a link to the bucket"
        assert hashlib.sha256(p.read_bytes()).hexdigest() == hashlib.sha256(blob).hexdigest(), (
            f"{node.ip}: {rel} does not hold revision {node.revision[:4]}'s bytes"
        )
    # Other revisions' directories stay while the disk has room: the old graph's workers on the node mount them
    # (tests/stacks/test_peer_copy_review.py); they are never the tree checked here.


def bucket_bytes(node: Node) -> int:
    import re

    return int(re.search(r"\((\d+) bytes\) from the bucket", node.output()).group(1))


# Where no peer fails, the bounds that tell a dead peer from a slow one are widened: on a loaded 2-core CI runner an
# fsync can stall for seconds, which the 3 s test bound would call a stalled peer (the shipped bound is 120 s).
UNHURRIED = {"STALL_SECONDS": "15", "PEER_TIMEOUT_SECONDS": "10"}


def assert_bucket_served_once(nodes: list[Node], data: dict[str, bytes]) -> None:
    got = sum(bucket_bytes(n) for n in nodes)
    assert got == sum(map(len, data.values())), f"the bucket served {got} bytes:\n" + "\n".join(
        n.output()[-1500:] for n in nodes
    )


def test_pods_that_agree_read_each_byte_from_the_bucket_once(tmp_path, cluster):
    """The point of the peer copy: with one view and the recipe's node count, the bucket (across the Local Zone link)
    serves the checkpoint once in all, even with pods starting a few hundred ms apart."""
    data = checkpoint(6)
    src = write_revision(tmp_path / "bucket", REV1, data)
    nodes = cluster(3)
    ips = [n.ip for n in nodes]
    for node in nodes:
        node.start(src, REV1, ips, expected=3, **UNHURRIED)
        time.sleep(0.2)
    wait_ready(nodes)
    for n in nodes:
        assert_holds_exactly(n, data)
    assert_bucket_served_once(nodes, data)


def test_pods_that_listed_different_peers_all_finish(tmp_path, cluster):
    """Skewed joins: each pod saw a different subset of the others when it looked (DNS snapshots), the recipe says
    4 nodes: every pod asks peers that do not consider themselves the file's reader. None may wait on another."""
    data = checkpoint(1)
    src = write_revision(tmp_path / "bucket", REV1, data)
    nodes = cluster(4)
    ips = [n.ip for n in nodes]
    # A saw {A, B}, B saw {A, B, C}, C saw {B, C}, D saw all: under the old modulo split file 3 was B's for A and
    # A's for B (both answered 404 forever); any assignment from views that differ has such pairs.
    views = [ips[:2], ips[:3], ips[1:3], ips]
    for node, view in zip(nodes, views):
        node.start(src, REV1, view, expected=4)
        time.sleep(0.3)  # joins a little later each
    wait_ready(nodes)
    for n in nodes:
        assert_holds_exactly(n, data)


def test_more_nodes_than_the_recipe_and_a_late_node(tmp_path, cluster):
    """Autoscaling: 6 nodes where the recipe (EXPECTED_PEERS) says 3; then a 7th node joins long after the others
    are done and copies from them (its preferred readers hold verified copies)."""
    data = checkpoint(2)
    src = write_revision(tmp_path / "bucket", REV1, data)
    nodes = cluster(6)
    ips = [n.ip for n in nodes]
    for i, node in enumerate(nodes):
        node.start(src, REV1, ips[: max(3, i + 1)], expected=3)
    wait_ready(nodes)
    (late,) = cluster(1)
    late.start(src, REV1, ips + [late.ip], expected=3)
    wait_ready([late])
    for n in nodes + [late]:
        assert_holds_exactly(n, data)
    assert bucket_bytes(late) == 0, "a late node copies from its peers' verified copies"


def test_a_killed_peer_and_a_hung_peer(tmp_path, cluster):
    """One listed peer is killed before it serves anything, another is frozen (SIGSTOP: its socket accepts, nothing
    answers): the others read those peers' files from the bucket within the bounds."""
    data = checkpoint(3)
    src = write_revision(tmp_path / "bucket", REV1, data)
    nodes = cluster(4)
    ips = [n.ip for n in nodes]
    killed, hung, *live = nodes
    killed.start(src, REV1, ips, expected=4)
    hung.start(src, REV1, ips, expected=4)
    time.sleep(0.3)
    killed.proc.kill()
    hung.proc.send_signal(signal.SIGSTOP)
    for node in live:
        node.start(src, REV1, ips, expected=4)
    wait_ready(live)
    for n in live:
        assert_holds_exactly(n, data)


def test_a_revision_change_during_a_rolling_update(tmp_path, cluster):
    """Revision 2 changes every shard's bytes at the same name and size, renames some (revision 1's bytes under a
    new name), drops one and adds one. Pods are replaced one by one while the others still serve revision 1: every pod ends with revision 2's bytes
    (never a revision-1 shard under a revision-2 name), and the renamed shards are still found."""
    old = checkpoint(4)
    shards = sorted(n for n in old if n.endswith(".safetensors"))
    new = {n: (bytes(b ^ 0xFF for b in blob) if n in shards else blob) for n, blob in old.items()}  # same sizes
    for k, n in enumerate(shards[::4]):  # renamed: revision 1's bytes under a new name
        del new[n]
        new[f"model-{99 + k:05d}-renamed.safetensors"] = old[n]
    del new[shards[1]]
    new["model-00200-added.safetensors"] = os.urandom(len(old[shards[1]]))
    bucket = tmp_path / "bucket"
    src1, src2 = write_revision(bucket, REV1, old), write_revision(bucket, REV2, new, shares=3)
    nodes = cluster(3)
    ips = [n.ip for n in nodes]
    for node in nodes:
        node.start(src1, REV1, ips, expected=3)
    wait_ready(nodes)
    for node in nodes:  # the DaemonSet's rolling update: one pod at a time
        node.stop()
        node.start(src2, REV2, ips, expected=3)
        wait_ready([node])
        assert_holds_exactly(node, new)
    for n in nodes:
        assert_holds_exactly(n, new)


def test_a_peer_serving_wrong_bytes_is_not_believed(tmp_path, cluster):
    """A peer whose verified copy was corrupted on disk after it checked it (or any peer lying): the receiver
    hashes what it got and reads the bucket instead."""
    data = checkpoint(5, n=4)
    src = write_revision(tmp_path / "bucket", REV1, data)
    first, second = cluster(2)
    first.start(src, REV1, [first.ip], expected=1)
    wait_ready([first])
    dest = first.root / REV1 / f"{REPO}@{REV1}"
    for rel in data:
        if rel.endswith(".safetensors"):
            blob = bytearray((dest / rel).read_bytes())
            blob[100] ^= 1  # same size, one bit off
            (dest / rel).write_bytes(bytes(blob))
    second.start(src, REV1, [first.ip, second.ip], expected=2)
    wait_ready([second])
    assert_holds_exactly(second, data)
