"""The SLA planner's inputs we generate (kimi-k3:serving.autoscaling), read by Dynamo 1.6.1's own code: its
PlannerConfig model validates planner_config.json, and its profile loader (dynamo/planner/monitoring/perf_metrics.py,
_convert_profiling_data_to_fpms: what the planner runs at bootstrap on profile_results_dir) turns our JSON files into
the ForwardPassMetrics its performance model is seeded with.

Marked `rehearse`: it needs ai-dynamo from .venv-rehearse (`make test-rehearse`). Dynamo's `dynamo/planner/__init__.py`
imports the whole planner, whose performance model needs aisimulate_core (PyPI's `aisimulate` is a stub that downloads
from elsewhere at install time) and scikit-learn (not an ai-dynamo requirement): the script below loads the planner's
config and loader modules themselves, unchanged, without running that package __init__."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, STACKS, stack_config

from kimi_k3.aws import nodes as aws
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.graph.build import build_graph

pytestmark = pytest.mark.rehearse

PYTHON = Path(os.environ.get("KIMI_K3_REHEARSE_PYTHON", ROOT / ".venv-rehearse" / "bin" / "python"))

READ_WITH_DYNAMO = r"""
import json, pathlib, sys, types
import dynamo
root = next(pathlib.Path(p) / "planner" for p in dynamo.__path__ if (pathlib.Path(p) / "planner").is_dir())
package = types.ModuleType("dynamo.planner")
package.__path__ = [str(root)]
sys.modules["dynamo.planner"] = package
from dynamo.planner.config.defaults import SubComponentType
from dynamo.planner.config.planner_config import PlannerConfig
from dynamo.planner.monitoring.perf_metrics import _convert_profiling_data_to_fpms

config = PlannerConfig.from_config_arg(sys.argv[1] + "/planner_config.json")
fpms = {}
for kind in (SubComponentType.PREFILL, SubComponentType.DECODE):
    try:
        got = _convert_profiling_data_to_fpms(sys.argv[1] + "/profiling_results", kind)
    except FileNotFoundError:
        got = None
    fpms[kind.value] = None if got is None else [
        [f.wall_time, f.scheduled_requests.num_prefill_requests, f.scheduled_requests.sum_prefill_tokens,
         f.scheduled_requests.num_decode_requests, f.scheduled_requests.sum_decode_kv_tokens] for f in got]
print(json.dumps({"config": config.model_dump(mode="json"), "mins": list(config.active_min_endpoints()),
                  "scaling": config.scaling_enabled(), "fpms": fpms,
                  "version": __import__("importlib.metadata").metadata.version("ai-dynamo")}))
"""


@pytest.fixture(scope="module", autouse=True)
def rehearsal_venv():
    if not PYTHON.is_file():
        pytest.fail(f"{PYTHON} missing: run `make test-rehearse` (it builds .venv-rehearse first)")


def graph_with_planner(stack: str):
    """The stack with every node of its Capacity Block joined and the planner on (TTFT 30 s, ITL 50 ms)."""
    config, secrets = stack_config(stack)
    plain = build_graph(stack, parse_stack_config(config, secrets))
    cluster = json.loads(config["kimi-k3:cluster"])
    plan = aws.gpu_node_plan(parse_stack_config(config, secrets), plain.platform.name, plain.nodes)
    cluster["gpuNodes"]["desiredNodes"] = plan.max_nodes
    config, secrets = stack_config(
        stack, cluster=cluster, serving={"autoscaling": {"enabled": True, "ttftMs": 30000, "itlMs": 50}}
    )
    return build_graph(stack, parse_stack_config(config, secrets))


@pytest.mark.parametrize("stack", STACKS)
def test_dynamo_planner_reads_what_we_generate(stack, tmp_path):
    a = graph_with_planner(stack).autoscaling
    (tmp_path / "planner_config.json").write_text(a.config_json)
    (tmp_path / "profiling_results").mkdir()
    files = dict(a.profile_files)
    for name, text in files.items():
        (tmp_path / "profiling_results" / name).write_text(text)
    run = subprocess.run(
        [str(PYTHON), "-c", READ_WITH_DYNAMO, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["version"] == "1.6.1"
    ours = json.loads(a.config_json)
    config = got["config"]
    # every field we set reached the planner as we meant it (none dropped or coerced by its model)
    for key, value in ours.items():
        assert config[key] == value, key
    assert got["scaling"] is True
    assert got["mins"] == (
        [ours["prefill_min_endpoint"], ours["decode_min_endpoint"]]
        if a.mode == "disagg"
        else [None, ours["min_endpoint"]]
    )
    # the decode table: one ForwardPassMetrics per point, timed by our ITL, sized by our KV usage and context
    dec = json.loads(files["decode_raw_data.json"])
    fpms = got["fpms"]["decode"]
    assert len(fpms) == len(dec["z_itl"]) > 20
    for (wall, _, _, batch, kv), x, y, z in zip(fpms, dec["x_kv_usage"], dec["y_context_length"], dec["z_itl"]):
        assert wall * 1000 == pytest.approx(z, rel=1e-9)
        assert kv == round(x * dec["max_kv_tokens"]) and batch == max(1, round(kv / y))
        assert 1 <= batch <= 256
    if a.mode == "disagg":
        pre = json.loads(files["prefill_raw_data.json"])
        fpms = got["fpms"]["prefill"]
        assert [(n, tokens) for _, n, tokens, _, _ in fpms] == [(1, isl) for isl in pre["prefill_isl"]]
        assert [wall * 1000 for wall, *_ in fpms] == pytest.approx(pre["prefill_ttft"], rel=1e-9)
    else:  # the aggregated planner seeds from decode data only (AggPlanner._bootstrap_regression)
        assert got["fpms"]["prefill"] is None
