"""KV transport from the topology, one ComputeDomain for NVLink KV, the frontend's model mount, and image CPU
architectures (issue 9 items 3-6): the rendered stacks hold, and each rule fails on the old render form."""

import copy
import json

import pytest
from conftest import STACKS, by_kind, main_container, render_with, workers
from test_aws import ROOT

from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.facts.images import image_facts
from kimi_k3.offline.synth import RenderError
from policies import rules

DISAGG = ("gb200-disagg", "gb300-disagg")
K3_IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0-kimi-k3-dev.1"
EFA_IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-efa"


def eks_cluster(stack, **changes):
    cluster = json.loads(read_stack_config(stack, ROOT).config["kimi-k3:cluster"])
    gpu = changes.pop("gpuNodes", {})
    return {**cluster, **changes, "gpuNodes": {**cluster["gpuNodes"], **gpu}}


def dgd_of(objects):
    (dgd,) = by_kind(objects, "DynamoGraphDeployment")
    return dgd


def fired(objects, rule):
    return [v.message for v in rules.run_all(objects)[0] if v.rule == rule]


def role(objects, kind):
    return next(c for c in workers(dgd_of(objects)) if c["type"] == kind)


def claims(component):
    spec = component["podTemplate"]["spec"]
    return sorted(rc["resourceClaimTemplateName"] for rc in spec["resourceClaims"])


# ------------------------------------------------------------------------------- items 4 and 5: transport
@pytest.mark.parametrize("stack", DISAGG)
def test_nvlink_kv_shares_one_compute_domain_and_clique(stack, rendered):
    objects = rendered[stack].objects
    (cd,) = by_kind(objects, "ComputeDomain")
    prefill, decode = role(objects, "prefill"), role(objects, "decode")
    assert claims(prefill) == claims(decode) == [cd["spec"]["channel"]["resourceClaimTemplate"]["name"]]
    affinity = [c["podTemplate"]["spec"]["affinity"]["podAffinity"] for c in (prefill, decode)]
    assert affinity[0] == affinity[1], "both roles pinned to one NVLink clique group"
    for c in (prefill, decode):
        main = main_container(c)
        assert "vpc.amazonaws.com/efa" not in json.dumps(main["resources"])
        assert "LIBFABRIC" not in json.dumps(main["args"])
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert "cuda_ipc" in env.get("UCX_TLS", "cuda_ipc")


def test_gb200_disagg_fits_one_ultraserver_so_kv_stays_on_nvlink(rendered):
    # 1 prefill + 1 decode, TP16 = 4 nodes each: 8 of the u-p6e-gb200x72's 18 instances.
    objects = rendered["gb200-disagg"].objects
    assert sum(c["replicas"] * c["multinode"]["nodeCount"] for c in workers(dgd_of(objects))) == 8
    assert not image_facts(main_container(role(objects, "decode"))["image"]).efa


