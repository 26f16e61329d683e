"""Issue 15: node-local weights. Every GPU node copies the verified checkpoint onto its instance-store NVMe while the
runtime image pulls and the fabric preflight runs (each byte crosses the Local Zone link once, the rest comes from
peers), the graph waits for it, and workers (and a re-deploy) load from the node-local copy.

The copy script runs for real here: three peers on 127.0.0.1-3 with real HTTP and real files."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, STACKS, by_kind, main_container, render_with, workers

from kimi_k3 import data as kimi_k3_data
from kimi_k3.blueprint import load_stack
from kimi_k3.graph import durations
from kimi_k3.k8s import node_local
from kimi_k3.offline import critical_path as cp
from kimi_k3.pods import weights_prefetch as wp


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PORT = _free_port()


REV = "abc0" * 10


def _source(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """The bucket's directory of one revision as the fetchers leave it: the files and their manifest."""
    import hashlib
    import json

    src = tmp_path / "bucket" / "moonshotai" / "Kimi-K3"
    data = {f"model-{i:05d}-of-00010.safetensors": os.urandom(1000 + 37 * i) for i in range(10)}
    data |= {"config.json": b'{"a": 1}', "model.safetensors.index.json": b"{}", "sub/tokenizer.model": b"tok" * 50}
    for rel, blob in data.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(blob)
    (src / ".cache" / "huggingface").mkdir(parents=True)
    (src / ".cache" / "huggingface" / "x.lock").write_bytes(b"hf download metadata, not the checkpoint")
    (src / wp.MANIFEST_DIR).mkdir()
    (src / wp.MANIFEST_DIR / "manifest-0-of-1.json").write_text(
        json.dumps(
            {
                "revision": REV,
                "files": {rel: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for rel, b in data.items()},
            }
        )
    )
    return src, data


def _local(tmp_path: Path, src: Path, name: str) -> tuple[Path, "wp.Local"]:
    files = wp.read_manifest(src, REV)
    dest = tmp_path / name / REV / "moonshotai" / "Kimi-K3"
    dest.mkdir(parents=True)
    return dest, wp.Local(dest.parent.parent / wp.VERIFIED, dest, files)


def test_the_manifest_is_the_checkpoint_and_must_be_of_this_revision(tmp_path):
    src, data = _source(tmp_path)
    files = wp.read_manifest(src, REV)
    assert sorted(files) == sorted(data), "hf download's .cache metadata is not part of the checkpoint"
    with pytest.raises(wp.ManifestError, match="revision"):
        wp.read_manifest(src, "f" * 40)
    (src / wp.MANIFEST_DIR / "manifest-0-of-1.json").rename(src / wp.MANIFEST_DIR / "manifest-0-of-2.json")
    with pytest.raises(wp.ManifestError, match="no complete set"):
        wp.read_manifest(src, REV)


def test_tree_links_first_keeps_verified_copies_and_drops_other_revisions(tmp_path):
    src, data = _source(tmp_path)
    dest, local = _local(tmp_path, src, "node")
    files = local.files
    wp.prepare_tree(src, dest, files, local)
    wp.copy_from_source(src, dest / "config.json", "config.json", *files["config.json"])
    local.mark("config.json")  # verified local copy: kept
    (dest / "model-00000-of-00010.safetensors").unlink()
    (dest / "model-00000-of-00010.safetensors").write_bytes(data["model-00000-of-00010.safetensors"])  # unverified
    root = dest.parent.parent.parent
    (root / "rev1" / "x").mkdir(parents=True)
    again = wp.Local(local.state, dest, files)  # a restarted pod
    missing = wp.prepare_tree(src, dest, files, again)
    assert missing == sum(size for size, _ in files.values()) - len(b'{"a": 1}')
    assert not (dest / "config.json").is_symlink()
    for rel in files:
        if rel != "config.json":
            assert os.readlink(dest / rel) == str(src / rel), "every file readable at once, through the bucket"
            assert (dest / rel).read_bytes() == data[rel]
    assert wp.prepare_tree(src, dest, files, again) == missing, "idempotent"
    assert wp.remove_other_revisions(root, REV) == ["rev1"] and (root / REV).is_dir()


