"""Issue 15's deployment path: fetchers' shares, compile caches keyed by image and flags, image pre-pull, and the
Local Zone placement of what is not in the GPUs' zone (issue 9 items 8 and 9)."""

from __future__ import annotations

import pytest
from conftest import ROOT, STACKS, by_kind, env_of, main_container, render_with, workers

from kimi_k3.aws import storage
from kimi_k3.blueprint import load_stack
from kimi_k3.graph.compile_cache import compile_cache_key, compile_cache_spec
from kimi_k3.pods import fetch_checkpoint as fc


def test_fetchers_share_every_file_once_balanced_by_size():
    sizes = {f"model-{i:05d}.safetensors": 5_000_000_000 + i for i in range(64)} | {"config.json": 10, "a.py": 3}
    shares = fc.partition(sizes, 4)
    assert sorted(f for s in shares for f in s) == sorted(sizes), "every file in exactly one share"
    loads = [sum(sizes[f] for f in s) for s in shares]
    assert max(loads) - min(loads) <= max(sizes.values()), "within one file of each other"
    assert fc.partition(dict(reversed(list(sizes.items()))), 4) == shares, "every fetcher computes the same split"
    hub = {
        f: {"size": n, "sha256": f"{hash(f) & 0xFFFF:064x}" if f.endswith(".safetensors") else None, "blob_id": "b"}
        for f, n in sizes.items()
    }
    share = sorted(shares[0], key=lambda f: not f.endswith(".safetensors"))
    a, b, c = share[:3]
    in_bucket = {a: (sizes[a], hub[a]["sha256"]), b: (sizes[b], "0" * 64), c: (1, hub[c]["sha256"])}
    assert fc.todo(share, hub, in_bucket) == share[1:], (
        "a file whose recorded sha256 is the Hub's is skipped; same size with other bytes, or truncated, is fetched"
    )
    small = {"config.json": {"size": 10, "sha256": None, "blob_id": "x"}}
    assert fc.todo(["config.json"], small, {"config.json": (10, "")}) == ["config.json"], (
        "a non-LFS file (no Hub sha256) is always fetched again: never trusted by size"
    )
    with pytest.raises(ValueError):
        fc.partition(sizes, 0)


@pytest.mark.parametrize("stack", STACKS)
def test_workers_keep_compile_caches_on_the_shared_volume(stack, rendered):
    r = rendered[stack]
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    names = compile_cache_spec()["env"]
    for c in workers(dgd):
        main = main_container(c)
        env = env_of(main)
        key = compile_cache_key(main["image"], tuple(main["args"]))
        for var, sub in names.items():
            assert env[var] == f"/compile-cache/{sub}", "not /tmp: survives restarts, shared by the role"
        assert {"name": "compile-cache", "mountPath": "/compile-cache", "subPath": key} in main["volumeMounts"]
        vol = next(v for v in c["podTemplate"]["spec"]["volumes"] if v["name"] == "compile-cache")
        assert vol["persistentVolumeClaim"]["claimName"] == "kimi-k3-compile-cache"
    efs = next(x for x in r.resources if x["name"] == "kimi-k3-storage-compile-cache")
    assert not efs["protect"] and not efs["retainOnDelete"], "reproducible: destroy may delete it"
    pv = next(x for x in r.resources if x["name"] == "kimi-k3-storage-compile-cache-pv")["inputs"]["spec"]
    assert pv["csi"]["driver"] == "efs.csi.aws.com" and pv["mountOptions"] == ["tls", "az=us-east-1a"]
    assert pv["claimRef"] == {"namespace": "kimi-k3", "name": "kimi-k3-compile-cache"}


def test_compile_cache_key_follows_image_and_flags():
    base = compile_cache_key("img:1", ("--a", "1"))
    assert base == compile_cache_key("img:1", ("--a", "1"))
    assert len({base, compile_cache_key("img:2", ("--a", "1")), compile_cache_key("img:1", ("--a", "2"))}) == 3


def test_no_compile_cache_volume_when_turned_off():
    r = render_with("gb300", storage={"kind": "s3", "compileCache": "none"})
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    for c in workers(dgd):
        assert "compile-cache" not in {m["name"] for m in main_container(c)["volumeMounts"]}
    assert not [x for x in r.resources if "compile-cache" in x["name"]]


@pytest.mark.parametrize("stack", STACKS)
def test_runtime_image_prepulled_on_the_gpu_nodes(stack, rendered):
    r = rendered[stack]
    (ds,) = [d for d in by_kind(r.objects, "DaemonSet") if d["metadata"]["name"] == "kimi-k3-image-prepull"]
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    pod = ds["spec"]["template"]["spec"]
    images = {main_container(c)["image"] for c in workers(dgd)}
    assert [c["image"] for c in pod["initContainers"]] == sorted(images) and pod["initContainers"][0]["command"] == [
        "true"
    ]
    assert pod["nodeSelector"] == {"kimi-k3.io/node-role": "gpu", "kimi-k3.io/platform": stack.split("-")[0]}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    res = next(x for x in r.resources if x["type"] == "kubernetes:apps/v1:DaemonSet" and x["name"].endswith("-prepull"))
    gpu = next(x for x in r.resources if x["name"] == "kimi-k3-eks-gpu-nodes")
    assert gpu["urn"] in res["dependsOn"]


def test_local_zone_placement():
    """What cannot be in the Dallas Local Zone goes to the first Regional zone, and the link is charged."""
    cfg, _ = load_stack("gb300-disagg", ROOT)
    assert storage.is_local_zone("us-east-1-dfw-2a", "us-east-1") and not storage.is_local_zone(
        "us-east-1a", "us-east-1"
    )
    assert storage.storage_zone(cfg) == "us-east-1a"
    assert storage.efs_mount_options(cfg) == ["tls", "az=us-east-1a"]
    from kimi_k3.graph import durations

    assert durations.link_gbps(cfg) == 12.5
    az = cfg.model_copy(
        update={
            "cluster": cfg.cluster.model_copy(
                update={"gpu_nodes": cfg.cluster.gpu_nodes.model_copy(update={"availability_zone": "us-east-1b"})}
            )
        }
    )
    assert (
        storage.storage_zone(az) == "us-east-1b"
        and durations.link_gbps(az) is None
        and storage.efs_mount_options(az) == ["tls"]
    )