def _old_gb300_two_domains(objects):
    """gb300-disagg as rendered before: one ComputeDomain per role."""
    old = copy.deepcopy(objects)
    (cd,) = by_kind(old, "ComputeDomain")
    second = copy.deepcopy(cd)
    second["metadata"]["name"] = "kimi-k3-gb300-disagg-decode"
    second["spec"]["channel"]["resourceClaimTemplate"]["name"] = "kimi-k3-gb300-disagg-decode-channel"
    old.append(second)
    role(old, "decode")["podTemplate"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = (
        "kimi-k3-gb300-disagg-decode-channel"
    )
    return old


def test_rule_one_compute_domain_fails_on_old_gb300_disagg(rendered):
    objects = rendered["gb300-disagg"].objects
    assert fired(objects, "nvlink-kv-roles-share-compute-domain") == []
    old = fired(_old_gb300_two_domains(objects), "nvlink-kv-roles-share-compute-domain")
    assert len(old) == 1 and "different ComputeDomains" in old[0] and "DecodeWorker claims" in old[0]


def test_rule_one_compute_domain_on_upstream_gb200_disagg_once_its_ucx_is_fixed(shared_reference):
    """Upstream's disagg-gb200 gives each role its own ComputeDomain; with its UCX contradiction fixed (cuda_ipc
    on), KV would move over NVLink across two IMEX domains: the rule says so."""
    from kimi_k3.commands import check_targets

    path = shared_reference / "dynamo" / "recipes" / "kimi-k3" / "vllm" / "disagg-gb200-agentic" / "deploy.yaml"
    objects = check_targets.yaml_objects(path.read_text())
    assert fired(objects, "nvlink-kv-roles-share-compute-domain") == []  # as shipped: KV leaves NVLink (^cuda_ipc)
    for c in workers(dgd_of(objects)):
        for e in main_container(c)["env"]:
            if e["name"] == "UCX_TLS":
                e["value"] = "cuda_copy,cuda_ipc,tcp"
    assert len(fired(objects, "nvlink-kv-roles-share-compute-domain")) == 1


def _old_gb200_efa(objects):
    """gb200-disagg as rendered before: NIXL LIBFABRIC and EFA devices on the (non-EFA) K3 image."""
    old = copy.deepcopy(objects)
    for c in (role(old, "prefill"), role(old, "decode")):
        main = main_container(c)
        i = main["args"].index("--kv-transfer-config")
        conf = json.loads(main["args"][i + 1])
        conf["kv_connector_extra_config"] = {"backends": ["LIBFABRIC"]}
        main["args"][i + 1] = json.dumps(conf)
        for k in ("limits", "requests"):
            main["resources"][k]["vpc.amazonaws.com/efa"] = "4"
    return old


def test_rule_transport_image_consistency_fails_on_old_gb200_disagg(rendered):
    objects = rendered["gb200-disagg"].objects
    assert fired(objects, "kv-transport-consistent") == []
    old = fired(_old_gb200_efa(objects), "kv-transport-consistent")
    assert len(old) == 2 and all("has no EFA stack" in m and K3_IMAGE in m for m in old)


def test_graph_beyond_one_nvlink_domain_needs_an_efa_image():
    # pdRatio 3:2 -> 5 x TP16 = 20 nodes > 18: KV must cross EFA, and the K3 build has no -efa image
    # (an existing cluster: eks mode keeps a graph inside one UltraServer, test below).
    with pytest.raises(RenderError) as info:
        render_with(
            "gb200-disagg",
            serving={"pdRatio": "3:2"},
            cluster={"mode": "render", "efaDevicesPerNode": 4},
            storage={"kind": "existing", "storageClass": "lustre"},
        )
    message = str(info.value)
    assert "kimi-k3:serving.image" in message and "20 nodes" in message and "-efa" in message
    assert info.value.registered == []


def test_graph_beyond_one_nvlink_domain_with_an_efa_image_moves_kv_over_efa():
    # (eks mode keeps a graph inside one UltraServer, kimi_k3/aws/nodes.py; an existing cluster may span racks)
    r = render_with(
        "gb200-disagg",
        serving={"pdRatio": "3:2", "image": EFA_IMAGE, "runtimeVersion": "1.5.0"},
        cluster={"mode": "render", "efaDevicesPerNode": 4},
        storage={"kind": "existing", "storageClass": "lustre"},
    )
    cds = by_kind(r.objects, "ComputeDomain")
    assert len(cds) == 2, "over EFA each role keeps its own ComputeDomain (its TP groups' IMEX domain)"
    for kind in ("prefill", "decode"):
        main = main_container(role(r.objects, kind))
        assert main["resources"]["limits"]["vpc.amazonaws.com/efa"] == "4"
        assert "LIBFABRIC" in main["args"][main["args"].index("--kv-transfer-config") + 1]
    for rule in ("kv-transport-consistent", "nvlink-kv-roles-share-compute-domain", "efa-uses-libfabric"):
        assert fired(r.objects, rule) == [], rule


def test_smaller_ultraserver_moves_the_same_graph_to_efa():
    # ultraServerNodes 9 (u-p6e-gb200x36): 8 nodes still fit; pdRatio 2:1 (12 nodes) does not (eks: the GPU node
    # plan refuses a graph beyond one UltraServer, naming the size that fits).
    r = render_with("gb200-disagg", cluster=eks_cluster("gb200-disagg", gpuNodes={"ultraServerNodes": 9}))
    assert len(by_kind(r.objects, "ComputeDomain")) == 1
    with pytest.raises(RenderError, match="needs 12 GPU nodes, more than one UltraServer holds; allowed: 18"):
        render_with(
            "gb200-disagg",
            serving={"pdRatio": "2:1"},
            cluster=eks_cluster("gb200-disagg", gpuNodes={"ultraServerNodes": 9}),
        )


# ------------------------------------------------------------------------------- item 3: frontend mount
@pytest.mark.parametrize("stack", STACKS)
def test_frontend_reads_the_model_path_workers_register(stack, rendered):
    objects = rendered[stack].objects
    (pvc,) = [p for p in by_kind(objects, "PersistentVolumeClaim") if p["metadata"]["name"] == "kimi-k3-model-cache"]
    fe = next(c for c in dgd_of(objects)["spec"]["components"] if c["type"] == "frontend")
    spec, main = fe["podTemplate"]["spec"], main_container(fe)
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = main["volumeMounts"]
    assert mount["readOnly"] and volumes[mount["name"]]["persistentVolumeClaim"] == {
        "claimName": pvc["metadata"]["name"],
        "readOnly": True,
    }
    model_path = rendered[stack].outputs["modelPath"]
    assert model_path.startswith(mount["mountPath"].rstrip("/") + "/")
    assert {e["name"]: e["value"] for e in main["env"]}["HF_HUB_OFFLINE"] == "1"
    assert fired(objects, "frontend-reads-model-path") == []
    old = copy.deepcopy(objects)  # the old form: no cache mount on the frontend
    fe_old = next(c for c in dgd_of(old)["spec"]["components"] if c["type"] == "frontend")
    del fe_old["podTemplate"]["spec"]["volumes"], main_container(fe_old)["volumeMounts"]
    messages = fired(old, "frontend-reads-model-path")
    assert len(messages) == 1 and f"cannot read {model_path}" in messages[0]


# ------------------------------------------------------------------------------- item 6: CPU architecture
@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_is_pinned_to_an_architecture_its_image_runs_on(stack, rendered):
    objects = rendered[stack].objects
    pods = [c["podTemplate"]["spec"] for c in dgd_of(objects)["spec"]["components"]]
    pods += [j["spec"]["template"]["spec"] for j in by_kind(objects, "Job")]
    for spec in pods:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for term in terms:
            (arch,) = [e for e in term["matchExpressions"] if e["key"] == "kubernetes.io/arch"]
            for container in spec["containers"]:
                assert set(arch["values"]) <= image_facts(container["image"]).arch
    for c in workers(dgd_of(objects)):
        (term,) = c["podTemplate"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]} in term["matchExpressions"]
    violations, skipped = rules.run_all(objects)
    assert not [v for v in violations if v.rule == "pods-run-on-image-arch"]
    assert not [s for s in skipped if s.rule == "pods-run-on-image-arch"], "every image's architectures are known"


