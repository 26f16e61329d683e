"""The download Job's verification step: fails unless the cache holds the pinned commit's bytes, by content (sha256
for LFS files, the git blob id for the others, as the Hub reports them), never by size alone; with storage kind s3
it reads the fetchers' manifests and failure records instead of hashing the bucket."""

from __future__ import annotations

import hashlib
import json

import pytest

from kimi_k3.pods import verify_checkpoint as vc

REV = "ab" * 20
BLOBS = {"model-00001-of-00002.safetensors": b"x" * 11, "model-00002-of-00002.safetensors": b"y" * 7}


def _index() -> bytes:
    return json.dumps(
        {
            "weight_map": {
                "a.weight": "model-00001-of-00002.safetensors",
                "b.weight": "model-00002-of-00002.safetensors",
                "c.weight": "model-00002-of-00002.safetensors",
            }
        }
    ).encode()


def _hub_entry(blob: bytes, lfs: bool) -> dict:
    return {
        "size": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest() if lfs else None,
        "blob_id": hashlib.sha1(b"blob %d\0" % len(blob) + blob).hexdigest(),
    }


HUB = {**{n: _hub_entry(b, True) for n, b in BLOBS.items()}, vc.INDEX: _hub_entry(_index(), False)}


def hub(entries=HUB):
    return lambda paths: {p: entries[p] for p in paths if p in entries}


@pytest.fixture
def checkpoint(tmp_path):
    (tmp_path / vc.INDEX).write_bytes(_index())
    for name, blob in BLOBS.items():
        (tmp_path / name).write_bytes(blob)
    (tmp_path / ".cache" / "huggingface").mkdir(parents=True)
    (tmp_path / ".cache" / "huggingface" / "x.metadata").write_text("hf download's own records")
    return tmp_path


def test_complete_checkpoint_passes_and_yields_its_manifest(checkpoint):
    problems, files = vc.verify_hashed(checkpoint, hub())
    assert problems == []
    assert files == {n: (len(b), hashlib.sha256(b).hexdigest()) for n, b in {**BLOBS, vc.INDEX: _index()}.items()}


def test_missing_shard_fails(checkpoint):
    (checkpoint / "model-00002-of-00002.safetensors").unlink()
    assert vc.verify_hashed(checkpoint, hub())[0] == ["missing: model-00002-of-00002.safetensors"]


def test_truncated_shard_fails(checkpoint):
    (checkpoint / "model-00001-of-00002.safetensors").write_bytes(b"x" * 5)
    assert vc.verify_hashed(checkpoint, hub())[0] == [
        "wrong size: model-00001-of-00002.safetensors is 5 bytes, expected 11"
    ]


def test_same_size_other_bytes_fail(checkpoint):
    """What size checks let through: a shard of another commit (a moved branch) at the same size."""
    (checkpoint / "model-00001-of-00002.safetensors").write_bytes(b"z" * 11)
    (problem,) = vc.verify_hashed(checkpoint, hub())[0]
    assert problem.startswith("wrong content: model-00001-of-00002.safetensors has sha256")
    (checkpoint / "model-00001-of-00002.safetensors").write_bytes(BLOBS["model-00001-of-00002.safetensors"])
    (checkpoint / vc.INDEX).write_bytes(_index().replace(b'"a.weight"', b'"A.weight"'))
    (problem,) = vc.verify_hashed(checkpoint, hub())[0]
    assert problem.startswith(f"wrong content: {vc.INDEX} has git blob id"), "non-LFS files by their git id"


def test_missing_index_fails(tmp_path):
    assert vc.verify_hashed(tmp_path, hub())[0] == [f"missing: {vc.INDEX}"]


def test_shard_unknown_to_the_hub_fails(checkpoint):
    only_first = {k: v for k, v in HUB.items() if k != "model-00002-of-00002.safetensors"}
    assert vc.verify_hashed(checkpoint, hub(only_first))[0] == [
        "not on the Hub at this revision: model-00002-of-00002.safetensors"
    ]


def test_main_writes_manifest_and_marker_and_exits_nonzero_otherwise(checkpoint, monkeypatch, capsys):
    monkeypatch.setenv("MODEL_PATH", str(checkpoint))
    monkeypatch.setenv("MODEL_REPO", "moonshotai/Kimi-K3")
    monkeypatch.setenv("MODEL_REVISION", REV)
    monkeypatch.setattr(vc, "_hub_files", lambda repo, rev, token: hub())
    assert vc.main() == 0 and (checkpoint / vc.MARKER).read_text() == f"{REV}\n"
    problems, files = vc.read_manifest(checkpoint, REV)
    assert problems == [] and files == vc.verify_hashed(checkpoint, hub())[1], "the node-local copy reads this"
    from kimi_k3.pods import weights_prefetch as wp

    assert wp.read_manifest(checkpoint, REV) == files, "the pods read the manifest the Job wrote, by the same rules"
    (checkpoint / vc.MARKER).unlink()
    (checkpoint / "model-00001-of-00002.safetensors").unlink()
    assert vc.main() == 1
    assert "missing: model-00001-of-00002.safetensors" in capsys.readouterr().out
    assert not (checkpoint / vc.MARKER).exists()


