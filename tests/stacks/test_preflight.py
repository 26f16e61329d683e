"""Fabric preflight: its place in the deployment order (under the mocks) and its failure path (the script)."""

from __future__ import annotations

import pytest
from conftest import STACKS, render_with

from kimi_k3.pods import fabric_preflight as fp

JOB = "kubernetes:batch/v1:Job"
DGD = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"


def _preflights(r):
    return [x for x in r.resources if x["type"] == JOB and x["name"].endswith("-preflight")]


@pytest.mark.parametrize("stack", STACKS)
def test_preflight_runs_per_multinode_role_before_the_graph_and_beside_the_download(stack, rendered):
    r = rendered[stack]
    by_name = {x["name"]: x for x in r.resources}
    dgd = next(x for x in r.resources if x["type"] == DGD)
    components = {c["name"]: c for c in dgd["inputs"]["spec"]["components"]}
    roles = r.outputs["roles"]
    multinode = {k for k, v in roles.items() if v["nodesPerReplica"] > 1}
    jobs = _preflights(r)
    assert sorted(j["name"] for j in jobs) == sorted(f"kimi-k3-serving-{k}-preflight" for k in multinode)
    download = by_name["kimi-k3-model-cache-download"]["urn"]
    gpu_nodes = by_name["kimi-k3-eks-gpu-nodes"]["urn"]
    for job in jobs:
        key = job["name"].removeprefix("kimi-k3-serving-").removesuffix("-preflight")
        assert job["urn"] in dgd["dependsOn"], "the graph waits for the fabric check"
        # the role's ComputeDomain: one shared by both roles where KV moves over NVLink (all four stacks)
        domain = "nvlink" if {"prefill", "decode"} <= set(roles) else key
        assert by_name[f"kimi-k3-serving-{domain}-compute-domain"]["urn"] in job["dependsOn"]
        assert gpu_nodes in job["dependsOn"] and download not in job["dependsOn"], "runs while weights download"
        assert job["ignoreChanges"] == ["spec"], "a later update must not re-run it against GPUs the graph holds"
        spec = job["inputs"]["spec"]
        pod = spec["template"]["spec"]
        worker = components[roles[key]["component"]]["podTemplate"]["spec"]
        assert (
            spec["completionMode"] == "Indexed"
            and spec["completions"] == spec["parallelism"] == roles[key]["nodesPerReplica"]
            and spec["backoffLimit"] == 0
        )
        assert pod["resourceClaims"] == worker["resourceClaims"], "the same ComputeDomain channel as the workers"
        assert (
            pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            == worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        ), "whole nodes, as the workers"
        affinity = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert affinity["topologyKey"] == "nvidia.com/gpu.clique", "the whole group in one NVLink clique"
        assert pod["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
        # awaited by pulumi-kubernetes' own Job await (fails at once on a failed check): no waitFor
        assert "pulumi.com/waitFor" not in job["inputs"]["metadata"]["annotations"]
        assert job["inputs"]["spec"]["activeDeadlineSeconds"] < int(
            job["inputs"]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]
        )


def test_preflight_can_be_turned_off():
    r = render_with("gb300", serving={"preflight": {"enabled": False}})
    assert _preflights(r) == []


def test_host_imex_is_told_apart_from_the_compute_domain_daemon(tmp_path):
    # The host's /sys/fs/cgroup/system.slice as the preflight mounts it: a running nvidia-imex.service has its own
    # cgroup there; a ComputeDomain daemon's nvidia-imex lives under kubepods.slice and never shows up.
    (tmp_path / "cgroup.procs").write_text("")
    (tmp_path / "sshd.service").mkdir()
    (tmp_path / "sshd.service" / "cgroup.procs").write_text("303\n")
    assert fp.host_imex_pids(str(tmp_path)) == []
    (tmp_path / "nvidia-imex.service").mkdir()
    (tmp_path / "nvidia-imex.service" / "cgroup.procs").write_text("101\n102\n")
    assert fp.host_imex_pids(str(tmp_path)) == [101, 102]


def test_host_imex_check_refuses_a_directory_that_is_no_system_slice(tmp_path):
    with pytest.raises(OSError, match="not the host's systemd system.slice"):
        fp.host_imex_pids(str(tmp_path))


def test_bus_bandwidth_is_nccl_tests_definition():
    # nccl-tests PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce
    assert fp.bus_bandwidth_gbps(1.0, 10**9, 8) == pytest.approx(1.75)


@pytest.fixture
def pod_env(monkeypatch, tmp_path):
    for k, v in {
        "NODE_NAME": "ip-10-64-1-7",
        "COMPUTE_DOMAIN": "kimi-k3-decode",
        "NNODES": "2",
        "GPUS_PER_NODE": "4",
        "JOB_COMPLETION_INDEX": "0",
        "MASTER_ADDR": "x",
        "MASTER_PORT": "29500",
        "MIN_BUS_BANDWIDTH_GBPS": "300",
    }.items():
        monkeypatch.setenv(k, v)
    log = tmp_path / "termination-log"
    monkeypatch.setattr(fp, "TERMINATION_LOG", str(log))
    monkeypatch.setattr(fp, "host_imex_pids", lambda services: [])
    return log


def test_failure_names_the_node_without_an_imex_channel(pod_env, monkeypatch, tmp_path):
    monkeypatch.setattr(fp, "IMEX_CHANNELS", str(tmp_path / "none" / "channel*"))
    with pytest.raises(SystemExit) as err:
        fp.main()
    assert err.value.code == 1
    assert "node ip-10-64-1-7" in pod_env.read_text() and "ComputeDomain kimi-k3-decode" in pod_env.read_text()


def test_failure_names_the_node_when_bandwidth_is_below_nvlink(pod_env, monkeypatch, tmp_path):
    (tmp_path / "channel0").write_text("")
    monkeypatch.setattr(fp, "IMEX_CHANNELS", str(tmp_path / "channel*"))
    monkeypatch.setattr(fp, "all_reduce_gbps", lambda *a: 42.0)  # e.g. a group spread over two cliques
    with pytest.raises(SystemExit):
        fp.main()
    assert pod_env.read_text().startswith("node ip-10-64-1-7: all-reduce bus bandwidth 42 GB/s < 300 GB/s")
    monkeypatch.setattr(fp, "all_reduce_gbps", lambda *a: 812.0)
    fp.main()  # passes: exits normally


def test_host_imex_fails_first(pod_env, monkeypatch):
    monkeypatch.setattr(fp, "host_imex_pids", lambda services: [101])
    with pytest.raises(SystemExit):
        fp.main()
    assert "host runs nvidia-imex" in pod_env.read_text()