def _get(port: int, path: str) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_peer_serves_only_verified_files_by_content_hash(tmp_path):
    src, data = _source(tmp_path)
    dest, local = _local(tmp_path, src, "d")
    files = local.files
    wp.prepare_tree(src, dest, files, local)
    wp.copy_from_source(src, dest / "config.json", "config.json", *files["config.json"])
    local.mark("config.json")
    (tmp_path / "secret").write_text("outside")
    port = _free_port()
    server = wp.serve(local, "127.0.0.1", port)
    try:
        sha = lambda rel: files[rel][1]  # noqa: E731
        assert _get(port, f"/sha256/{sha('config.json')}") == (200, data["config.json"])
        local.joining = False
        for path in [
            f"/sha256/{sha('model-00001-of-00010.safetensors')}",  # a link, not a copy
            "/config.json",
            "/../secret",
            "/sha256/../../secret",
            "/sha256/" + "0" * 64,
        ]:
            assert _get(port, path)[0] == 404, path
        local.bucket_queue.add(sha("model-00001-of-00010.safetensors"))
        local.read_from_bucket(123)
        assert _get(port, f"/sha256/{sha('model-00001-of-00010.safetensors')}") == (202, b'{"bucket_bytes": 123}'), (
            "reading it from the bucket itself: 'wait', with its progress"
        )
    finally:
        server.shutdown()
        server.server_close()


def test_a_reading_peer_is_waited_for_while_it_progresses_and_left_when_it_stalls(tmp_path):
    """202 is the only answer waited on, and only while the peer's bucket reads move on: a peer whose progress
    stops (or that never finishes) is left for the bucket within the bounds."""
    src, data = _source(tmp_path)
    dest, local = _local(tmp_path, src, "slow")
    files = local.files
    rel = "model-00003-of-00010.safetensors"
    size, digest = files[rel]
    wp.prepare_tree(src, dest, files, local)
    local.joining = False
    local.bucket_queue.add(digest)
    port = _free_port()
    server = wp.serve(local, "127.0.0.1", port)
    other, _ = _local(tmp_path, src, "asker")
    other.joinpath(rel).parent.mkdir(parents=True, exist_ok=True)

    def progress_then_finish():
        for _ in range(10):
            local.read_from_bucket(1)
            time.sleep(0.1)
        wp.copy_from_source(src, dest / rel, rel, size, digest)
        local.mark(rel)

    try:
        t0 = time.monotonic()
        assert (
            wp.from_peer("127.0.0.1", port, other / rel, rel, size, digest, 30, 0.5, 0.02, 2)
            == "peer 127.0.0.1 made no progress for 0.5 s (reading)"
        )
        assert time.monotonic() - t0 < 2
        feeder = threading.Thread(target=progress_then_finish)
        feeder.start()
        assert wp.from_peer("127.0.0.1", port, other / rel, rel, size, digest, 30, 0.5, 0.02, 2) == "", (
            "waited past the stall bound because it progressed, then copied"
        )
        feeder.join()
        assert (other / rel).read_bytes() == data[rel]
    finally:
        server.shutdown()
        server.server_close()


