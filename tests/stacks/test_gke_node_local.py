"""Issue 24: node-local weight copies on GKE's Local SSD (kimi-k3:storage.nodeLocalWeights, default true in gke mode
with a bucket), through the same cloud-neutral prefetch as EKS: the cloud hands the graph its local-disk facts.

Consumers' facts (sources in recipes/facts/gcp.yaml local_ssd): a pool's ephemeralStorageLocalSsdConfig with
localSsdCount 0 takes the machine type's bundled Local SSDs; on COS their array is mounted at
/mnt/stateful_partition/kube-ephemeral-ssd, where NVIDIA's own K3 GKE recipe keeps the model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT, assert_one_clear_error, by_kind, render_with
from support import render_stack_once as render_stack  # one render per stack per session

from kimi_k3.blueprint import Blueprint
from kimi_k3.data import recipe_file
from kimi_k3.offline import critical_path as cp

STACKS = ("gke-gb300", "gke-gb200-disagg")
NVIDIA_GKE_RECIPE = Path("/work/shared/reference/dynamo/recipes/kimi-k3/vllm/agg-gb200-agentic/deploy.yaml")
REV = "1" * 40


@pytest.fixture(scope="module")
def rendered():
    return {s: render_stack(s, ROOT) for s in STACKS}


def prefetch(r):
    (ds,) = [d for d in by_kind(r.objects, "DaemonSet") if d["metadata"]["name"] == "kimi-k3-weights-prefetch"]
    return ds["spec"]["template"]


def env(container):
    return {e["name"]: e.get("value") for e in container["env"]}


def gpu_pool(r):
    (pool,) = [
        x for x in r.resources if x["type"] == "gcp:container/nodePool:NodePool" and x["name"].endswith("-gpu-nodes")
    ]
    return pool["inputs"]


@pytest.mark.parametrize("stack", STACKS)
def test_prefetch_copies_onto_the_local_ssd_array(rendered, stack):
    r = rendered[stack]
    tmpl = prefetch(r)
    (host,) = [v["hostPath"]["path"] for v in tmpl["spec"]["volumes"] if "hostPath" in v]
    array = "/mnt/stateful_partition/kube-ephemeral-ssd"  # COS's Local SSD ephemeral-storage mount
    assert host.startswith(array + "/")
    # The prefetch copies only if its root is on that array (FS_PATH: the root within the array's filesystem).
    assert env(tmpl["spec"]["containers"][0])["FS_PATH"] == host[len(array) :]
    # The pool asks for the machine type's bundled Local SSDs as its ephemeral storage (count 0: all of them).
    assert gpu_pool(r)["nodeConfig"]["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": 0}


@pytest.mark.skipif(not NVIDIA_GKE_RECIPE.exists(), reason="/work/shared reference (NVIDIA's K3 GKE recipe) absent")
def test_host_path_is_where_nvidias_gke_recipe_keeps_the_model(rendered):
    """NVIDIA's K3 GB200 GKE manifest mounts the model from a hostPath on the node's Local SSD; ours is on the same
    array (its mount point is the longest common directory)."""

    def host_paths(node):
        if isinstance(node, dict):
            if isinstance(node.get("hostPath"), dict):
                yield node["hostPath"]["path"]
            for v in node.values():
                yield from host_paths(v)
        elif isinstance(node, list):
            for v in node:
                yield from host_paths(v)

    theirs = {p for d in yaml.safe_load_all(NVIDIA_GKE_RECIPE.read_text()) if d for p in host_paths(d)}
    assert theirs, "NVIDIA's recipe has a hostPath model volume"
    (host,) = [v["hostPath"]["path"] for v in prefetch(rendered["gke-gb300"])["spec"]["volumes"] if "hostPath" in v]
    for path in theirs:
        assert Path(path).parent == Path(host).parent, (path, host)


@pytest.mark.parametrize("stack", STACKS)
def test_prefetch_reads_the_bucket_as_a_reader(rendered, stack):
    """It mounts the GCS FUSE PV, so it needs the sidecar's annotation and a Workload Identity reader KSA (the
    fetcher's objectAdmin would be more than it needs)."""
    tmpl = prefetch(rendered[stack])
    assert tmpl["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    assert tmpl["spec"]["serviceAccountName"] == "kimi-k3-weights-reader"


@pytest.mark.parametrize("stack", STACKS)
def test_workers_load_the_local_copy_and_the_path_counts_it(rendered, stack):
    r = rendered[stack]
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    (host,) = [v["hostPath"]["path"] for v in prefetch(r)["spec"]["volumes"] if "hostPath" in v]
    gpu = [c for c in dgd["spec"]["components"] if c["type"] in ("prefill", "decode", "worker")]
    assert gpu
    for c in gpu:
        vols = {v["name"]: v for v in c["podTemplate"]["spec"]["volumes"]}
        assert vols["model-cache"]["hostPath"]["path"].startswith(host + "/")
    bp = Blueprint.for_stack(stack)  # what render and plan estimate from: the graph with the cloud's node facts
    path = cp.critical_path(r.resources, bp.durations)
    names = [s.name for s in path.steps]
    assert "kimi-k3-serving-weights-prefetch" in names
    assert "node-local" in path.steps[-1].what
    # ...at GKE's Local SSD rate, not EKS's instance-store one (the two differ in the recipes).
    gke, eks = recipe_file("facts/gcp.yaml")["local_ssd"], recipe_file("facts/storage.yaml")["nvme"]
    assert gke["read_gbps"] != eks["per_client_gbps"]
    assert f"at {gke['read_gbps']:g} GB/s" in path.steps[-1].what


def test_dspark_drafter_rides_in_the_gke_node_local_copy():
    # The v1.5 recipe (its image runs DSpark) on the A4X Max stack.
    r = render_with(
        "gke-gb300", recipe="gb300-v1.5", serving={"speculation": {"method": "dspark", "drafterRevision": REV}}
    )
    tmpl = prefetch(r)
    drafter = {c["name"]: c for c in tmpl["spec"]["containers"]}["prefetch-drafter"]
    (host,) = [v["hostPath"]["path"] for v in tmpl["spec"]["volumes"] if "hostPath" in v]
    array = "/mnt/stateful_partition/kube-ephemeral-ssd"
    e = env(drafter)
    # <model revision>/drafter/<drafter revision>/<repo>: on the same array, inside the workers' one node-local mount.
    assert e["LOCAL_ROOT"].startswith("/node-local/") and e["LOCAL_ROOT"].endswith("/drafter")
    assert e["MODEL_REVISION"] == REV
    assert e["FS_PATH"] == host[len(array) :] + e["LOCAL_ROOT"][len("/node-local") :]


def test_node_local_without_the_bucket_is_one_clear_error():
    """Only the stack's bucket (kind gcs) is what the copies come from; an existing class leaves nothing to copy."""
    assert_one_clear_error(
        "gke-gb300",
        {"storage": {"kind": "existing", "storageClass": "my-rwx", "nodeLocalWeights": True}},
        ["kimi-k3:storage.nodeLocalWeights = true", "'gke'", "'existing'", "allowed here: false"],
    )