def test_frontend_runs_in_the_gpu_zone_on_any_arch_its_image_has(rendered):
    """eks: the only nodes in the GPU zone (the Dallas Local Zone) are the arm64 GPU nodes; the multi-arch image
    runs there (tests/stacks/test_frontend_zone.py holds the placement itself)."""
    fe = next(c for c in dgd_of(rendered["gb200"].objects)["spec"]["components"] if c["type"] == "frontend")
    term = fe["podTemplate"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1-dfw-2a"]},
    ]


def test_rule_fails_when_an_unpinned_pod_runs_a_single_arch_image(rendered):
    """The old render form (no arch pin on the frontend) with an amd64-only image: it may land on arm64 nodes."""
    old = copy.deepcopy(rendered["gb300"].objects)
    fe = next(c for c in dgd_of(old)["spec"]["components"] if c["type"] == "frontend")
    del fe["podTemplate"]["spec"]["affinity"]
    main_container(fe)["image"] = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.0-efa-amd64"
    messages = fired(old, "pods-run-on-image-arch")
    assert len(messages) == 1 and "may run on amd64, arm64 nodes (no architecture pin)" in messages[0]


def test_image_for_the_wrong_architecture_is_refused_before_anything_is_created():
    with pytest.raises(RenderError) as info:
        render_with(
            "gb300",
            serving={"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.1.0-efa-amd64", "runtimeVersion": "1.1.0"},
        )
    assert "built for amd64" in str(info.value) and "gb300 GPU nodes are arm64" in str(info.value)
    assert info.value.registered == []


def test_rule_nvlink_roles_pinned_to_different_cliques(rendered):
    old = copy.deepcopy(rendered["gb300-disagg"].objects)
    term = role(old, "decode")["podTemplate"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ][0]
    term["labelSelector"] = {"matchLabels": {"kimi-k3.io/nvlink-group": "kimi-k3-gb300-disagg-decode"}}
    messages = fired(old, "nvlink-kv-roles-share-compute-domain")
    assert len(messages) == 1 and "different nvidia.com/gpu.clique groups" in messages[0]
