"""`kimi-k3 plan` as a reader meets it: its terms explained (in the output and --help), and a plot titled with
the stack whose legend never covers data and whose roles stay distinguishable when their curves coincide."""

from __future__ import annotations

import pytest

from kimi_k3 import blueprint
from kimi_k3.commands import plan_plots
from kimi_k3.commands.main import main
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import memory


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _check_figure(fig, title_part: str):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert title_part in fig._suptitle.get_text()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert ax.get_legend() is None, "no legend inside an axes"
        assert not _overlaps(box, ax.get_window_extent(renderer)), "the legend covers an axes"
    return [t.get_text() for t in legend.get_texts()]


def test_plot_title_names_the_stack_and_roles_with_one_curve_share_it():
    stack = blueprint.stack_plan("gb300-disagg")  # prefill and decode: the same TP8 topology, the same curve
    fig = plan_plots.plan_figure(stack, "stack gb300-disagg")
    labels = _check_figure(fig, "gb300-disagg")
    assert labels == ["prefill = decode: gb300 TP8 (same curve)"]
    assert all(len(ax.get_lines()) == 1 for ax in fig.axes)


def test_plot_roles_with_different_curves_are_drawn_distinctly():
    roles = [
        memory.RoleSpec(
            name=n,
            gpu="gb300",
            tp=tp,
            nodes_per_replica=tp // 4,
            replicas=1,
            gpu_memory_utilization=0.9,
            kv_cache_dtype="fp8",
            max_model_len=1048576,
        )
        for n, tp in (("prefill", 8), ("decode", 16), ("extra", 12), ("fourth", 24))
    ]
    pricing = planner.Pricing(instance_hour_usd=42.0, gpus_per_instance=4, source="test price", as_of="2026-10")
    stack = planner.plan_stack(roles, pricing)
    fig = plan_plots.plan_figure(stack, "ad hoc")
    labels = _check_figure(fig, "ad hoc")
    assert len(labels) == 4 and len(set(labels)) == 4
    for ax in fig.axes:
        styles = {(line.get_linestyle(), line.get_marker()) for line in ax.get_lines()}
        assert len(styles) == 4


def test_plan_explains_its_terms(capsys):
    assert main(["plan", "gb300-disagg"]) == 0
    out = capsys.readouterr().out
    assert "KV capacity (vLLM log)" not in out  # the old row that read as a contradiction with '3 concurrent @ 1M'
    assert "KV cache size, vLLM's log line" in out and "see terms" in out
    assert "requests at once, per replica" in out and "\nterms:\n" in out
    assert "do not contradict each other" in out
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "terms:" in capsys.readouterr().out
