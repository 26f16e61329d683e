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
