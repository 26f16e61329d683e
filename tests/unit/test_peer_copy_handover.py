"""A file its preferred reader copies from the bucket goes, for the peers asking it, from 202 (reading) to 200 (a
verified copy), never through a 404: a 404 sends the asker to the bucket at once (weights_prefetch.from_peer), so a
404 between the end of the copy and its VERIFIED record reads that shard across the Local Zone link twice.

CI caught it (stop 33, test_pods_replaced_together_read_the_new_revision_from_the_bucket_once read one 1 MB shard
twice under load). Here the record is made slow on purpose (a VERIFIED write behind a busy disk) so the window is
wide, and a real peer asks over HTTP as the shipped program does."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

from kimi_k3.pods import weights_prefetch as wp

REV = "3" * 40


def _bucket(tmp_path: Path, n: int) -> tuple[Path, dict[str, bytes]]:
    src = tmp_path / "bucket" / f"moonshotai/Kimi-K3@{REV}"
    data = {f"model-{i:05d}.safetensors": bytes([i]) * (4096 + i) for i in range(n)}
    for rel, blob in data.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(blob)
    (src / wp.MANIFEST_DIR).mkdir()
    files = {rel: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for rel, b in data.items()}
    (src / wp.MANIFEST_DIR / "manifest-0-of-1.json").write_text(json.dumps({"revision": REV, "files": files}))
    return src, data


def test_a_peer_waiting_on_a_file_is_served_it_not_sent_to_the_bucket(tmp_path, monkeypatch):
    src, data = _bucket(tmp_path, 4)
    files = wp.read_manifest(src, REV)
    owner_ip, asker_ip = "127.0.0.2", "127.0.0.3"
    dest = tmp_path / "owner" / REV / "repo"
    dest.mkdir(parents=True)
    local = wp.Local(dest.parent / wp.VERIFIED, dest, files)
    wp.prepare_tree(src, dest, files, local)
    server = wp.serve(local, owner_ip, 0)  # the kernel's free port on the owner's own address: no probe, no race
    port = server.server_address[1]
    real_mark = wp.Local.mark

    def slow_mark(self, rel):
        time.sleep(0.3)  # the VERIFIED record behind a busy disk
        real_mark(self, rel)

    monkeypatch.setattr(wp.Local, "mark", slow_mark)
    whys: dict[str, str] = {}
    asker = tmp_path / "asker"
    asker.mkdir()

    def ask(rel: str) -> None:
        size, digest = files[rel]
        whys[rel] = wp.from_peer(
            owner_ip,
            port,
            asker / rel,
            rel,
            size,
            digest,
            peer_wait_seconds=20,
            stall_seconds=10,
            poll_seconds=0.01,
            timeout=5,
        )

    askers = [threading.Thread(target=ask, args=(rel,)) for rel in files]
    try:
        for t in askers:
            t.start()
        # The owner is the preferred reader of every file (the asker is not among its peers: it never asks back).
        res = wp.fetch_all(
            src,
            dest,
            local,
            owner_ip,
            [owner_ip],
            port,
            threads=2,
            peer_wait_seconds=20,
            stall_seconds=10,
            poll_seconds=0.01,
            timeout=5,
        )
        for t in askers:
            t.join(30)
    finally:
        server.shutdown()
        server.server_close()
    assert not res.failed and res.from_source == sum(map(len, data.values()))
    assert whys == dict.fromkeys(files, ""), f"sent to the bucket although its preferred reader copied it: {whys}"
    for rel, blob in data.items():
        assert (asker / rel).read_bytes() == blob
