"""gke mode under the mock engine: the GKE cluster, its pools, the weights bucket's least-privilege access, the GPU
pods' A4X Max wiring, and the rule that catches a pod that would not schedule there (old form: without it)."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import ROOT, assert_one_clear_error, by_kind
from support import render_stack_once as render_stack  # one render per stack per session

from kimi_k3.config.stack_files import read_stack_config
from policies.rules import RULES, Context, evaluate
from policies.rules.engine_form import resource_info

GKE = ("gke-gb300-disagg", "gke-gb200")
RULE = next(r for r in RULES if r.name == "a4x-max-pods-schedule")


@pytest.fixture(scope="module")
def gke_rendered():
    return {s: render_stack(s, ROOT) for s in GKE}


def ctx(r):
    """The rule's context as `pulumi preview` gives it: the stack's resources (its GPU pool among them)."""
    infos = [resource_info(x["type"], x["name"], x["inputs"], x["protect"], x["retainOnDelete"]) for x in r.resources]
    return Context(resources=infos)


def one(r, type_, suffix=""):
    (res,) = [x for x in r.resources if x["type"] == type_ and x["name"].endswith(suffix)]
    return res["inputs"]


def workers(r):
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    return dgd, [c for c in dgd["spec"]["components"] if c["type"] in ("prefill", "decode", "worker")]


def test_a4x_max_pool_reservation_profile_and_private_cluster(gke_rendered):
    r = gke_rendered["gke-gb300-disagg"]
    pool = one(r, "gcp:container/nodePool:NodePool", "-gpu-nodes")
    node = pool["nodeConfig"]
    assert node["machineType"] == "a4x-maxgpu-4g-metal" and node["imageType"] == "COS_CONTAINERD"
    assert node["guestAccelerators"][0]["type"] == "nvidia-gb300" and node["guestAccelerators"][0]["count"] == 4
    assert pool["networkConfig"] == {"acceleratorNetworkProfile": "auto"}
    assert node["labels"]["cloud.google.com/gke-networking-dra-driver"] == "true"
    affinity = node["reservationAffinity"]
    assert affinity["consumeReservationType"] == "SPECIFIC_RESERVATION"
    assert "/reservationSubBlocks/" in affinity["values"][0]
    assert pool["nodeCount"] == r.outputs["nodes"] == 6
    cluster = one(r, "gcp:container/cluster:Cluster")
    assert cluster["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert cluster["privateClusterConfig"]["enablePrivateNodes"] is True
    assert cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"], "authorized networks: per user, placeholder here"
    assert cluster["workloadIdentityConfig"]["workloadPool"].endswith(".svc.id.goog")
    assert cluster["minMasterVersion"] == "1.34.3-gke.1318000"


def test_a4x_uses_multi_networking(gke_rendered):
    r = gke_rendered["gke-gb200"]
    pool = one(r, "gcp:container/nodePool:NodePool", "-gpu-nodes")
    assert pool["nodeConfig"]["machineType"] == "a4x-highgpu-4g"
    assert len(pool["networkConfig"]["additionalNodeNetworkConfigs"]) == 5  # gVNIC + 4 RDMA subnets
    assert one(r, "gcp:container/cluster:Cluster")["enableMultiNetworking"] is True
    names = sorted(o["metadata"]["name"] for o in by_kind(r.objects, "Network"))
    assert names == ["gvnic-1", "rdma-0", "rdma-1", "rdma-2", "rdma-3"]
    _, ws = workers(r)
    assert all("networking.gke.io/interfaces" in w["podTemplate"]["metadata"]["annotations"] for w in ws)


def test_workers_read_only_fetcher_writes(gke_rendered):
    r = gke_rendered["gke-gb300-disagg"]
    members = {
        x["inputs"]["role"]: x["inputs"]["member"]
        for x in r.resources
        if x["type"] == "gcp:storage/bucketIAMMember:BucketIAMMember"
    }
    assert members["roles/storage.objectViewer"].endswith("/sa/kimi-k3-weights-reader")
    assert members["roles/storage.objectAdmin"].endswith("/sa/kimi-k3-weights-fetcher")
    bucket = [x for x in r.resources if x["type"] == "gcp:storage/bucket:Bucket"][0]
    assert bucket["protect"] and bucket["retainOnDelete"] and bucket["inputs"]["publicAccessPrevention"] == "enforced"
    (job,) = by_kind(r.objects, "Job")[:1] or [None]
    download = [j for j in by_kind(r.objects, "Job") if j["metadata"]["name"] == "kimi-k3-model-download"][0]
    assert download["spec"]["template"]["spec"]["serviceAccountName"] == "kimi-k3-weights-fetcher"
    _, ws = workers(r)
    for w in ws:
        spec = w["podTemplate"]["spec"]
        assert spec["serviceAccountName"] == "kimi-k3-weights-reader"
        mounts = [m for m in w["podTemplate"]["spec"]["containers"][0]["volumeMounts"] if m["name"] == "model-cache"]
        assert mounts[0]["readOnly"] is True


def test_rule_passes_our_gke_stacks(gke_rendered):
    for s in GKE:
        violations, _ = evaluate(RULE, gke_rendered[s].objects, ctx(gke_rendered[s]))
        assert violations == [], (s, violations)


@pytest.mark.parametrize("strip", ["selector", "claim"])
def test_rule_fails_the_old_form(gke_rendered, strip):
    """The old form: the workers as the graph built them before the cloud handed it node facts."""
    objects = copy.deepcopy(gke_rendered["gke-gb300-disagg"].objects)
    dgd = next(o for o in objects if o["kind"] == "DynamoGraphDeployment")
    for c in dgd["spec"]["components"]:
        spec = c["podTemplate"]["spec"]
        if c["type"] not in ("prefill", "decode"):
            continue
        if strip == "selector":
            del spec["nodeSelector"]["gke.networks.io/accelerator-network-profile"]
        else:
            spec["resourceClaims"] = [x for x in spec["resourceClaims"] if x["name"] != "rdma"]
            spec["containers"][0]["resources"]["claims"] = [{"name": "compute-domain-channel"}]
    violations, _ = evaluate(RULE, objects, Context())
    assert len(violations) == 2, violations
    # With the stack's resources the rule knows the pool; the same objects fail there too.
    assert len(evaluate(RULE, objects, ctx(gke_rendered["gke-gb300-disagg"]))[0]) == 2
    assert ("accelerator-network-profile" if strip == "selector" else "mrdma.google.com") in violations[0].message


def test_rule_fails_the_graph_built_without_node_facts(gke_rendered):
    """The oldest form: the EKS-shaped graph (no selector, no claim, no instance-type pin) on an A4X Max pool."""
    from kimi_k3.graph.model import NodeFacts
    from kimi_k3.k8s.deployment import graph_deployment

    r = gke_rendered["gke-gb300-disagg"]
    from dataclasses import replace

    bare = graph_deployment(replace(r.blueprint.graph, node_facts=NodeFacts()))
    violations, _ = evaluate(RULE, [bare], ctx(r))
    messages = " ".join(v.message for v in violations)
    assert "accelerator-network-profile" in messages and "mrdma.google.com" in messages, violations
    assert evaluate(RULE, [bare], Context())[0] == [], "manifests alone do not say the pool: only the pins do"


def test_a4x_max_pool_needs_a_sub_block():
    cluster = json.loads(read_stack_config("gke-gb300", ROOT).config["kimi-k3:cluster"])
    cluster["gke"]["gpuNodes"]["reservation"] = "my-reservation"
    assert_one_clear_error(
        "gke-gb300",
        {"cluster": cluster},
        [
            "Pulumi.gke-gb300.yaml",
            "kimi-k3:cluster.gke.gpuNodes.reservation",
            "'my-reservation'",
            "reservationSubBlocks",
        ],
    )


def test_gke_version_below_the_a4x_max_floor():
    cluster = json.loads(read_stack_config("gke-gb300", ROOT).config["kimi-k3:cluster"])
    cluster["gke"]["version"] = "1.34.1-gke.1000"
    assert_one_clear_error(
        "gke-gb300", {"cluster": cluster}, ["kimi-k3:cluster.gke.version", "'1.34.1-gke.1000'", "1.34.3-gke.1318000"]
    )
