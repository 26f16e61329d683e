"""Plots of the performance model (matplotlib, ~2 s each): in the perf lane to keep `make test` fast.
They need no aiconfigurator, so they run whether or not the `perf` extra is installed."""

from __future__ import annotations

import pytest

from kimi_k3.commands import main as cli


@pytest.mark.parametrize("stack", ["gb200-disagg", "gb300"])
def test_pareto_plot_per_stack(stack, tmp_path, capsys):
    path = tmp_path / "pareto.png"
    assert cli.main(["plan", stack, "--pareto", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


def test_mocker_profile_file_is_the_mockers_npz(tmp_path, capsys):
    import numpy as np

    path = tmp_path / "profile.npz"
    assert cli.main(["plan", "gb300-disagg", "--mocker-profile", str(path)]) == 0
    with np.load(path) as data:
        # dynamo/mocker 1.6.1 utils/planner_profiler_perf_data_converter.py is_mocker_format_npz
        assert {
            "prefill_isl",
            "prefill_ttft_ms",
            "decode_active_kv_tokens",
            "decode_context_length",
            "decode_itl",
        } <= set(data.keys())
        assert data["decode_itl"].shape == (len(data["decode_active_kv_tokens"]), len(data["decode_context_length"]))


@pytest.mark.parametrize("stack", ["gb300-disagg", "gb200"])
def test_cost_plot_per_stack_has_both_bases_and_the_api_line(stack, tmp_path, capsys, monkeypatch):
    import matplotlib.pyplot as plt

    from kimi_k3.commands import plan_perf

    figures = []
    real_savefig = plt.Figure.savefig
    monkeypatch.setattr(
        plt.Figure, "savefig", lambda self, *a, **k: (figures.append(self), real_savefig(self, *a, **k))
    )
    path = tmp_path / "cost.png"
    assert cli.main(["plan", stack, "--cost-plot", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    (fig,) = figures
    titles = [ax.get_title() for ax in fig.axes]
    assert any(plan_perf.BASIS_LABELS["gpus_used"] in t for t in titles)
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(label.startswith("API ") for label in labels) and any("8k context" in label for label in labels)
