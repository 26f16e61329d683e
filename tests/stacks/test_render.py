"""`kimi-k3 render` of the four stacks: files, totals, model path, claims, clique pinning, ordering, secrets."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, STACKS, by_kind, env_of, flag, main_container, model_cache_pvcs, render_with, workers

# The GPU/node totals per upstream profile (README stacks table).
EXPECTED = {"gb200": (16, 4), "gb200-disagg": (32, 8), "gb300": (16, 4), "gb300-disagg": (24, 6)}


def dgd_of(r):
    (dgd,) = by_kind(r.objects, "DynamoGraphDeployment")
    return dgd


@pytest.fixture(scope="module")
def cli_render(tmp_path_factory):
    """`kimi-k3 render` of all four stacks in ONE process (how the tools render several), from another working
    directory and with another hash seed than this test process."""
    import os

    out = tmp_path_factory.mktemp("cli-render")
    proc = subprocess.run(
        [sys.executable, "-m", "kimi_k3", "render", *STACKS, "--out", str(out)],
        cwd=ROOT / "tests",
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


@pytest.mark.parametrize("stack", STACKS)
def test_cli_render_writes_both_files(stack, cli_render):
    out = cli_render[0] / stack
    docs = [
        d
        for d in yaml.load_all(
            (out / "manifests.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
        if d
    ]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "Secret", "PersistentVolumeClaim", "Job", "ComputeDomain", "DynamoGraphDeployment"} <= kinds
    resources = json.loads((out / "resources.json").read_text())["resources"]
    for r in resources:
        assert set(r) >= {"urn", "type", "name", "parent", "provider", "dependsOn", "protect", "inputs"}
    assert f"{stack}: " in cli_render[1]  # each stack reports its own line


@pytest.mark.parametrize("stack", STACKS)
def test_render_is_byte_identical(stack, rendered, cli_render, tmp_path):
    """Same commit, same bytes: across processes, hash seeds, working directories and several stacks per process."""
    rendered[stack].write(tmp_path / "a")
    for name in ("manifests.yaml", "resources.json"):
        assert (tmp_path / "a" / name).read_bytes() == (cli_render[0] / stack / name).read_bytes()


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_and_node_totals(stack, rendered):
    gpus = nodes = 0
    for c in workers(dgd_of(rendered[stack])):
        per_pod = int(main_container(c)["resources"]["limits"]["nvidia.com/gpu"])
        nodes += c["replicas"] * c["multinode"]["nodeCount"]
        gpus += c["replicas"] * c["multinode"]["nodeCount"] * per_pod
    assert (gpus, nodes) == EXPECTED[stack]
    assert (rendered[stack].outputs["gpus"], rendered[stack].outputs["nodes"]) == EXPECTED[stack]


@pytest.mark.parametrize("stack", STACKS)
def test_tp_fills_whole_nodes(stack, rendered):
    for c in workers(dgd_of(rendered[stack])):
        main = main_container(c)
        tp = int(flag(main["args"], "--tensor-parallel-size"))
        assert (
            tp
            == c["multinode"]["nodeCount"] * int(main["resources"]["limits"]["nvidia.com/gpu"])
            == c["multinode"]["nodeCount"] * 4
        )


@pytest.mark.parametrize("stack", STACKS)
def test_model_path_is_absolute_under_the_read_only_cache_mount(stack, rendered):
    (pvc,) = model_cache_pvcs(rendered[stack].objects)
    paths = set()
    for c in workers(dgd_of(rendered[stack])):
        spec = c["podTemplate"]["spec"]
        main = main_container(c)
        cache_volumes = {
            v["name"]
            for v in spec["volumes"]
            if v.get("persistentVolumeClaim", {}).get("claimName") == pvc["metadata"]["name"]
        }
        # eks mode: the node-local copy (hostPath on the instance-store RAID0, laid out by the weights prefetch)
        local_volumes = {
            v["name"]
            for v in spec["volumes"]
            if v.get("hostPath", {}).get("path", "").startswith("/mnt/k8s-disks/0/kimi-k3-weights/")
        }
        mounts = [m for m in main["volumeMounts"] if m["name"] in cache_volumes | local_volumes]
        assert mounts and all(m.get("readOnly") for m in mounts)
        model = flag(main["args"], "--model")
        resolved = re.sub(r"\$\((\w+)\)", lambda m: env_of(main)[m.group(1)], model)
        assert resolved.startswith("/") and "$" not in resolved
        under = [m for m in mounts if resolved.startswith(m["mountPath"].rstrip("/") + "/")]
        assert len(under) == 1
        assert under[0]["name"] in local_volumes, "the stacks load the node-local copy"
        paths.add(
            (
                resolved,
                flag(main["args"], "--served-model-name").replace(
                    "$(SERVED_MODEL_NAME)", env_of(main)["SERVED_MODEL_NAME"]
                ),
            )
        )
    assert len(paths) == 1, "all roles must serve one model from one path"
    assert rendered[stack].outputs["modelPath"] == next(iter(paths))[0]


@pytest.mark.parametrize("stack", STACKS)
def test_no_container_references_an_undefined_env_var(stack, rendered):
    containers = []
    for obj in rendered[stack].objects:
        if obj["kind"] == "DynamoGraphDeployment":
            containers += [main_container(c) for c in obj["spec"]["components"]]
        if obj["kind"] == "Job":
            spec = obj["spec"]["template"]["spec"]
            containers += spec["containers"] + spec.get("initContainers", [])
    for container in containers:
        defined = {e["name"] for e in container.get("env", [])}
        text = " ".join(container.get("command", []) + container.get("args", []))
        refs = set(re.findall(r"\$\((\w+)\)", text)) | set(re.findall(r"\$\{?([A-Za-z_]\w*)\}?", text))
        assert refs <= defined, f"{container['name']}: undefined {sorted(refs - defined)}"


@pytest.mark.parametrize("stack", STACKS)
def test_claims_match_compute_domain_templates(stack, rendered):
    templates = {
        cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
        for cd in by_kind(rendered[stack].objects, "ComputeDomain")
    }
    used = set()
    for c in workers(dgd_of(rendered[stack])):
        spec = c["podTemplate"]["spec"]
        pod_claims = {rc["name"]: rc["resourceClaimTemplateName"] for rc in spec["resourceClaims"]}
        container_claims = {cl["name"] for cl in main_container(c)["resources"]["claims"]}
        assert container_claims and container_claims <= set(pod_claims)
        used |= {pod_claims[n] for n in container_claims}
    assert used == templates, "every ComputeDomain is claimed"
    assert len(templates) == 1, "KV moves over NVLink in all four stacks: every role claims the one ComputeDomain"


@pytest.mark.parametrize("stack", STACKS)
def test_tp_groups_pinned_to_one_nvlink_clique(stack, rendered):
    for c in workers(dgd_of(rendered[stack])):
        pod = c["podTemplate"]
        terms = pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        clique = [t for t in terms if t["topologyKey"] == "nvidia.com/gpu.clique"]
        assert clique, c["name"]
        selector = clique[0]["labelSelector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items(), "the pod must match its own affinity"


def _resource(r, type_suffix, name_suffix=""):
    (res,) = [
        x
        for x in r.resources
        if x["type"].endswith(type_suffix) and x["name"].endswith(name_suffix) and "compile-cache" not in x["name"]
    ]
    return res


@pytest.mark.parametrize("stack", STACKS)
def test_model_cache_is_retained_not_protected(stack, rendered):
    pvc = _resource(rendered[stack], ":PersistentVolumeClaim")
    # retainOnDelete: Pulumi never deletes it; not protect, which blocks `pulumi destroy` and keeps the cluster.
    assert pvc["retainOnDelete"] and not pvc["protect"]
    assert pvc["ignoreChanges"] == ["spec.resources.requests.storage"], "a new size must not fail `pulumi up`"
    pvc_spec = pvc["inputs"]["spec"]
    assert pvc_spec["accessModes"] == ["ReadWriteMany"]
    size_gi = int(pvc_spec["resources"]["requests"]["storage"].removesuffix("Gi"))
    assert 1.56e12 / 2**30 < size_gi <= 2 * 1.56e12 / 2**30, "sized from the ~1.56 TB checkpoint with headroom"
    assert _resource(rendered[stack], ":Namespace")["retainOnDelete"], "deleting the namespace would delete the PVC"


@pytest.mark.parametrize("stack", STACKS)
def test_download_verified_before_workers_start(stack, rendered):
    r = rendered[stack]
    job = _resource(r, ":Job", "-model-cache-download")
    dgd = _resource(r, ":DynamoGraphDeployment")
    assert job["urn"] in dgd["dependsOn"]
    for cd in [x for x in r.resources if x["type"].endswith(":ComputeDomain")]:
        assert cd["urn"] in dgd["dependsOn"]
    assert _resource(r, ":PersistentVolumeClaim")["urn"] in job["dependsOn"]
    assert _resource(r, "core/v1:Secret")["urn"] in job["dependsOn"]
    spec = job["inputs"]["spec"]["template"]["spec"]
    # storage kind s3: the EC2 fetchers download from t=0; the Job runs no `hf download`, it waits for them (it
    # starts after they launched) and verifies every shard on the read-only bucket mount before any worker starts.
    assert "hf download" not in spec["containers"][0]["args"][0]
    fetchers = [x["urn"] for x in r.resources if x["type"] == "aws:ec2/instance:Instance"]
    assert len(fetchers) == 4 and set(fetchers) <= set(job["dependsOn"])
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    # the verify step gives up (naming what is missing) before the Job's deadline, which is before the provider's
    assert (
        int(env["VERIFY_WAIT_SECONDS"])
        < job["inputs"]["spec"]["activeDeadlineSeconds"]
        < int(job["inputs"]["metadata"]["annotations"]["pulumi.com/timeoutSeconds"])
    )
    assert env["VERIFY_WRITE_MARKER"] == "0"
    assert all(m.get("readOnly") for m in spec["containers"][0]["volumeMounts"] if m["name"] == "model-cache")
    assert spec["containers"][0]["args"][0].rstrip().endswith("verify_checkpoint.py")
    assert "pulumi.com/waitFor" not in job["inputs"]["metadata"]["annotations"]
    assert spec["nodeSelector"] == {"kimi-k3.io/node-role": "system"}, "eks: the Job never takes a GPU node"


@pytest.mark.parametrize("stack", STACKS)
def test_pulumi_up_waits_for_the_graph_ready(stack, rendered):
    # The graph-ready Job does the waiting (tests/unit/test_graph_watch.py); the graph itself is not awaited.
    dgd = dgd_of(rendered[stack])
    assert dgd["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    (job,) = [j for j in by_kind(rendered[stack].objects, "Job") if j["metadata"]["name"] == "kimi-k3-graph-ready"]
    assert int(job["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]) > job["spec"]["activeDeadlineSeconds"] > 0


def test_probe_budget_timeouts_and_shm_come_from_config():
    r = render_with(
        "gb300-disagg",
        serving={
            "startupProbeSeconds": 3600,
            "readyTimeoutSeconds": 5000,
            "roles": {"decode": {"sharedMemorySize": "64Gi"}},
        },
    )
    dgd = dgd_of(r)
    decode = next(c for c in workers(dgd) if c["type"] == "decode")
    prefill = next(c for c in workers(dgd) if c["type"] == "prefill")
    probe = main_container(decode)["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 3600
    assert env_of(main_container(decode))["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    (ready,) = [j for j in by_kind(r.objects, "Job") if j["metadata"]["name"] == "kimi-k3-graph-ready"]
    assert ready["spec"]["activeDeadlineSeconds"] == 5000
    assert (decode["sharedMemorySize"], prefill["sharedMemorySize"]) == ("64Gi", "200Gi")


def test_overrides_replicas_ratio_image_args_env():
    r = render_with(
        "gb300-disagg",
        serving={
            "pdRatio": "2:3",
            "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0",
            "roles": {
                "decode": {
                    "extraArgs": {"--max-num-seqs": "128", "--enforce-eager": True},
                    "env": {"NCCL_DEBUG": "INFO", "TORCH_SYMMMEM": None},
                }
            },
        },
    )
    dgd = dgd_of(r)
    decode = next(c for c in workers(dgd) if c["type"] == "decode")
    prefill = next(c for c in workers(dgd) if c["type"] == "prefill")
    assert (prefill["replicas"], decode["replicas"]) == (2, 3)
    assert r.outputs["gpus"] == (2 + 3) * 8
    main = main_container(decode)
    assert main["image"].endswith(":1.5.0") and "runtimeVersionOverride" not in decode
    assert flag(main["args"], "--max-num-seqs") == "128" and main["args"].count("--max-num-seqs") == 1
    assert flag(main["args"], "--enforce-eager") is True
    assert env_of(main)["NCCL_DEBUG"] == "INFO" and "TORCH_SYMMMEM" not in env_of(main)


def test_hf_token_never_rendered_in_plaintext(tmp_path):
    token = "hf_plaintext_must_not_leak_123"
    r = render_with("gb200", hfToken=token)
    r.write(tmp_path)
    for name in ("manifests.yaml", "resources.json"):
        assert token not in (tmp_path / name).read_text()
    secret = _resource(r, "core/v1:Secret")
    assert secret["inputs"]["stringData"] == {"HF_TOKEN": "[secret]"}


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs(stack, rendered):
    out = rendered[stack].outputs
    assert out["namespace"] == "kimi-k3"
    assert out["frontendService"] == "kimi-k3-frontend.kimi-k3.svc.cluster.local:8000"
    assert out["modelPath"] == "/model-cache/moonshotai/Kimi-K3@" + "0" * 40, "one directory per pinned commit"


@pytest.mark.parametrize("stack", STACKS)
def test_components_follow_pulumi_conventions(stack, rendered):
    resources = rendered[stack].resources
    components = {r["urn"]: r for r in resources if r["type"].startswith("kimi-k3:")}
    # eks mode (the stacks' default since the AWS issue) adds the cluster, the storage and the add-ons.
    assert {r["type"] for r in components.values()} == {
        "kimi-k3:cluster:Cluster",
        "kimi-k3:model:ModelCache",
        "kimi-k3:serving:ServingGraph",
        "kimi-k3:aws:GpuCluster",
        "kimi-k3:aws:ModelStorage",
        "kimi-k3:platform:Addons",
        "kimi-k3:monitoring:Monitoring",
    }
    for r in resources:
        if r["type"].startswith(("kubernetes:", "aws:")):
            parent = components[r["parent"]]
            assert r["name"].startswith(parent["name"] + "-"), r["name"]
            if r["type"].startswith("kubernetes:"):
                assert r["provider"].endswith("kimi-k3-cluster-provider"), r["name"]


def test_existing_cluster_gets_its_kubeconfig_as_a_secret_and_its_context():
    kubeconfig = "apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: do-not-print}}]\n"
    r = render_with(
        "gb300",
        cluster={"mode": "existing", "context": "gb300-prod"},
        kubeconfig=kubeconfig,
        storage={"kind": "existing", "storageClass": "fsx-lustre", "provisioner": "fsx.csi.aws.com"},
    )
    (provider,) = [x for x in r.resources if x["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"]["kubeconfig"] == "[secret]" and provider["inputs"]["context"] == "gb300-prod"
    assert "renderYamlToDirectory" not in provider["inputs"]
    assert "do-not-print" not in json.dumps(r.resources)


def test_render_mode_writes_yaml_to_the_configured_directory():
    # The stack files are eks mode since the AWS issue; render mode is one override away.
    r = render_with(
        "gb300",
        cluster={"mode": "render", "renderDir": "rendered/gb300"},
        storage={"storageClass": "fsx-lustre", "provisioner": "fsx.csi.aws.com"},
    )
    (provider,) = [x for x in r.resources if x["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"]["renderYamlToDirectory"] == "rendered/gb300"


@pytest.mark.parametrize("stack", STACKS)
def test_per_user_values_are_placeholders_offline_and_required_by_pulumi_up(stack, rendered):
    """A shared stack file holds no token and no reservation: render says what it assumed, the real run refuses."""
    from kimi_k3.offline.synth import RenderError, render_config

    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    assert "kimi-k3:hfToken" not in doc and "capacityReservationId" not in doc["kimi-k3:cluster"]["gpuNodes"]
    assert rendered[stack].assumed == [
        "kimi-k3:hfToken = [secret]",
        "kimi-k3:cluster.gpuNodes.capacityReservationId = cr-00000000000000000",
        "kimi-k3:cluster.publicAccessCidrs = [203.0.113.0/24]",
        "kimi-k3:model.revision = 0000000000000000000000000000000000000000 (no commit pinned: `pulumi up` refuses)",
    ]
    as_engine_passes_it = {k: v if isinstance(v, str) else json.dumps(v) for k, v in doc.items()}
    as_engine_passes_it["kimi-k3:hfToken"] = "hf_x"
    # No commit known here: the stack files pin none, and the real run refuses before it registers anything.
    with pytest.raises(RenderError, match="kimi-k3:model.revision: required") as info:
        render_config(stack, as_engine_passes_it, {"kimi-k3:hfToken"}, ROOT)
    assert info.value.registered == []
    as_engine_passes_it["kimi-k3:model"] = json.dumps({"revision": "0123456789abcdef0123456789abcdef01234567"})
    with pytest.raises(RenderError, match="capacityReservationId") as info:
        render_config(stack, as_engine_passes_it, {"kimi-k3:hfToken"}, ROOT)
    assert info.value.registered == []
    # With the reservation set, the next per-user value `up` asks for: the networks allowed to reach the API.
    cluster = {**doc["kimi-k3:cluster"]}
    cluster["gpuNodes"] = {**cluster["gpuNodes"], "capacityReservationId": "cr-0123456789abcdef0"}
    as_engine_passes_it["kimi-k3:cluster"] = json.dumps(cluster)
    with pytest.raises(RenderError, match="publicAccessCidrs: required") as info:
        render_config(stack, as_engine_passes_it, {"kimi-k3:hfToken"}, ROOT)
    assert info.value.registered == []


def _clique_groups(r):
    return {c["type"]: c["podTemplate"]["metadata"]["labels"]["kimi-k3.io/nvlink-group"] for c in workers(dgd_of(r))}


def test_kv_over_nvlink_keeps_both_roles_in_one_clique(rendered):
    groups = _clique_groups(rendered["gb300-disagg"])
    assert groups["prefill"] == groups["decode"], "prefill hands KV to decode over NVLink: same clique"
    for c in workers(dgd_of(rendered["gb300-disagg"])):
        assert "LIBFABRIC" not in flag(main_container(c)["args"], "--kv-transfer-config")


def test_kv_over_efa_pins_each_role_to_its_own_clique():
    # Only when prefill + decode exceed one NVLink domain (here 20 nodes) and the image carries EFA.
    r = render_with(
        "gb200-disagg",
        serving={
            "pdRatio": "3:2",
            "runtimeVersion": "1.5.0",
            "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-efa",
        },
        cluster={"mode": "render", "efaDevicesPerNode": 4},
        storage={"kind": "existing", "storageClass": "lustre"},
    )
    groups = _clique_groups(r)
    assert groups["prefill"] != groups["decode"], "KV crosses EFA, so each role may use a different rack"
    for c in workers(dgd_of(r)):
        main = main_container(c)
        assert json.loads(flag(main["args"], "--kv-transfer-config"))["kv_connector_extra_config"]["backends"] == [
            "LIBFABRIC"
        ]
        assert int(main["resources"]["limits"]["vpc.amazonaws.com/efa"]) > 0


def test_urns_are_the_engines(rendered):
    """The engine leaves the root stack's type out of its children's URNs (pulumi/pulumi pkg/resource/deploy/
    deployment.go generateURN); Pulumi's mock monitor adds it, which gave top-level components URNs the engine never
    uses (found by the engine lane comparing dependencies)."""
    for stack in STACKS:
        for r in rendered[stack].resources:
            assert "pulumi:pulumi:Stack$" not in r["urn"] + "".join(r["dependsOn"]), r["urn"]
            if r["parent"].split("::")[2] == "pulumi:pulumi:Stack":
                assert r["urn"] == f"urn:pulumi:{stack}::kimi-k3::{r['type']}::{r['name']}"