def _run_entrypoint(src: Path, root: Path, fs_path: str | None, check_running=None) -> tuple[Path, str]:
    """main() as the DaemonSet runs it (one peer, found by DNS; FS_PATH as given, or the tree's real place within its
    filesystem), until its readiness marker appears; `check_running(port)` runs while it still serves. Returns the
    marker and everything it printed."""
    import subprocess
    import sys

    env = {
        "SOURCE": str(src),
        "LOCAL_ROOT": str(root),
        "MODEL_REPO": "moonshotai/Kimi-K3",
        "MODEL_REVISION": REV,
        "POD_IP": "127.0.0.1",
        "PEERS_DNS": "localhost",
        "EXPECTED_PEERS": "1",
        "PORT": str(_free_port()),
        "THREADS": "2",
        "PEER_WAIT_SECONDS": "5",
        "PATH": os.environ.get("PATH", ""),
        "FS_PATH": fs_path or wp.filesystem_path(Path("/proc/self/mountinfo").read_text(), str(root))[0],
    }
    proc = subprocess.Popen(
        [sys.executable, wp.__file__], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    marker = root / REV / wp.READY_MARKER
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), proc.stdout.read() if proc.poll() is not None else "no marker within 30 s"
        if check_running:
            assert proc.poll() is None, "it keeps serving its peers"
            check_running(int(env["PORT"]))
    finally:
        proc.kill()
        out = proc.communicate()[0]
    if not check_running:
        assert _listeners(int(env["PORT"])) == []
    return marker, out


def test_the_pod_entrypoint_marks_its_node_ready_once_everything_is_local(tmp_path):
    """main() as the DaemonSet runs it, killed after its readiness marker appears."""
    src, data = _source(tmp_path)
    root = tmp_path / "node"
    (root / "old-revision").mkdir(parents=True)

    def bound_to_the_pod_ip(port):
        assert _listeners(port) == ["127.0.0.1"], "bound to the pod IP only, not 0.0.0.0"

    # FS_PATH (the check the DaemonSet makes): here the tree's real place within its filesystem, so it copies.
    marker, out = _run_entrypoint(src, root, None, bound_to_the_pod_ip)
    assert marker.read_text() == "local\n" and (root / "old-revision").is_dir(), "kept: there is room for both"
    dest = root / REV / "moonshotai" / "Kimi-K3"
    assert all((dest / rel).read_bytes() == blob and not (dest / rel).is_symlink() for rel, blob in data.items())
    assert "node-local copy complete" in out and "removed the node-local copy" not in out


