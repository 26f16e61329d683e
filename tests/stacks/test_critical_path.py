"""The critical-path report: computed from resources.json edges, with durations from config and the planner."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from conftest import ROOT, STACKS

from kimi_k3 import names as kimi_k3_names
from kimi_k3.blueprint import load_stack
from kimi_k3.facts import model
from kimi_k3.graph import durations
from kimi_k3.graph import model as graph_model
from kimi_k3.offline import critical_path as cp
from kimi_k3.sizing import memory


def _path(r, stack, **cfg_overrides):
    cfg, graph = load_stack(stack, ROOT)
    if cfg_overrides:
        cfg = cfg.model_copy(update=cfg_overrides)
    return cp.critical_path(r.resources, durations.estimates(cfg, graph)), cfg, graph


def test_longest_path_on_a_toy_graph():
    est = durations.Estimates(
        seconds={
            "eks_cluster": 600,
            "fsx_lustre": 1200,
            "kubernetes_default": 5,
            "aws_default": 15,
            "gpu_node_group": 900,
            "system_node_group": 240,
            "worker_warmup": 100,
            "verify_checkpoint": 20,
        },
        download_gbps=1.0,
        download_seconds=1000,
        load_seconds=50,
    )
    res = [
        {
            "urn": "c",
            "type": "kimi-k3:model:ModelCache",
            "name": "c",
            "parent": "",
            "dependsOn": ["fs"],
            "provider": "",
        },
        {
            "urn": "fs",
            "type": "aws:fsx/lustreFileSystem:LustreFileSystem",
            "name": "fs",
            "parent": "",
            "dependsOn": [],
            "provider": "",
        },
        {"urn": "eks", "type": "aws:eks/cluster:Cluster", "name": "eks", "parent": "", "dependsOn": [], "provider": ""},
        {
            "urn": "p",
            "type": "pulumi:providers:kubernetes",
            "name": "p",
            "parent": "",
            "dependsOn": ["eks"],
            "provider": "",
        },
        {
            "urn": "job",
            "type": "kubernetes:batch/v1:Job",
            "name": "job",
            "parent": "c",
            "dependsOn": ["fs"],
            "provider": "p",
            "inputs": HUB_JOB,
        },
        {
            "urn": "cm",
            "type": "kubernetes:core/v1:ConfigMap",
            "name": "cm",
            "parent": "c",
            "dependsOn": [],
            "provider": "p",
        },
        {
            "urn": "gpu",
            "type": "aws:eks/nodeGroup:NodeGroup",
            "name": "gpu",
            "parent": "",
            "dependsOn": ["eks"],
            "provider": "",
            "inputs": {"amiType": "AL2023_ARM_64_NVIDIA"},
        },
        {
            "urn": "dgd",
            "type": "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment",
            "name": "dgd",
            "parent": "",
            "dependsOn": ["job", "gpu"],
            "provider": "p",
        },
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


HUB_JOB = {
    "spec": {
        "template": {
            "spec": {
                "initContainers": [
                    {
                        "name": "download",
                        "command": ["sh", "-c"],
                        "args": ['pip install ...\n/opt/hub/bin/hf download "$MODEL_REPO" --local-dir ...'],
                    }
                ],
                "containers": [{"name": "verify", "command": ["python3", "/scripts/verify_checkpoint.py"]}],
            }
        }
    }
}
VERIFY_JOB = {
    "spec": {
        "template": {
            "spec": {
                "initContainers": [{"name": "download", "command": ["sh", "-c"], "args": ["pip install ..."]}],
                "containers": [{"name": "verify", "command": ["python3", "/scripts/verify_checkpoint.py"]}],
            }
        }
    }
}


@pytest.mark.parametrize("stack", STACKS)
def test_fetch_starts_at_t0_and_overlaps_the_cluster(stack, rendered):
    """Issue 15: the download starts at t=0, independent of the cluster and of any filesystem; the in-cluster Job
    only verifies, after the fetchers, before any worker."""
    path, cfg, graph = _path(rendered[stack], stack)
    names = [s.name for s in path.steps]
    assert names[-2:] == ["kimi-k3-serving-deployment", "kimi-k3-serving-ready"], "the graph-ready Job waits last"
    assert not [n for n in names if "fetcher" in n or "model-cache" in n or "fsx" in n], (
        "neither the fetch nor its verification is on the fresh path: EKS and the GPU nodes are"
    )
    assert "kimi-k3-eks-gpu-nodes" in names
    est = durations.estimates(cfg, graph)
    fetchers = [r for r in rendered[stack].resources if kimi_k3_names.is_fetcher(r)]
    eks = next(r for r in rendered[stack].resources if r["type"] == "aws:eks/cluster:Cluster")
    assert len(fetchers) == est.fetchers == 4
    for f in fetchers:
        start = path.finish[f["urn"]] - est.fetch_seconds
        assert start < 300, "a fetcher starts once the network is up (VPC, subnet, NAT), minutes after t=0"
        assert path.finish[f["urn"]] < path.finish[eks["urn"]] + 600
    job = next(
        r
        for r in rendered[stack].resources
        if r["type"] == "kubernetes:batch/v1:Job" and r["name"].endswith("-model-cache-download")
    )
    assert cp.duration(job, est) == (est.of("verify_checkpoint"), "verify_checkpoint (pre-staged weights, no download)")
    assert path.finish[job["urn"]] >= max(path.finish[f["urn"]] for f in fetchers) + est.of("verify_checkpoint")


def test_durations_come_from_config_and_the_planner(rendered):
    cfg, graph = load_stack("gb300-disagg", ROOT)
    est = durations.estimates(cfg, graph)
    m = model.load_model_facts()
    ckpt = model.checkpoint_bytes(m)
    # 4 fetchers, each a quarter of the checkpoint at the public hf_xet per-host figure (2.18 GB/s), after starting.
    assert est.fetch_seconds == pytest.approx(120 + ckpt / 4 / (2.18 * 1e9))
    # Node-local weights (the stacks): each 4-GPU pod of a TP8 replica reads its half (780 GB) from its node's NVMe.
    assert est.load_seconds == pytest.approx(ckpt / 2 / 21e9)
    # Read from the bucket instead (nodeLocalWeights false): fastsafetensors, each TP8 replica reads the checkpoint
    # once, a 4-GPU pod half of it (780 GB at 10 GB/s from S3); the 3 replicas' 4.68 TB cross the Local Zone link
    # (assumed 12.5 GB/s), which binds.
    remote = dataclasses.replace(graph, node_local_weights=False)
    assert durations.estimates(cfg, remote).load_seconds == pytest.approx(max(ckpt / 2 / 10e9, 3 * ckpt / 12.5e9))
    fast = cfg.model_copy(update={"estimates": cfg.estimates.model_copy(update={"local_zone_link_gbps": 1000})})
    assert durations.estimates(fast, remote).load_seconds == pytest.approx(ckpt / 2 / 10e9), (
        "then the per-node rate binds"
    )
    slow = cfg.model_copy(
        update={"estimates": cfg.estimates.model_copy(update={"download_gbps": 0.01, "seconds": {"worker_warmup": 0}})}
    )
    slow_est = durations.estimates(slow, graph)
    assert slow_est.fetch_seconds > est.fetch_seconds
    base = cp.critical_path(rendered["gb300-disagg"].resources, est)
    slower = cp.critical_path(rendered["gb300-disagg"].resources, slow_est)
    assert slower.total_seconds > base.total_seconds, "a slow enough Hub puts the fetch on the path"
    assert "kimi-k3-model-cache-download" in [st.name for st in slower.steps]


def test_the_old_read_model_charged_every_pod_the_whole_checkpoint():
    """vLLM's fastsafetensors loader gives each rank of the group its own files: a replica reads each byte once.
    The former model (every pod reads everything) overstated a gb300-disagg cold read 2x (TP8 = 2 pods)."""
    m = model.load_model_facts()
    ckpt = model.checkpoint_bytes(m)
    assert memory.bytes_per_pod(m, 8, 4, "fastsafetensors") == round(ckpt / 2)
    assert memory.bytes_per_pod(m, 16, 4, "fastsafetensors") == round(ckpt / 4)
    assert memory.bytes_per_replica(m, 16, 4, "fastsafetensors") == pytest.approx(ckpt, rel=1e-9)
    assert memory.bytes_per_pod(m, 16, 4, "auto") == ckpt, "the default loader reads every file on every rank"
    with pytest.raises(ValueError, match="unknown --load-format 'gguf'"):
        memory.bytes_per_pod(m, 8, 4, "gguf")
    cfg, graph = load_stack("gb300-disagg", ROOT)
    assert {graph_model.role_flag(r, "--load-format") for r in graph.roles} == {"fastsafetensors"}


def test_prestaged_weights_are_verified_not_downloaded():
    """storage.fsx.s3ImportPath: the Job runs no `hf download`, so it is charged verify_checkpoint, not the Hub."""
    from conftest import render_with

    fsx = {"kind": "fsx-lustre", "fsx": {"storageCapacityGiB": 14400}}
    r = render_with("gb300-disagg", storage={**fsx, "fsx": {**fsx["fsx"], "s3ImportPath": "s3://my-weights/kimi-k3/"}})
    hub = render_with("gb300-disagg", storage=fsx)
    cfg, graph = load_stack("gb300-disagg", ROOT)
    est = durations.estimates(cfg, graph)
    job = next(x for x in r.resources if x["type"] == "kubernetes:batch/v1:Job" and x["name"].endswith("-download"))
    assert not cp.downloads_from_hub(job["inputs"])
    assert cp.duration(job, est) == (est.of("verify_checkpoint"), "verify_checkpoint (pre-staged weights, no download)")
    assert est.of("verify_checkpoint") < est.download_seconds / 10
    path = cp.critical_path(r.resources, est)
    hub_job = next(
        x for x in hub.resources if x["type"] == "kubernetes:batch/v1:Job" and x["name"].endswith("-download")
    )
    assert cp.downloads_from_hub(hub_job["inputs"]), "fsx-lustre without an import path downloads in the cluster"
    assert path.total_seconds < cp.critical_path(hub.resources, est).total_seconds


@pytest.mark.parametrize("stack", STACKS)
def test_image_prepull_and_redeploy_path(stack, rendered):
    """The runtime image is pulled onto the GPU nodes by a DaemonSet the graph waits for (charged image_pull); a
    re-deploy pays only the graph: its weights load and the warm-up with the compile caches in place."""
    path, cfg, graph = _path(rendered[stack], stack)
    est = durations.estimates(cfg, graph)
    ds = next(r for r in rendered[stack].resources if cp.is_image_prepull(r))
    dgd = next(r for r in rendered[stack].resources if r["type"].endswith(":DynamoGraphDeployment"))
    assert ds["urn"] in dgd["dependsOn"]
    assert cp.duration(ds, est)[0] == est.of("image_pull")
    again = cp.critical_path(rendered[stack].resources, cp.redeploy(est), existing=True)
    assert [s.name for s in again.steps] == ["kimi-k3-serving-ready"], "the graph-ready Job waits through the load"
    assert again.total_seconds == pytest.approx(est.load_seconds + est.of("worker_warmup_cached"))
    assert est.of("worker_warmup_cached") < est.of("worker_warmup")


def test_estimates_override_from_stack_config():
    from conftest import stack_config

    from kimi_k3.config.stack import parse_stack_config

    config, secrets = stack_config("gb300", estimates={"downloadGbps": 2.5, "seconds": {"fsx_lustre": 60}})
    cfg = parse_stack_config(config, secrets)
    assert cfg.estimates.download_gbps == 2.5 and cfg.estimates.seconds["fsx_lustre"] == 60


@pytest.mark.slow  # a real `kimi-k3 render` process (~8 s)
def test_render_prints_the_critical_path(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kimi_k3", "render", "gb300-disagg", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "critical path (estimated time to first token" in proc.stdout and "goal <= 45m00s" in proc.stdout
    assert "re-deploy (cluster, weights (node-local copies too), image and compile caches in place" in proc.stdout
    assert "goal <= 10m00s" in proc.stdout and "kimi-k3-serving-ready" in proc.stdout
