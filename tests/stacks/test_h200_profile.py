"""The h200 stack against upstream's agg-h200-agentic profile, and every deliberate difference.

Upstream: ai-dynamo/dynamo recipes/kimi-k3/vllm/agg-h200-agentic/deploy.yaml @ 1fa623b3429554e32435bbca78935cc9da0f65b9
(not in ../shared, so its values are written out here, each as that file states it)."""

from __future__ import annotations

import pytest
from conftest import ROOT, by_kind, env_of, main_container, workers
from support import render_stack_once

from kimi_k3 import flags as argv_flags

# The worker's argv and env in upstream's file (flag -> value, True = bare flag).
UPSTREAM_ARGS = {
    "--trust-remote-code": True,
    "--tensor-parallel-size": "8",
    "--pipeline-parallel-size": "4",
    "--nnodes": "4",
    "--distributed-executor-backend": "mp",
    "--distributed-timeout-seconds": "7200",
    "--cpu-distributed-timeout-seconds": "7200",
    "--disable-custom-all-reduce": True,
    "--stream-interval": "20",
    "--gpu-memory-utilization": "0.85",
    "--max-num-batched-tokens": "8192",
    "--max-num-seqs": "256",
    "--enable-prefix-caching": True,
    "--enable-multimodal": True,
    "--no-enable-flashinfer-autotune": True,
    "--kv-cache-dtype": "bfloat16",
    "--scheduler-cls": "vllm.v1.core.sched.async_scheduler.AsyncScheduler",
    "--dyn-tool-call-parser": "kimi_k3",
    "--dyn-reasoning-parser": "kimi_k3",
    "--dyn-enable-structural-tag": True,
}
UPSTREAM_ENV = {
    "DYN_SELF_HOST_METADATA": "1",
    "VLLM_USE_NCCL_SYMM_MEM": "0",
    "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
    "VLLM_ALLREDUCE_USE_FLASHINFER": "0",
    "NCCL_MNNVL_ENABLE": "0",
    "NCCL_NVLS_ENABLE": "0",
    "DYN_REQUEST_PLANE": "tcp",
    "ETCD_LEASE_TTL": "120",
    "VLLM_ENGINE_READY_TIMEOUT_S": "7200",
    "VLLM_RPC_TIMEOUT": "600000",
    "VLLM_DEEP_GEMM_WARMUP": "skip",
    "PYTORCH_ALLOC_CONF": "expandable_segments:True",
    "VLLM_USE_V2_MODEL_RUNNER": "1",
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1800",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "1800",
    "NCCL_TIMEOUT": "1800",
}
# Deliberate differences: flag -> (ours, why). Every other upstream flag renders as upstream gives it.
DELIBERATE = {
    "--nnodes": (None, "the Dynamo operator adds vLLM's multinode launch flags (as for gb200's 4-node TP16)"),
}


@pytest.fixture(scope="module")
def h200():
    return render_stack_once("h200", ROOT)


def _worker(r):
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    (worker,) = workers(dgd)
    return worker


def test_layout_is_one_worker_of_tp8_x_pp4_on_four_h200_nodes(h200):
    w = _worker(h200)
    args = main_container(w)["args"]
    assert args.count("--tensor-parallel-size") == 1 and args.count("--pipeline-parallel-size") == 1
    assert (
        argv_flags.flag_value(args, "--tensor-parallel-size"),
        argv_flags.flag_value(args, "--pipeline-parallel-size"),
    ) == ("8", "4")
    assert w["replicas"] == 1 and w["multinode"]["nodeCount"] == 4
    assert main_container(w)["resources"]["limits"]["nvidia.com/gpu"] in (8, "8")
    assert h200.outputs["gpus"] == 32


@pytest.mark.parametrize("flag", sorted(UPSTREAM_ARGS))
def test_worker_flags_are_upstreams_or_a_stated_difference(h200, flag):
    args = main_container(_worker(h200))["args"]
    ours = True if flag in args and argv_flags.flag_value(args, flag) is None else argv_flags.flag_value(args, flag)
    if flag in DELIBERATE:
        assert ours == DELIBERATE[flag][0] != UPSTREAM_ARGS[flag], DELIBERATE[flag][1]
    else:
        assert ours == UPSTREAM_ARGS[flag]


def test_worker_env_is_upstreams(h200):
    env = env_of(main_container(_worker(h200)))
    assert {k: env.get(k) for k in UPSTREAM_ENV} == UPSTREAM_ENV


def test_no_compute_domain_claim_or_clique_pinning(h200):
    """NVLink ends at the HGX node: no ComputeDomain (upstream makes none), no DRA channel, no clique affinity."""
    assert by_kind(h200.objects, "ComputeDomain") == []
    spec = _worker(h200)["podTemplate"]["spec"]
    assert "podAffinity" not in spec.get("affinity", {})
    assert not spec.get("resourceClaims")
    assert not main_container(_worker(h200))["resources"].get("claims")
    assert "nvidia.com/gpu.clique" not in str(h200.objects)


def test_gb_stacks_still_claim_their_domain(rendered):
    """The same code path still gives an NVL72 TP group its ComputeDomain channel and clique pinning."""
    spec = _worker(rendered["gb200"])["podTemplate"]["spec"]
    assert by_kind(rendered["gb200"].objects, "ComputeDomain")
    assert spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == (
        "nvidia.com/gpu.clique"
    )
    assert [c["name"] for c in spec["resourceClaims"]] == ["compute-domain-channel"]


def test_gpu_nodes_are_four_x86_p5en(h200):
    (role,) = h200.blueprint.graph.roles
    assert (role.nodes, role.gpus, role.pp) == (4, 32, 4)
    nodes = h200.blueprint.config.cluster.gpu_nodes
    assert (nodes.instance_type, nodes.ami_type) == ("p5en.48xlarge", "AL2023_x86_64_NVIDIA")


def test_on_demand_nodes_need_no_reservation(h200):
    """p5en is sold on demand (recipes/facts/aws.yaml): no Capacity Block reservation is assumed for it."""
    assert h200.blueprint.config.cluster.gpu_nodes.capacity_type == "ON_DEMAND"
    assert not any("capacityReservationId" in a for a in h200.assumed)
