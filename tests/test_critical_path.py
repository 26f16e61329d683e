"""The critical-path report: computed from resources.json edges, with durations from config and the planner."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, STACKS
from kimi_k3 import critical_path as cp
from kimi_k3 import planner
from kimi_k3.stacks import load_stack


def _path(r, stack, **cfg_overrides):
    cfg, graph = load_stack(stack, ROOT)
    if cfg_overrides:
        cfg = cfg.model_copy(update=cfg_overrides)
    return cp.critical_path(r.resources, cp.estimates(cfg, graph)), cfg, graph


def test_longest_path_on_a_toy_graph():
    est = cp.Estimates(seconds={"eks_cluster": 600, "fsx_lustre": 1200, "kubernetes_default": 5,
                                "aws_default": 15, "gpu_node_group": 900, "system_node_group": 240,
                                "worker_warmup": 100, "verify_checkpoint": 20},
                       download_gbps=1.0, download_seconds=1000, load_seconds=50)
    res = [
        {"urn": "c", "type": "kimi-k3:model:ModelCache", "name": "c", "parent": "", "dependsOn": ["fs"], "provider": ""},
        {"urn": "fs", "type": "aws:fsx/lustreFileSystem:LustreFileSystem", "name": "fs", "parent": "", "dependsOn": [], "provider": ""},
        {"urn": "eks", "type": "aws:eks/cluster:Cluster", "name": "eks", "parent": "", "dependsOn": [], "provider": ""},
        {"urn": "p", "type": "pulumi:providers:kubernetes", "name": "p", "parent": "", "dependsOn": ["eks"], "provider": ""},
        {"urn": "job", "type": "kubernetes:batch/v1:Job", "name": "job", "parent": "c", "dependsOn": ["fs"],
         "provider": "p", "inputs": HUB_JOB},
        {"urn": "cm", "type": "kubernetes:core/v1:ConfigMap", "name": "cm", "parent": "c", "dependsOn": [], "provider": "p"},
        {"urn": "gpu", "type": "aws:eks/nodeGroup:NodeGroup", "name": "gpu", "parent": "", "dependsOn": ["eks"],
         "provider": "", "inputs": {"amiType": "AL2023_ARM_64_NVIDIA"}},
        {"urn": "dgd", "type": "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment", "name": "dgd", "parent": "",
         "dependsOn": ["job", "gpu"], "provider": "p"},
    ]
    path = cp.critical_path(res, est)
    # job: after fs (1200 s) and its provider (eks, 600 s), then the 1000 s download and the 20 s verification
    assert path.finish["job"] == 2220 and path.finish["gpu"] == 1500
    # as in the engine, the component's own dependsOn (fs) does not hold back a child that does not state it
    assert path.finish["cm"] == 600 + 5 and path.finish["c"] == 2220
    assert path.total_seconds == 2220 + 50 + 100
    assert [s.name for s in path.steps] == ["fs", "job", "dgd"]
    # the same Job without `hf download` (weights pre-staged) is charged the verification only
    verify_only = [dict(r, inputs=VERIFY_JOB) if r["urn"] == "job" else r for r in res]
    assert cp.critical_path(verify_only, est).finish["job"] == 1200 + 20


HUB_JOB = {"spec": {"template": {"spec": {
    "initContainers": [{"name": "download", "command": ["sh", "-c"],
                        "args": ["pip install ...\n/opt/hub/bin/hf download \"$MODEL_REPO\" --local-dir ..."]}],
    "containers": [{"name": "verify", "command": ["python3", "/scripts/verify_checkpoint.py"]}]}}}}
VERIFY_JOB = {"spec": {"template": {"spec": {
    "initContainers": [{"name": "download", "command": ["sh", "-c"], "args": ["pip install ..."]}],
    "containers": [{"name": "verify", "command": ["python3", "/scripts/verify_checkpoint.py"]}]}}}}


@pytest.mark.parametrize("stack", STACKS)
def test_download_overlaps_gpu_provisioning(stack, rendered):
    path, cfg, graph = _path(rendered[stack], stack)
    names = [s.name for s in path.steps]
    assert "kimi-k3-eks-gpu-nodes" not in names, "GPU nodes are ready before the weights are"
    assert "kimi-k3-model-cache-download" in names and names[-1] == "kimi-k3-serving-deployment"
    job = next(r for r in rendered[stack].resources if r["type"] == "kubernetes:batch/v1:Job"
               and r["name"].endswith("-model-cache-download"))
    gpu = next(r for r in rendered[stack].resources if r["name"] == "kimi-k3-eks-gpu-nodes")
    est = cp.estimates(cfg, graph)
    assert cp.duration(job, est) == (est.download_seconds + est.of("verify_checkpoint"),
                                     f"download {est.download_gbps:g} GB/s + verify")
    start_job = path.finish[job["urn"]] - cp.duration(job, est)[0]
    assert start_job < path.finish[gpu["urn"]], "the download starts before the GPU nodes are up"


def test_durations_come_from_config_and_the_planner(rendered):
    cfg, graph = load_stack("gb300-disagg", ROOT)
    est = cp.estimates(cfg, graph)
    m = planner.load_model_facts()
    assert est.download_seconds == pytest.approx(planner.checkpoint_bytes(m) / (1.2 * 1e9))
    # 6 pods each read the whole checkpoint through the stack's 14400 GiB x 1000 MB/s/TiB filesystem at once.
    assert est.load_seconds == pytest.approx(6 * planner.checkpoint_bytes(m) / (14400 / 1024 * 1e9))
    slow = cfg.model_copy(update={"estimates": cfg.estimates.model_copy(update={"download_gbps": 0.5,
                                                                                 "seconds": {"worker_warmup": 0}})})
    base = cp.critical_path(rendered["gb300-disagg"].resources, est).total_seconds
    slower = cp.critical_path(rendered["gb300-disagg"].resources, cp.estimates(slow, graph)).total_seconds
    assert slower > base


def test_prestaged_weights_are_verified_not_downloaded(rendered):
    """storage.fsx.s3ImportPath: the Job runs no `hf download`, so it is charged verify_checkpoint, not the Hub."""
    from conftest import render_with
    r = render_with("gb300-disagg", storage={"kind": "fsx-lustre", "fsx": {"s3ImportPath": "s3://my-weights/kimi-k3/"}})
    cfg, graph = load_stack("gb300-disagg", ROOT)
    est = cp.estimates(cfg, graph)
    job = next(x for x in r.resources if x["type"] == "kubernetes:batch/v1:Job" and x["name"].endswith("-download"))
    assert not cp.downloads_from_hub(job["inputs"])
    assert cp.duration(job, est) == (est.of("verify_checkpoint"), "verify_checkpoint (pre-staged weights, no download)")
    assert est.of("verify_checkpoint") < est.download_seconds / 10
    path = cp.critical_path(r.resources, est)
    # With nothing to download, the GPU nodes and the fabric preflight (not the weights) lead to the graph.
    assert [st.what for st in path.steps[-3:]] == ["gpu_node_group", "fabric_preflight",
                                                   "weights load (planner) + warm-up"]
    default = cp.critical_path(rendered["gb300-disagg"].resources, est)
    assert path.total_seconds < default.total_seconds


def test_estimates_override_from_stack_config():
    from kimi_k3.config import parse_stack_config
    from conftest import stack_config
    config, secrets = stack_config("gb300", estimates={"downloadGbps": 2.5, "seconds": {"fsx_lustre": 60}})
    cfg = parse_stack_config(config, secrets)
    assert cfg.estimates.download_gbps == 2.5 and cfg.estimates.seconds["fsx_lustre"] == 60


def test_render_prints_the_critical_path(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kimi_k3", "render", "gb300-disagg", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "critical path (estimated time to first token" in proc.stdout
    assert "kimi-k3-model-cache-download" in proc.stdout and "kimi-k3-serving-deployment" in proc.stdout