def _prefetch(r):
    return next(
        x
        for x in r.resources
        if x["type"] == "kubernetes:apps/v1:DaemonSet" and x["name"] == "kimi-k3-serving-weights-prefetch"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_graph_waits_for_every_node_to_hold_the_verified_checkpoint(stack, rendered):
    r = rendered[stack]
    by_name = {x["name"]: x for x in r.resources}
    ds, dgd = _prefetch(r), by_name["kimi-k3-serving-deployment"]
    assert ds["urn"] in dgd["dependsOn"], "workers start on node-local weights"
    assert by_name["kimi-k3-eks-gpu-nodes"]["urn"] in ds["dependsOn"]
    assert by_name["kimi-k3-model-cache-download"]["urn"] in ds["dependsOn"], (
        "the copy starts from the checkpoint the download Job verified, before any worker"
    )
    assert by_name["kimi-k3-serving-decode-preflight"]["urn"] not in ds["dependsOn"], "it overlaps the preflight"
    cfg, graph = load_stack(stack, ROOT)
    (obj,) = [d for d in by_kind(r.objects, "DaemonSet") if d["metadata"]["name"] == "kimi-k3-weights-prefetch"]
    pod = obj["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["EXPECTED_PEERS"] == str(graph.nodes)
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["model-cache-remote"]["persistentVolumeClaim"] == {"claimName": "kimi-k3-model-cache", "readOnly": True}
    assert {"name": "model-cache-remote", "mountPath": "/model-cache-remote", "readOnly": True} in c["volumeMounts"], (
        "the bucket stays read-only: the copy never writes the 1.5 TB cache"
    )
    assert vols["node-local"]["hostPath"] == {"path": "/mnt/k8s-disks/0/kimi-k3-weights", "type": "DirectoryOrCreate"}
    assert env["FS_PATH"] == "/kimi-k3-weights", "copies only where the hostPath is on the array's filesystem"
    assert (
        c["securityContext"]["readOnlyRootFilesystem"] is True
        and c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        and c["resources"]["limits"]["memory"]
    )
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert c["readinessProbe"]["exec"]["command"][-1].endswith(f"/{graph.model_revision}/{wp.READY_MARKER}")
    (svc,) = [s for s in by_kind(r.objects, "Service") if s["metadata"]["name"] == "kimi-k3-weights-peers"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert env["PEERS_DNS"].startswith("kimi-k3-weights-peers.")
    # Workers: the node-local copy at the model path (read-only), the bucket at the links' target path.
    (graph_obj,) = by_kind(r.objects, "DynamoGraphDeployment")
    for comp in workers(graph_obj):
        spec = comp["podTemplate"]["spec"]
        wvols = {v["name"]: v for v in spec["volumes"]}
        assert wvols["model-cache"]["hostPath"] == {
            "path": f"/mnt/k8s-disks/0/kimi-k3-weights/{graph.model_revision}",
            "type": "Directory",
        }
        mounts = {m["name"]: m for m in main_container(comp)["volumeMounts"]}
        assert mounts["model-cache"] == {"name": "model-cache", "mountPath": graph.cache_mount_path, "readOnly": True}
        assert mounts["model-cache-remote"]["readOnly"] is True
        assert env["SOURCE"] == f"{mounts['model-cache-remote']['mountPath']}/{node_local.model_dir_name(graph)}", (
            "a link the prefetch writes resolves to the same file inside the worker"
        )


def test_without_node_local_weights_the_load_crosses_the_link_after_the_graph_starts(rendered):
    """The former form (nodeLocalWeights: false): no prefetch, workers read the bucket, every replica's share crosses
    the Local Zone link after the graph is created; gb300-disagg's re-deploy then misses its 10-minute goal."""
    old = render_with("gb300-disagg", storage={"kind": "s3", "nodeLocalWeights": False})
    assert not [x for x in old.resources if x["name"] == "kimi-k3-serving-weights-prefetch"]
    cfg, graph = load_stack("gb300-disagg", ROOT)
    import dataclasses

    old_est = durations.estimates(cfg, dataclasses.replace(graph, node_local_weights=False))
    new_est = durations.estimates(cfg, graph)
    assert "Local Zone link" in old_est.load_what and "node-local nvme" in new_est.load_what
    goals = cp.goals()
    old_fresh = cp.critical_path(old.resources, old_est)
    new_fresh = cp.critical_path(rendered["gb300-disagg"].resources, new_est)
    assert new_fresh.total_seconds < old_fresh.total_seconds - 300
    old_again = cp.critical_path(old.resources, cp.redeploy(old_est), existing=True)
    new_again = cp.critical_path(rendered["gb300-disagg"].resources, cp.redeploy(new_est), existing=True)
    assert old_again.total_seconds > goals["redeploy_seconds"] >= new_again.total_seconds


@pytest.mark.parametrize("stack", STACKS)
def test_the_copy_is_off_the_fresh_path_and_a_redeploy_meets_its_goal(stack, rendered):
    r = rendered[stack]
    cfg, graph = load_stack(stack, ROOT)
    est = durations.estimates(cfg, graph)
    path = cp.critical_path(r.resources, est)
    by_name = {x["name"]: x for x in r.resources}
    ds = _prefetch(r)
    assert cp.duration(ds, est)[0] == est.prefetch_seconds > est.of("weights_prefetch_start")
    # It runs while the runtime image is pulled and the fabric preflight checks the nodes.
    assert path.finish[ds["urn"]] <= path.finish[by_name["kimi-k3-serving-image-prepull"]["urn"]] + est.of(
        "fabric_preflight"
    )
    assert "kimi-k3-serving-weights-prefetch" not in [s.name for s in path.steps]
    assert path.steps[-1].what.startswith("weights load (node-local nvme:")
    again = cp.critical_path(r.resources, cp.redeploy(est), existing=True)
    assert again.total_seconds <= cp.goals()["redeploy_seconds"]


def test_node_local_weights_only_where_the_raid_is_ours():
    from kimi_k3.config.storage import StorageConfig

    assert StorageConfig().resolved_node_local_weights("eks")
    assert not StorageConfig().resolved_node_local_weights("existing")
    assert not StorageConfig.model_validate({"nodeLocalWeights": False}).resolved_node_local_weights("eks")


@pytest.mark.parametrize("doc", ["docs/render-and-check.md", "docs/aws.md"])  # the first was README.md's
def test_documented_paths_are_what_render_prints(doc, rendered):
    """The before/after tables' current column and the gb200-disagg path block are the estimates as committed."""
    text = (ROOT / doc).read_text()
    for stack in ("gb200-disagg", "gb300-disagg") if doc == "docs/aws.md" else ("gb200-disagg",):
        cfg, graph = load_stack(stack, ROOT)
        block = "\n".join(cp.report(rendered[stack].resources, cfg, graph))
        assert f"```\n{block}\n```" in text, stack
    for stack in STACKS:
        cfg, graph = load_stack(stack, ROOT)
        est = durations.estimates(cfg, graph)
        fresh = cp.critical_path(rendered[stack].resources, est).total_seconds
        again = cp.critical_path(rendered[stack].resources, cp.redeploy(est), existing=True).total_seconds
        (row,) = [line for line in text.splitlines() if line.startswith(f"| `{stack}` | 1h10m27s")]
        goals = cp.goals()
        verdict = lambda t, g: "met" if t <= g else "MISSED"  # noqa: E731
        assert row.rstrip(" |").rsplit("| ", 1)[1] == (
            f"{cp.fmt(fresh)} ({verdict(fresh, goals['fresh_seconds'])}) / "
            f"{cp.fmt(again)} ({verdict(again, goals['redeploy_seconds'])})"
        ), row


def _listeners(port: int) -> list[str]:
    """IPv4 addresses listening on `port` (/proc/net/tcp, state 0A = LISTEN)."""
    import socket
    import struct

    out = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        ip, p = local.split(":")
        if state == "0A" and int(p, 16) == port:
            out.append(socket.inet_ntoa(struct.pack("<I", int(ip, 16))))
    return out


# /proc/self/mountinfo inside a prefetch pod (proc(5) format): the hostPath /mnt/k8s-disks/0/kimi-k3-weights bound at
# /node-local, first on nodeadm's RAID0 (setup-local-disks: /dev/md/kubernetes mounted at /mnt/k8s-disks/0), then on
# a node without the array (the directory kubelet created on the root volume).
ON_ARRAY = """2001 1890 0:312 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/x
2010 2001 9:127 /kimi-k3-weights /node-local rw,noatime - xfs /dev/md127 rw,attr2,inode64,sunit=1024
2011 2001 259:1 /var/lib/kubelet/pods/u/volumes/kubernetes.io~configmap/scripts /scripts ro - xfs /dev/nvme0n1p1 rw
"""
ON_ROOT_VOLUME = ON_ARRAY.replace(
    "9:127 /kimi-k3-weights /node-local rw,noatime - xfs /dev/md127",
    "259:1 /mnt/k8s-disks/0/kimi-k3-weights /node-local rw,noatime - xfs /dev/nvme0n1p1",
)


def test_the_prefetch_knows_whether_its_host_path_is_on_the_instance_store_array():
    assert wp.filesystem_path(ON_ARRAY, "/node-local") == ("/kimi-k3-weights", "/dev/md127")
    assert wp.filesystem_path(ON_ARRAY, "/node-local/abc") == ("/kimi-k3-weights/abc", "/dev/md127")
    assert wp.filesystem_path(ON_ROOT_VOLUME, "/node-local") == ("/mnt/k8s-disks/0/kimi-k3-weights", "/dev/nvme0n1p1")
    assert wp.filesystem_path(ON_ARRAY, "/etc") == ("/etc", "overlay")
    spaced = ON_ARRAY.replace("/kimi-k3-weights /node-local", "/a\\040b /node-local")
    assert wp.filesystem_path(spaced, "/node-local")[0] == "/a b"
    from types import SimpleNamespace

    from kimi_k3.graph.model import NodeFacts
    from kimi_k3.k8s.node_local import node_local_fs_path

    eks = SimpleNamespace(node_facts=NodeFacts())  # EKS hands the graph no local-disk facts: the instance store's
    assert node_local_fs_path(eks) == "/kimi-k3-weights", "what the pod sees on the array for recipes' host_path"


def test_the_pod_entrypoint_copies_nothing_off_the_array(tmp_path):
    """FS_PATH not where the tree is (a node without nodeadm's array: the host path on the root volume): the pod
    lays out links only, says so, and turns Ready on them; nothing is copied onto that filesystem."""
    src, data = _source(tmp_path)
    root = tmp_path / "node"
    root.mkdir()
    marker, out = _run_entrypoint(src, root, "/kimi-k3-weights")
    dest = root / REV / "moonshotai" / "Kimi-K3"
    assert marker.read_text() == "links\n" and all((dest / rel).is_symlink() for rel in data)
    assert "NOT COPYING" in out and "not /kimi-k3-weights" in out


def test_a_peer_is_bounded_in_transfers_and_stalls(tmp_path, monkeypatch):
    import socket

    src, data = _source(tmp_path)
    dest, local = _local(tmp_path, src, "d")
    files = local.files
    wp.prepare_tree(src, dest, files, local)
    wp.copy_from_source(src, dest / "config.json", "config.json", *files["config.json"])
    local.mark("config.json")
    monkeypatch.setattr(wp, "MAX_SERVING", 0)  # every slot taken
    monkeypatch.setattr(wp, "SOCKET_TIMEOUT", 0.3)
    port = _free_port()
    server = wp.serve(local, "127.0.0.1", port)
    try:
        assert _get(port, f"/sha256/{files['config.json'][1]}")[0] == 503
        other, olocal = _local(tmp_path, src, "o")
        wp.prepare_tree(src, other, files, olocal)
        assert wp.ask_peer("127.0.0.1", port, other / "config.json", "config.json", *files["config.json"]) == (
            "busy",
            None,
        )
        assert (other / "config.json").is_symlink(), "busy is 'ask again', not a failure and not a copy"
        stalled = socket.create_connection(("127.0.0.1", port), timeout=5)  # sends nothing
        t0 = time.monotonic()
        assert stalled.recv(1) == b"" and time.monotonic() - t0 < 3, "a stalled client is dropped"
        stalled.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("stack", STACKS)
def test_the_gpu_nodes_ask_nodeadm_for_the_array_the_prefetch_writes_to(stack, rendered):
    """nodeadm mounts instance-store disks only when the NodeConfig names a strategy (awslabs/amazon-eks-ami
    nodeadm/internal/system/local_disk.go: empty strategy = "Not configuring local disks!"); setup-local-disks mounts
    a RAID0/RAID10 array at <mountPath or /mnt/k8s-disks>/0, while `Mount` puts each disk at /1, /2, ... So the
    launch template's NodeConfig must ask for an array whose mount point is the prefetch's."""
    import base64
    import email

    import yaml

    (lt,) = [
        x
        for x in rendered[stack].resources
        if x["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and x["name"].endswith("-gpu-lt")
    ]
    msg = email.message_from_string(base64.b64decode(lt["inputs"]["userData"]).decode())
    (part,) = [p for p in msg.walk() if p.get_content_type() == "application/node.eks.aws"]
    docs = [d for d in yaml.safe_load_all(part.get_payload()) if d and d.get("kind") == "NodeConfig"]
    (storage,) = [d["spec"]["instance"]["localStorage"] for d in docs]
    assert storage["strategy"] in ("RAID0", "RAID10")
    nvme = kimi_k3_data.recipe_file("facts/storage.yaml")["nvme"]
    assert storage.get("mountPath", "/mnt/k8s-disks").rstrip("/") + "/0" == nvme["array_mount_point"]
    from types import SimpleNamespace

    from kimi_k3.graph.model import NodeFacts

    eks = SimpleNamespace(node_facts=NodeFacts())
    assert nvme["host_path"] == nvme["array_mount_point"] + node_local.node_local_fs_path(eks)
