"""The download Job's verification step: fails unless every indexed shard is present at the Hub's size."""
from __future__ import annotations

import json

import pytest

from kimi_k3 import verify_checkpoint as vc

SHARDS = {"model-00001-of-00002.safetensors": 11, "model-00002-of-00002.safetensors": 7}


@pytest.fixture
def checkpoint(tmp_path):
    index = {"weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                            "b.weight": "model-00002-of-00002.safetensors",
                            "c.weight": "model-00002-of-00002.safetensors"}}
    (tmp_path / vc.INDEX).write_text(json.dumps(index))
    for name, size in SHARDS.items():
        (tmp_path / name).write_bytes(b"x" * size)
    return tmp_path


def hub(sizes):
    return lambda paths: {p: sizes[p] for p in paths if p in sizes}


def test_complete_checkpoint_passes(checkpoint):
    assert vc.verify(checkpoint, hub(SHARDS)) == []


def test_missing_shard_fails(checkpoint):
    (checkpoint / "model-00002-of-00002.safetensors").unlink()
    assert vc.verify(checkpoint, hub(SHARDS)) == ["missing: model-00002-of-00002.safetensors"]


def test_truncated_shard_fails(checkpoint):
    (checkpoint / "model-00001-of-00002.safetensors").write_bytes(b"x" * 5)
    assert vc.verify(checkpoint, hub(SHARDS)) == [
        "wrong size: model-00001-of-00002.safetensors is 5 bytes, expected 11"]


def test_missing_index_fails(tmp_path):
    assert vc.verify(tmp_path, hub(SHARDS)) == [f"missing: {vc.INDEX}"]


def test_shard_unknown_to_the_hub_fails(checkpoint):
    only_first = {"model-00001-of-00002.safetensors": 11}
    assert vc.verify(checkpoint, hub(only_first)) == [
        "not on the Hub at this revision: model-00002-of-00002.safetensors"]


def test_main_marks_a_verified_cache_and_exits_nonzero_otherwise(checkpoint, monkeypatch, capsys):
    monkeypatch.setenv("MODEL_PATH", str(checkpoint))
    monkeypatch.setenv("MODEL_REPO", "moonshotai/Kimi-K3")
    monkeypatch.setenv("MODEL_REVISION", "abc123")
    monkeypatch.setattr(vc, "_hub_sizes", lambda repo, rev, token: hub(SHARDS))
    assert vc.main() == 0 and (checkpoint / vc.MARKER).read_text() == "abc123\n"
    (checkpoint / vc.MARKER).unlink()
    (checkpoint / "model-00001-of-00002.safetensors").unlink()
    assert vc.main() == 1
    assert "missing: model-00001-of-00002.safetensors" in capsys.readouterr().out
    assert not (checkpoint / vc.MARKER).exists()


def test_waits_for_weights_arriving_from_outside_and_asks_the_hub_once(checkpoint, capsys):
    """Storage kind s3: the Job starts while the fetchers still upload; it polls the (read-only) mount until every
    shard is there at the Hub's size, and fails at the deadline with what is still missing."""
    second = checkpoint / "model-00002-of-00002.safetensors"
    second.unlink()
    calls, now = [], [0.0]

    def asked(paths):
        calls.append(list(paths))
        return hub(SHARDS)(paths)

    def sleep(seconds):  # the fetcher's upload lands during the second wait
        now[0] += seconds
        if now[0] >= 2 * vc.POLL_SECONDS:
            second.write_bytes(b"x" * 7)

    assert vc.verify_until(checkpoint, asked, 3600, sleep=sleep, clock=lambda: now[0]) == []
    assert len(calls) == 1, "the Hub is asked once; only the mount is polled"
    assert "waiting for the checkpoint" in capsys.readouterr().out
    second.unlink()
    now[0] = 0.0
    late = vc.verify_until(checkpoint, hub(SHARDS), 60, sleep=lambda s: now.__setitem__(0, now[0] + s),
                           clock=lambda: now[0])
    assert late == ["missing: model-00002-of-00002.safetensors"]


def test_read_only_volume_gets_no_marker(checkpoint, monkeypatch):
    monkeypatch.setenv("MODEL_PATH", str(checkpoint))
    monkeypatch.setenv("MODEL_REPO", "moonshotai/Kimi-K3")
    monkeypatch.setenv("MODEL_REVISION", "abc123")
    monkeypatch.setenv("VERIFY_WRITE_MARKER", "0")
    monkeypatch.setattr(vc, "_hub_sizes", lambda repo, rev, token: hub(SHARDS))
    assert vc.main() == 0 and not (checkpoint / vc.MARKER).exists()
