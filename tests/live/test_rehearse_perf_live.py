"""`kimi-k3 rehearse` takes each mocker's step timing from the stack's calibrated performance model (real
processes; marked `rehearse`, run by `make test-rehearse` like tests/live/test_rehearse_live.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.rehearse

PYTHON = Path(os.environ.get("KIMI_K3_REHEARSE_PYTHON", ROOT / ".venv-rehearse" / "bin" / "python"))


def test_mockers_run_on_the_performance_model(tmp_path):
    if not PYTHON.is_file():
        pytest.fail(f"{PYTHON} missing: run `make test-rehearse` (it builds .venv-rehearse first)")
    out = tmp_path / "gb300-disagg"
    result = subprocess.run(
        [sys.executable, "-m", "kimi_k3", "rehearse", "gb300-disagg", "--out", str(out), "--no-load"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["timing"] == "perf model" and report["smoke"]["passed"]
    profile = out / "perf_profile.npz"
    for role in report["roles"].values():
        args = role["mocker_args"]
        assert args[args.index("--planner-profile-data") + 1] == str(profile)
    import numpy as np

    from kimi_k3.blueprint import load_stack
    from kimi_k3.rehearsal import plan as rehearsal

    with np.load(profile) as data:  # the file the mockers read is the model's profile for this stack
        expected = rehearsal.perf_profile(load_stack("gb300-disagg")[1])
        assert data["prefill_ttft_ms"].tolist() == pytest.approx(expected["prefill_ttft_ms"])
        assert data["decode_itl"].shape == (
            len(expected["decode_active_kv_tokens"]),
            len(expected["decode_context_length"]),
        )
    assert "the calibrated performance model" in (out / "report.md").read_text()
