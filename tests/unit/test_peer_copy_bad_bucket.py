"""A bucket whose bytes are not the manifest's: the prefetch pod ends with one line naming the file, no traceback."""

from __future__ import annotations

import time

from test_peer_copy_distributed import (  # noqa: F401
    REV1,
    checkpoint,
    cluster,  # noqa: F401  (fixture)
    write_revision,
)


def test_wrong_bytes_in_the_bucket_fail_with_the_file_named(tmp_path, cluster):
    data = checkpoint(7, n=3, size=1 << 16)
    d = write_revision(tmp_path / "bucket", REV1, data)
    bad = "model-00001-of-00003.safetensors"
    blob = bytearray((d / bad).read_bytes())
    blob[100] ^= 0xFF  # same size, other bytes: a push after the manifest was written
    (d / bad).write_bytes(bytes(blob))
    (node,) = cluster(1)
    node.start(d, REV1, [node.ip], 1)
    t0 = time.monotonic()
    while node.proc.poll() is None and time.monotonic() - t0 < 30:
        time.sleep(0.05)
    out = node.output()
    assert node.proc.returncode == 1, out
    assert "Traceback" not in out, out
    assert "FAILED: 1 of" in out and bad in out and "re-run the fetchers" in out, out
    assert not node.marker.exists()
