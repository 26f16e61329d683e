"""The stack is resolved once into a frozen Blueprint (issue 26): `kimi-k3 plan STACK` and `kimi-k3 render STACK`
each read the stack file, parse its config, build the serving graph and plan the GPU nodes once."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter

import pytest
from conftest import ROOT

from kimi_k3.aws import nodes as aws_nodes
from kimi_k3.commands.main import main
from kimi_k3.config import stack as config_stack
from kimi_k3.config import stack_files
from kimi_k3.graph import build

STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
# What resolving a stack costs, wherever a caller imported it from: each must run once per command.
RESOLVERS = {
    "read_stack_config": (stack_files, "read_stack_config"),
    "parse_stack_config": (config_stack, "parse_stack_config"),
    "build_graph": (build, "build_graph"),
    "gpu_node_plan": (aws_nodes, "gpu_node_plan"),
}


def _holders(attr: str, real):
    """Every loaded module holding `real` as `attr`, or a counting wrapper of it (a module imported while a test ran
    bound that test's wrapper)."""
    for mod in list(sys.modules.values()):
        # the module's own dict: getattr() ran the SDKs' lazy-module __getattr__ (~1 min of imports per walk)
        held = getattr(mod, "__dict__", {}).get(attr)
        if held is real or getattr(held, "counted_real", None) is real:
            yield mod


@pytest.fixture
def calls() -> Counter:
    """Counts calls to each resolver, patched in every loaded module that holds it (`from x import f` included)."""
    counts: Counter = Counter()
    reals = {key: getattr(module, attr) for key, (module, attr) in RESOLVERS.items()}
    reals = {k: getattr(f, "counted_real", f) for k, f in reals.items()}

    def wrap(key: str, real):
        def counted(*args, **kwargs):
            counts[key] += 1
            return real(*args, **kwargs)

        counted.counted_real = real
        return counted

    for key, (_, attr) in RESOLVERS.items():
        wrapper = wrap(key, reals[key])
        for mod in _holders(attr, reals[key]):
            setattr(mod, attr, wrapper)
    yield counts
    for key, (_, attr) in RESOLVERS.items():  # modules imported during the test hold a wrapper too: all restored
        for mod in _holders(attr, reals[key]):
            setattr(mod, attr, reals[key])


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize("stack", STACKS)
def test_plan_resolves_the_stack_once(stack, calls, capsys):
    code, out = _run(["plan", stack], capsys)
    assert code == 0, out
    assert "Kimi K3 plan: stack" in out and "[stack]" in out  # the whole table, rollout and bounds included
    # The GPU node group is planned once in eks mode, not at all on an existing cluster (cks-gb300-disagg).
    eks = "mode: eks" in (ROOT / f"Pulumi.{stack}.yaml").read_text()
    assert dict(calls) == {
        "read_stack_config": 1,
        "parse_stack_config": 1,
        "build_graph": 1,
        **({"gpu_node_plan": 1} if eks else {}),
    }


def test_plan_json_resolves_the_stack_once(calls, capsys):
    code, out = _run(["plan", "gb300-disagg", "--json"], capsys)
    assert code == 0, out
    assert json.loads(out)["rollout"]["graph_nodes"] > 0
    assert calls["build_graph"] == 1 and calls["read_stack_config"] == 1


def test_render_resolves_the_stack_once_in_the_program(calls, capsys, tmp_path):
    """The program (__main__.py under the mock engine) resolves it; figures.json and the critical path read that."""
    code, out = _run(["render", "gb300-disagg", "--out", str(tmp_path)], capsys)
    assert code == 0, out
    assert "critical path" in out.lower()
    assert json.loads((tmp_path / "figures.json").read_text())["gpus"] > 0
    # render checks the stack file is readable before it runs the program; the program reads what it is given
    assert calls["parse_stack_config"] == 1
    assert calls["build_graph"] == 1
    assert calls["gpu_node_plan"] == 1


def test_the_blueprint_is_frozen():
    from kimi_k3.blueprint import Blueprint

    bp = Blueprint.for_stack("gb300-disagg", ROOT)
    for field in ("graph", "plan", "gpu_nodes", "addons", "durations"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(bp, field, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bp.graph.roles[0].max_num_seqs = 1
    assert isinstance(bp.addons, tuple) and isinstance(bp.subnets, tuple)
