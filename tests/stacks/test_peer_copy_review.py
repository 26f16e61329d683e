"""Issue 19 review of the node-local copy: what the workers still running on a node hold when the weights-prefetch
DaemonSet rolls to a new revision, and how close to full the copy may take the instance-store array.

The workers mount LOCAL_ROOT/<revision> (hostPath, kimi_k3/k8s/deployment.py _weights_volumes); during the DaemonSet's
rolling update (hours: the graph waits for it) the old graph keeps serving from the old revision's directory, and a
restarted old worker reloads from it. The array also holds /var/lib/kubelet and /var/lib/containerd
(awslabs/amazon-eks-ami templates/shared/runtime/bin/setup-local-disks bind-mounts them onto it), so the copy must
leave kubelet's hard-eviction reserve free (kubelet defaults imagefs.available<15%, nodefs.available<10%:
kubernetes/kubernetes pkg/kubelet/eviction/defaults_linux.go) or the node turns DiskPressure (tainted NoSchedule,
pods evicted)."""

from __future__ import annotations

import collections
import os
import time
from pathlib import Path

from test_peer_copy_distributed import (  # noqa: F401
    REPO,
    REV1,
    REV2,
    UNHURRIED,
    assert_bucket_served_once,
    assert_holds_exactly,
    checkpoint,
    cluster,  # noqa: F401  (fixture)
    wait_ready,
    write_revision,
)

from kimi_k3.pods import weights_prefetch as wp

Usage = collections.namedtuple("Usage", "total used free")


def test_a_rolling_update_keeps_the_old_revision_the_old_workers_mount(tmp_path, cluster):
    """Real processes: revision 1 copied on one node, then its pod replaced by a revision-2 pod (the rolling update).
    The disk has room for both, so the old workers' directory must still hold revision 1's bytes."""
    old, new = checkpoint(7, n=4), checkpoint(8, n=4)
    bucket = tmp_path / "bucket"
    src1, src2 = write_revision(bucket, REV1, old), write_revision(bucket, REV2, new)
    (node,) = cluster(1)
    node.start(src1, REV1, [node.ip], expected=1)
    wait_ready([node])
    node.stop()
    node.start(src2, REV2, [node.ip], expected=1)
    wait_ready([node])
    kept = node.root / REV1 / f"{REPO}@{REV1}"
    assert all((kept / rel).is_file() and (kept / rel).read_bytes() == blob for rel, blob in old.items()), (
        f"the new pod deleted revision 1 that the old workers on the node still mount:\n{node.output()}"
    )


def _revision(root: Path, name: str, size: int, age: float) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "shard").write_bytes(b"x" * size)
    os.utime(d, (time.time() - age, time.time() - age))
    return d


def test_other_revisions_go_oldest_first_and_only_for_room(tmp_path):
    root = tmp_path / "local"
    _revision(root, "a" * 40, 10, age=300)
    _revision(root, "b" * 40, 10, age=100)
    (root / ("c" * 40)).mkdir(parents=True)  # this pod's revision: never removed
    total = 1000

    def usage(free):
        return lambda _p: Usage(total, total - free, free)

    # Room for the copy plus the eviction reserve: nothing removed.
    assert wp.make_room(root, "c" * 40, 100, usage(100 * wp.SPACE_MARGIN + total * wp.EVICTION_RESERVE + 1)) == []
    assert (root / ("a" * 40)).is_dir() and (root / ("b" * 40)).is_dir()
    # Short of room: the oldest goes first, and no more than needed.
    frees = iter([200, 400])
    assert wp.make_room(root, "c" * 40, 100, lambda _p: Usage(total, 0, next(frees))) == ["a" * 40]
    assert not (root / ("a" * 40)).exists() and (root / ("b" * 40)).is_dir() and (root / ("c" * 40)).is_dir()


def test_the_copy_leaves_kubelets_eviction_reserve_free():
    """A copy that fits in free space but leaves the array below kubelet's hard-eviction threshold is not made: the
    workers read through the links instead of the node turning DiskPressure."""
    total = 22_500 * 10**9  # p6e-gb200: 3 x 7.5 TB (recipes/facts/storage.yaml)
    missing = 1_560 * 10**9  # the checkpoint (recipes/facts/storage.yaml fsx)
    free = int(missing * wp.SPACE_MARGIN) + 10**9  # fits, with under 1% of the array left
    assert wp.too_full(missing, Usage(total, total - free, free)), "copies into kubelet's eviction reserve"
    assert not wp.too_full(missing, Usage(total, 0, total))


def test_a_copy_is_on_disk_before_it_replaces_the_link(tmp_path, monkeypatch):
    """A restarted pod trusts its VERIFIED record and the file's size (Local._intact). After a node crash, a copy
    renamed before its data reached the disk can come back with the right size and zeroed or missing extents (XFS,
    which setup-local-disks formats the array with, has no flush-on-rename): served and loaded as verified. The data
    must be fsync'd before the rename that makes it the checkpoint's file."""
    src = tmp_path / "src"
    src.mkdir()
    blob = os.urandom(1 << 16)
    (src / "shard").write_bytes(blob)
    dest = tmp_path / "dest"
    dest.mkdir()
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(
        wp.os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd))[1]
    )
    monkeypatch.setattr(wp.os, "replace", lambda a, b: (events.append(("replace", str(a))), real_replace(a, b))[1])
    import hashlib

    wp.copy_from_source(src, dest / "shard", "shard", len(blob), hashlib.sha256(blob).hexdigest())
    part = str(dest / "shard.part")
    assert ("replace", part) in events, events
    assert ("fsync", part) in events[: events.index(("replace", part))], f"renamed before its data was synced: {events}"


def test_a_revision_change_replaces_every_prefetch_pod_at_once(rendered):
    """Replaced one at a time (the DaemonSet default, maxUnavailable 1), the k-th new pod's preferred readers are
    mostly old pods, which 404 the new content: the bucket serves (N+1)/2 checkpoints over the Local Zone link
    instead of one (kubernetes DaemonSet RollingUpdate: maxUnavailable defaults to 1)."""
    from conftest import STACKS, by_kind

    for stack in STACKS:
        (ds,) = [
            d
            for d in by_kind(rendered[stack].objects, "DaemonSet")
            if d["metadata"]["name"] == "kimi-k3-weights-prefetch"
        ]
        assert ds["spec"].get("updateStrategy") == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "100%"},
        }, stack


def test_pods_replaced_together_read_the_new_revision_from_the_bucket_once(tmp_path, cluster):
    """What the strategy buys, on the shipped program: all pods of revision 2 start together after revision 1."""
    old, new = checkpoint(9), checkpoint(10)
    bucket = tmp_path / "bucket"
    src1, src2 = write_revision(bucket, REV1, old), write_revision(bucket, REV2, new)
    nodes = cluster(3)
    ips = [n.ip for n in nodes]
    for node in nodes:
        node.start(src1, REV1, ips, expected=3)
    wait_ready(nodes)
    for node in nodes:
        node.stop()
    for node in nodes:
        node.start(src2, REV2, ips, expected=3, **UNHURRIED)
    wait_ready(nodes)
    for n in nodes:
        assert_holds_exactly(n, new)
    assert_bucket_served_once(nodes, new)