def _share(d, i, n, names, revision=REV, blobs=None):
    blobs = blobs or {**BLOBS, vc.INDEX: _index()}
    (d / vc.MANIFEST_DIR).mkdir(exist_ok=True)
    (d / vc.MANIFEST_DIR / f"manifest-{i}-of-{n}.json").write_text(
        json.dumps(
            {
                "revision": revision,
                "share": i,
                "shares": n,
                "files": {f: {"size": len(blobs[f]), "sha256": hashlib.sha256(blobs[f]).hexdigest()} for f in names},
            }
        )
    )


def test_s3_waits_for_every_share_and_asks_the_hub_once(checkpoint, capsys):
    """Storage kind s3: the Job starts while the fetchers still upload; it polls the (read-only) mount until every
    share's manifest is there and every object has the manifest's size, and fails at the deadline with what is
    still missing."""
    _share(checkpoint, 0, 2, ["model-00001-of-00002.safetensors", vc.INDEX])
    calls, now = [], [0.0]

    def asked(paths):
        calls.append(list(paths))
        return hub()(paths)

    def sleep(seconds):  # the second fetcher finishes during the second wait
        now[0] += seconds
        if now[0] >= 2 * vc.POLL_SECONDS:
            _share(checkpoint, 1, 2, ["model-00002-of-00002.safetensors"])

    assert vc.verify_until(checkpoint, asked, REV, 3600, sleep=sleep, clock=lambda: now[0]) == []
    assert len(calls) == 1, "the Hub is asked once; only the mount is polled"
    assert "waiting for the checkpoint" in capsys.readouterr().out
    (checkpoint / vc.MANIFEST_DIR / "manifest-1-of-2.json").unlink()
    now[0] = 0.0
    late = vc.verify_until(
        checkpoint, hub(), REV, 60, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0]
    )
    assert late and late[0].startswith("waiting for the fetchers' manifests")


def test_s3_a_fetcher_failure_fails_at_once_naming_it(checkpoint):
    (checkpoint / vc.MANIFEST_DIR).mkdir()
    (checkpoint / vc.MANIFEST_DIR / "failed-2-of-4.txt").write_text(
        "fetcher 3/4 failed (exit 1) at: fetch_checkpoint.py\n401 Client Error: Unauthorized"
    )
    slept = []
    problems = vc.verify_until(checkpoint, hub(), REV, 8 * 3600, sleep=slept.append)
    assert not slept, "no polling for hours: the reason is known"
    assert (
        problems[0].startswith(
            "a fetcher failed: failed-2-of-4.txt: fetcher 3/4 failed (exit 1) at: fetch_checkpoint.py"
        )
        and "Unauthorized" in problems[0]
    )
    for i in range(4):
        _share(checkpoint, i, 4, [n for k, n in enumerate(sorted(HUB)) if k % 4 == i])
    assert vc.verify_until(checkpoint, hub(), REV, 0) == [], "a later success of that share supersedes it"


def test_s3_manifest_of_another_revision_or_other_bytes_fails(checkpoint):
    _share(checkpoint, 0, 1, sorted(HUB), revision="cd" * 20)
    (problem,) = vc.verify_manifest(checkpoint, hub(), REV)[0]
    assert "of revision" in problem
    other = {**BLOBS, vc.INDEX: _index(), "model-00001-of-00002.safetensors": b"z" * 11}
    _share(checkpoint, 0, 1, sorted(HUB), blobs=other)
    problems, final = vc.verify_manifest(checkpoint, hub(), REV)
    assert final and problems[0].startswith("wrong content: the manifest lists model-00001-of-00002.safetensors")


def test_read_only_volume_gets_no_marker(checkpoint, monkeypatch):
    _share(checkpoint, 0, 1, sorted(HUB))
    monkeypatch.setenv("MODEL_PATH", str(checkpoint))
    monkeypatch.setenv("MODEL_REPO", "moonshotai/Kimi-K3")
    monkeypatch.setenv("MODEL_REVISION", REV)
    monkeypatch.setenv("VERIFY_MODE", "manifest")
    monkeypatch.setenv("VERIFY_WRITE_MARKER", "0")
    monkeypatch.setattr(vc, "_hub_files", lambda repo, rev, token: hub())
    assert vc.main() == 0 and not (checkpoint / vc.MARKER).exists()
