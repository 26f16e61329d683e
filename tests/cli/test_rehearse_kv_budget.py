"""`kimi-k3 rehearse STACK --kv-budget-gib G` (issue 21): every mocker's KV cache sized by the planner from G GiB per
GPU, as `kimi-k3 plan --kv-budget-gib`; a budget past what the GPU has left after weights is refused before anything
is created; the flag survives the re-exec into the network namespace. The capacity's effect on the hit rate:
tests/live/test_trace_kv_capacity_live.py."""

from __future__ import annotations

import argparse
import sys

from kimi_k3.blueprint import load_stack
from kimi_k3.commands import rehearse as cmd
from kimi_k3.commands.main import main
from kimi_k3.graph.role_plans import role_kv_plans
from kimi_k3.rehearsal import processes, reexec
from kimi_k3.sizing.memory import plan_role


def test_budget_over_the_room_is_refused_before_anything(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(processes.VENV_ENV, sys.executable)
    out = tmp_path / "out"
    code = main(["rehearse", "gb300", "--out", str(out), "--host-network", "--kv-budget-gib", "500"])
    text = "".join(capsys.readouterr())
    assert code == 2, text
    assert (
        "--kv-budget-gib 500: more than the 28.18 GiB per GPU" in text and "allowed: a number > 0 and <= 28.18" in text
    )
    assert not out.exists()


def test_budget_sizes_every_role_as_plan_does():
    _, graph = load_stack("gb300-disagg")
    plans = role_kv_plans(graph, 0.5)
    for r in graph.roles:
        want = plan_role(
            graph.platform.name,
            r.tp,
            kv_cache_dtype=r.kv_cache_dtype,
            kv_budget_gib=0.5,
            max_model_len=r.max_model_len,
            gpu_memory_utilization=r.gpu_memory_utilization,
            prefix_caching=plans[r.key].prefix_caching,
            dcp=r.dcp,
        )
        assert plans[r.key].num_blocks == want.num_blocks < role_kv_plans(graph)[r.key].num_blocks


def test_budget_survives_the_reexec():
    parser = argparse.ArgumentParser()
    cmd.register(parser.add_subparsers())
    args = cmd.RehearseOptions.from_values(parser.parse_args(["rehearse", "gb300", "--kv-budget-gib", "0.5"]))
    again = parser.parse_args(["rehearse", *reexec.command_line(args)])
    assert again.kv_budget_gib == 0.5
