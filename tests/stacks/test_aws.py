"""eks mode under the mock engine: what each stack registers on AWS, the add-ons, the ordering, and bad input."""

from __future__ import annotations

import base64
import copy
import json

import pytest
import yaml
from conftest import (
    ROOT,
    STACKS,
    assert_one_clear_error,
    by_kind,
    main_container,
    model_cache_pvcs,
    render_with,
    workers,
)

from kimi_k3.config.stack_files import read_stack_config

INSTANCE = {
    "gb200": "p6e-gb200.36xlarge",
    "gb200-disagg": "p6e-gb200.36xlarge",
    "gb300": "p6e-gb300.36xlarge",
    "gb300-disagg": "p6e-gb300.36xlarge",
}
NODES = {"gb200": 4, "gb200-disagg": 8, "gb300": 4, "gb300-disagg": 6}


def one(r, type_, suffix=""):
    (res,) = [x for x in r.resources if x["type"] == type_ and x["name"].endswith(suffix)]
    return res


def eks_cluster(stack, **changes):
    """The stack's `kimi-k3:cluster` (with the offline reservation placeholder), keys replaced; gpuNodes merged."""
    cluster = json.loads(read_stack_config(stack, ROOT).config["kimi-k3:cluster"])
    gpu = changes.pop("gpuNodes", {})
    return {**cluster, **changes, "gpuNodes": {**cluster["gpuNodes"], **gpu}}


def release(r, chart_name):
    (res,) = [
        x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release" and x["inputs"]["name"] == chart_name
    ]
    return res


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_node_group_on_the_capacity_block(stack, rendered):
    r = rendered[stack]
    ng = one(r, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")["inputs"]
    assert ng["amiType"] == "AL2023_ARM_64_NVIDIA" and ng["capacityType"] == "CAPACITY_BLOCK"
    assert "instanceTypes" not in ng, "the launch template carries the instance type"
    assert ng["scalingConfig"]["desiredSize"] == NODES[stack] == r.outputs["nodes"]
    assert ng["scalingConfig"]["maxSize"] == 18, "the reservation: one u-p6e-*x72 UltraServer"
    # A replacement never needs instances beyond the reservation: old nodes go first, all at once.
    assert ng["updateConfig"] == {"updateStrategy": "MINIMAL", "maxUnavailablePercentage": 100}
    assert ng["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert ng["labels"]["kimi-k3.io/node-role"] == "gpu"
    lt = one(r, "aws:ec2/launchTemplate:LaunchTemplate", "-gpu-lt")
    assert lt["urn"] in one(r, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")["dependsOn"]
    lt = lt["inputs"]
    assert lt["instanceType"] == INSTANCE[stack]
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"].startswith(
        "cr-"
    )
    assert "placement" not in lt, "no placement group with a Capacity Block"
    nics = sorted((n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in lt["networkInterfaces"])
    # No stack moves KV over EFA (tests/stacks/test_shared_mounts_efa.py): the ENA primary only, no EFA-only interfaces.
    assert nics == [(0, 0, "interface")]
    assert all("subnetId" not in n for n in lt["networkInterfaces"]), "a managed node group sets the subnet"
    user_data = base64.b64decode(lt["userData"]).decode()
    assert "multipart/mixed" in user_data and "kind: NodeConfig" in user_data
    assert "systemctl disable --now nvidia-imex" in user_data and "systemctl mask nvidia-imex" in user_data


@pytest.mark.parametrize("stack", STACKS)
def test_eks_control_plane_network_and_access(stack, rendered):
    r = rendered[stack]
    eks = one(r, "aws:eks/cluster:Cluster")["inputs"]
    assert eks["version"] == "1.34"
    assert eks["vpcConfig"]["endpointPrivateAccess"] is True
    # Per user, like the reservation: offline tools assume TEST-NET-3; `up` without it refuses (BAD below).
    assert eks["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert eks["accessConfig"]["authenticationMode"] == "API"
    system = one(r, "aws:eks/nodeGroup:NodeGroup", "-system-nodes")["inputs"]
    assert system["capacityType"] == "ON_DEMAND" and system["labels"] == {"kimi-k3.io/node-role": "system"}
    subnets = {x["name"]: x["inputs"] for x in r.resources if x["type"] == "aws:ec2/subnet:Subnet"}
    gpu_subnet = next(s for n, s in subnets.items() if n.endswith("us-east-1-dfw-2a"))
    assert gpu_subnet["mapPublicIpOnLaunch"] is False, "GPU nodes live in a private subnet"
    s3 = one(r, "aws:ec2/vpcEndpoint:VpcEndpoint")["inputs"]
    assert s3["vpcEndpointType"] == "Gateway" and s3["serviceName"] == "com.amazonaws.us-east-1.s3"


@pytest.mark.parametrize("stack", STACKS)
def test_weights_bucket_fetchers_and_mountpoint_volume(stack, rendered):
    """Storage kind s3 (every stack): a protected, retained bucket; EC2 fetchers that need nothing of the cluster; the
    Mountpoint driver with read-only IRSA access on the tainted GPU nodes; a read-only static PV bound to the claim."""
    r = rendered[stack]
    by_urn = {x["urn"]: x for x in r.resources}
    bucket = one(r, "aws:s3/bucket:Bucket")
    assert bucket["protect"] and bucket["retainOnDelete"] and not bucket["inputs"].get("forceDestroy")
    block = one(r, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")["inputs"]
    assert all(block[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"))
    fetchers = [x for x in r.resources if x["type"] == "aws:ec2/instance:Instance"]
    assert len(fetchers) == 4
    eks = one(r, "aws:eks/cluster:Cluster")["urn"]
    for f in fetchers:
        assert f["inputs"]["tags"]["kimi-k3/role"] == "weights-fetcher"
        assert f["inputs"]["subnetId"] == "kimi-k3-eks-private-us-east-1a-id", "a Regional subnet with NAT egress"
        assert eks not in f["dependsOn"], "the fetchers start at t=0, independent of the cluster"
        assert one(r, "aws:ec2/natGateway:NatGateway")["urn"] in f["dependsOn"]
    lt = one(r, "aws:ec2/launchTemplate:LaunchTemplate", "-fetcher-lt")["inputs"]
    assert lt["instanceInitiatedShutdownBehavior"] == "terminate"
    assert lt["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1}
    assert lt["imageId"].startswith("resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023")
    addon = one(r, "aws:eks/addon:Addon", "-storage-csi-driver")["inputs"]
    assert addon["addonName"] == "aws-mountpoint-s3-csi-driver"
    assert json.loads(addon["configurationValues"]) == {"node": {"tolerateAllTaints": True}}
    role = by_urn[one(r, "aws:iam/role:Role", "-mountpoint-role")["urn"]]["inputs"]
    trust = json.loads(role["assumeRolePolicy"])["Statement"][0]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert (
        trust["Condition"]["StringEquals"]["oidc.eks.us-east-1.amazonaws.com/id/PLACEHOLDER:sub"]
        == "system:serviceaccount:kube-system:s3-csi-driver-sa"
    )
    read = json.loads(one(r, "aws:iam/rolePolicy:RolePolicy", "-mountpoint-policy")["inputs"]["policy"])
    assert sorted(a for st in read["Statement"] for a in st["Action"]) == ["s3:GetObject", "s3:ListBucket"]
    pv = one(r, "kubernetes:core/v1:PersistentVolume", "-storage-pv")
    assert pv["retainOnDelete"] and not pv["protect"], "protect would keep the cluster through a teardown"
    spec = pv["inputs"]["spec"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["csi"]["driver"] == "s3.csi.aws.com"
    assert spec["csi"]["volumeAttributes"] == {"bucketName": "kimi-k3-weights-placeholder"}
    assert spec["mountOptions"] == ["read-only", "allow-other", "region us-east-1"]
    (pvc,) = model_cache_pvcs(r.objects)
    assert spec["claimRef"] == {"namespace": pvc["metadata"]["namespace"], "name": pvc["metadata"]["name"]}
    assert spec["storageClassName"] == pvc["spec"]["storageClassName"] == "", "static binding, no provisioner"
    assert r.outputs["weightsBucket"] == "kimi-k3-weights-placeholder"


def test_fetchers_get_the_token_from_secrets_manager_not_user_data():
    import base64

    from kimi_k3.aws import storage

    text = storage.fetcher_user_data(
        bucket="b",
        prefix="moonshotai/Kimi-K3",
        repo="moonshotai/Kimi-K3",
        revision="abc",
        secret_arn="arn:aws:secretsmanager:us-east-1:1:secret:t",
        region="us-east-1",
        index=1,
        count=4,
        hub_version="1.16.4",
    )
    assert "aws secretsmanager get-secret-value --secret-id arn:aws:secretsmanager:us-east-1:1:secret:t" in text
    assert "FETCHER_INDEX=1 FETCHERS=4" in text and "huggingface_hub[hf_xet]==1.16.4" in text
    assert "trap finish EXIT" in text, "every exit powers off (run for real in tests/unit/test_fetcher_user_data.py)"
    assert len(text) < 16384, "EC2 user data is limited to 16 KB"
    script = next(line for line in text.splitlines() if line.startswith("echo '")).split("'")[1]
    assert base64.b64decode(script) == storage.FETCH_SCRIPT.read_bytes()
    r = render_with("gb200", hfToken="hf_plaintext_must_not_leak_456")
    for x in r.resources:
        assert "hf_plaintext_must_not_leak_456" not in json.dumps(x)
    assert one(r, "aws:secretsmanager/secretVersion:SecretVersion")["inputs"]["secretString"] == "[secret]"


OLD_FSX_SG = {  # the security group before issue 9 item 7: no self-referencing egress
    "ingress": [
        {"protocol": "tcp", "from_port": 988, "to_port": 988, "cidr_blocks": ["10.64.0.0/16"]},
        {"protocol": "tcp", "from_port": 1018, "to_port": 1023, "cidr_blocks": ["10.64.0.0/16"]},
        {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True},
    ],
    "egress": [{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}],
}


def test_fsx_in_the_region_without_efa_and_with_a_security_group_fsx_accepts():
    """Issue 9 items 7 and 8: no source shows FSx for Lustre in the Dallas Local Zone, so the filesystem goes to the
    first Regional zone; EFA is off (no EFA Lustre client on the nodes); the group allows all traffic within itself
    both ways, as FSx requires (the old group lacked the egress rule)."""
    from kimi_k3.aws import storage

    assert storage.fsx_security_group_problems(OLD_FSX_SG["ingress"], OLD_FSX_SG["egress"]) == [
        "no outbound all-traffic rule to the group itself"
    ]
    r = render_with("gb300", storage={"kind": "fsx-lustre", "fsx": {"storageCapacityGiB": 4800}})
    fsx = one(r, "aws:fsx/lustreFileSystem:LustreFileSystem")
    assert fsx["protect"] and fsx["retainOnDelete"]
    assert fsx["inputs"]["efaEnabled"] is False
    assert fsx["inputs"]["subnetIds"] == "kimi-k3-eks-private-us-east-1a-id"
    sg = one(r, "aws:ec2/securityGroup:SecurityGroup", "-fsx-sg")["inputs"]
    snake = (
        [
            {"protocol": x["protocol"], "from_port": x["fromPort"], "to_port": x["toPort"], "self": x.get("self")}
            for x in sg["ingress"]
        ],
        [{"protocol": x["protocol"], "self": x.get("self")} for x in sg["egress"]],
    )
    assert storage.fsx_security_group_problems(*snake) == []
    pv = one(r, "kubernetes:core/v1:PersistentVolume", "-storage-pv")["inputs"]["spec"]
    assert pv["csi"]["driver"] == "fsx.csi.aws.com" and pv["csi"]["volumeHandle"] == "kimi-k3-storage-fsx-id"
    assert r.outputs["filesystemId"] == "kimi-k3-storage-fsx-id"
    # An Availability Zone for the GPUs keeps the filesystem beside them.
    az = render_with(
        "gb300",
        storage={"kind": "fsx-lustre", "fsx": {"storageCapacityGiB": 4800}},
        cluster=eks_cluster("gb300", gpuNodes={"availabilityZone": "us-east-1b"}),
    )
    assert one(az, "aws:fsx/lustreFileSystem:LustreFileSystem")["inputs"]["subnetIds"] == (
        "kimi-k3-eks-private-us-east-1b-id"
    )


def test_public_endpoint_restricted_to_configured_cidrs():
    r = render_with("gb300", cluster=eks_cluster("gb300", publicAccessCidrs=["203.0.113.0/24", "198.51.100.7/32"]))
    vpc = one(r, "aws:eks/cluster:Cluster")["inputs"]["vpcConfig"]
    assert vpc["publicAccessCidrs"] == ["203.0.113.0/24", "198.51.100.7/32"]
    assert vpc["endpointPrivateAccess"] is True and vpc["endpointPublicAccess"] is True


def test_gpu_node_group_scaled_to_zero():
    """desiredNodes 0: before the block is active, before it ends, and before a node group upgrade (EKS docs)."""
    r = render_with("gb300-disagg", cluster=eks_cluster("gb300-disagg", gpuNodes={"desiredNodes": 0}))
    scaling = one(r, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")["inputs"]["scalingConfig"]
    assert (scaling["desiredSize"], scaling["minSize"], scaling["maxSize"]) == (0, 0, 18)
    assert r.outputs["nodes"] == 6, "the graph is unchanged; only the node group is empty"


def test_s3_import_path_adds_a_data_repository_association():
    r = render_with("gb300", storage={"kind": "fsx-lustre", "fsx": {"s3ImportPath": "s3://my-weights/kimi-k3/"}})
    dra = one(r, "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert dra["inputs"]["dataRepositoryPath"] == "s3://my-weights/kimi-k3/"
    assert dra["inputs"]["fileSystemPath"] == "/moonshotai/Kimi-K3"
    assert dra["retainOnDelete"] and dra["protect"], "kept with the filesystem: one association per path"
    # Pre-staged weights import without Hugging Face: the Job only verifies them, it downloads nothing.
    job = one(r, "kubernetes:batch/v1:Job", "-model-cache-download")["inputs"]["spec"]["template"]["spec"]
    assert "hf download" not in job["containers"][0]["args"][0]
    assert job["containers"][0]["args"][0].rstrip().endswith("verify_checkpoint.py")
    assert dra["urn"] in one(r, "kubernetes:batch/v1:Job", "-model-cache-download")["dependsOn"] or any(
        dra["urn"] in x["dependsOn"] for x in r.resources if x["type"].endswith(":Job")
    )


def test_efs_storage():
    r = render_with("gb300", storage={"kind": "efs"})
    efs = one(r, "aws:efs/fileSystem:FileSystem", "-storage-efs")
    assert efs["protect"] and efs["retainOnDelete"]
    pv = one(r, "kubernetes:core/v1:PersistentVolume", "-storage-pv")["inputs"]["spec"]
    assert pv["csi"]["driver"] == "efs.csi.aws.com"
    # GPU nodes in the Dallas Local Zone mount through the Regional zone's mount target (no EFS in the Local Zone).
    assert pv["mountOptions"] == ["tls", "az=us-east-1a"]
    assert one(r, "aws:eks/addon:Addon", "-storage-csi-driver")["inputs"]["addonName"] == "aws-efs-csi-driver"


def test_existing_storage_class_in_eks_mode():
    r = render_with("gb300", storage={"kind": "existing", "storageClass": "my-lustre"})
    assert not [x for x in r.resources if x["type"].startswith(("aws:fsx", "aws:efs"))]
    (pvc,) = model_cache_pvcs(r.objects)
    assert pvc["spec"]["storageClassName"] == "my-lustre"
    assert "filesystemId" not in r.outputs


@pytest.mark.parametrize("stack", STACKS)
def test_addon_charts_versions_and_values(stack, rendered):
    r = rendered[stack]
    gpu_op = release(r, "gpu-operator")["inputs"]
    assert gpu_op["version"] == "v25.3.4" and gpu_op["repositoryOpts"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"
    v = gpu_op["values"]
    assert (v["driver"]["enabled"], v["toolkit"]["enabled"]) == (False, False)
    assert (v["devicePlugin"]["enabled"], v["nfd"]["enabled"], v["gfd"]["enabled"]) == (True, True, True)
    # No EFA device plugin where no KV moves over EFA (tests/stacks/test_shared_mounts_efa.py has the stack that needs one).
    assert not [
        x
        for x in r.resources
        if x["type"] == "kubernetes:helm.sh/v3:Release" and x["inputs"]["name"] == "aws-efa-k8s-device-plugin"
    ]
    dra = release(r, "dra-driver-nvidia-gpu")["inputs"]
    assert dra["chart"] == "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
    assert dra["version"].startswith("0.4.")
    dv = dra["values"]
    assert dv["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
    assert dv["resourceApiVersion"] == "resource.k8s.io/v1" and dv["nvidiaDriverRoot"] == "/"
    assert dv["controller"]["nodeSelector"] == {"kimi-k3.io/node-role": "system"}
    dyn = release(r, "dynamo-platform")["inputs"]
    # Dynamo's release-artifacts page: oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform, no repo.
    assert dyn["chart"] == "oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform"
    assert "repositoryOpts" not in dyn and "repositoryOpts" not in dra
    assert dyn["version"].startswith(("1.4.", "1.5."))
    g = dyn["values"]["global"]
    assert g["grove"]["install"] and g["kai-scheduler"]["install"]
    # The chart has no nodeSelector for the operator or Grove: they are pinned by a required node affinity.
    system = {"matchExpressions": [{"key": "kimi-k3.io/node-role", "operator": "In", "values": ["system"]}]}
    for pinned in (dyn["values"]["dynamo-operator"]["controllerManager"], dyn["values"]["grove"]):
        assert "nodeSelector" not in pinned
        assert pinned["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
            "nodeSelectorTerms": [system]
        }


def test_chart_version_and_values_pinned_in_config(monkeypatch):
    # A version outside the tested platform set is refused (kimi_k3/k8s/platform_set.py); once the set lists it,
    # the stack's override reaches the release.
    from kimi_k3.k8s import platform_set
    from kimi_k3.offline.synth import RenderError

    with pytest.raises(RenderError, match="dynamoPlatform.version = 1.4.1: not in the tested platform set"):
        render_with("gb300", platform={"dynamoPlatform": {"version": "1.4.1"}})
    tested = copy.deepcopy(platform_set.platform_set())
    tested["dynamoPlatform"]["1.4.1"] = {"requires": {"draDriver": ["0.4.1"]}}
    tested["runtimeImages"]["nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0-kimi-k3-dev.1"]["platforms"] += ["1.4"]
    monkeypatch.setattr(platform_set, "platform_set", lambda: tested)
    r = render_with(
        "gb300", platform={"dynamoPlatform": {"version": "1.4.1"}, "draDriver": {"values": {"logVerbosity": "6"}}}
    )
    assert release(r, "dynamo-platform")["inputs"]["version"] == "1.4.1"
    dv = release(r, "dra-driver-nvidia-gpu")["inputs"]["values"]
    assert dv["logVerbosity"] == "6" and dv["resources"]["computeDomains"]["enabled"] is True


def test_existing_cluster_can_assume_addons_present():
    r = render_with(
        "gb300",
        cluster={"mode": "existing"},
        kubeconfig="apiVersion: v1\n",
        storage={"kind": "existing", "storageClass": "fsx"},
        platform={"draDriver": {"install": True}},
    )
    charts = [x["inputs"]["name"] for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release"]
    assert charts == ["dra-driver-nvidia-gpu"], "only what the stack asks to install; the rest is assumed present"
    assert not [x for x in r.resources if x["type"].startswith("aws:")]
    dgd = one(r, "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    assert release(r, "dra-driver-nvidia-gpu")["urn"] in dgd["dependsOn"]


@pytest.mark.parametrize("stack", STACKS)
def test_dependency_order(stack, rendered):
    r = rendered[stack]
    by_urn = {x["urn"]: x for x in r.resources}

    def ancestors(urn):
        """Everything `urn` waits for: dependsOn, parents' dependsOn, provider, transitively."""
        seen, todo = set(), [urn]
        while todo:
            x = by_urn[todo.pop()]
            nxt = list(x["dependsOn"]) + ([x["provider"]] if x["provider"] else [])
            if x["parent"] in by_urn:
                nxt.append(x["parent"])
            for n in nxt:
                if n in by_urn and n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    gpu_nodes = one(r, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")["urn"]
    job = one(r, "kubernetes:batch/v1:Job", "-model-cache-download")["urn"]
    down = ancestors(job)
    assert gpu_nodes not in down, "the download overlaps GPU provisioning"
    assert one(r, "aws:s3/bucket:Bucket")["urn"] in down
    assert {x["urn"] for x in r.resources if x["type"] == "aws:ec2/instance:Instance"} <= down, (
        "verified after the fetchers"
    )
    assert one(r, "aws:eks/nodeGroup:NodeGroup", "-system-nodes")["urn"] in down
    assert not any(by_urn[u]["type"] == "kubernetes:helm.sh/v3:Release" for u in down), "download needs no add-on"
    dra, dyn = release(r, "dra-driver-nvidia-gpu")["urn"], release(r, "dynamo-platform")["urn"]
    for cd in [x for x in r.resources if x["type"].endswith(":ComputeDomain")]:
        assert {dra, dyn} <= set(cd["dependsOn"])
    dgd = one(r, "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    assert {dra, dyn, job, gpu_nodes} <= set(dgd["dependsOn"])
    for name in ("gpu-operator", "dra-driver-nvidia-gpu", "dynamo-platform"):
        assert gpu_nodes not in ancestors(release(r, name)["urn"]), f"{name} does not wait for GPU nodes"
    assert release(r, "gpu-operator")["urn"] in release(r, "dra-driver-nvidia-gpu")["dependsOn"]


@pytest.mark.parametrize("stack", STACKS)
def test_kubeconfig_output_is_secret_and_provider_uses_it(stack, rendered):
    r = rendered[stack]
    assert r.outputs["kubeconfig"] == "[secret]"
    (provider,) = [x for x in r.resources if x["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"]["kubeconfig"] == "[secret]"
    assert one(r, "aws:eks/cluster:Cluster")["urn"] in provider["dependsOn"]
    assert r.outputs["frontendEndpoint"].startswith("http://") and r.outputs["filesystemId"]


def test_kv_transport_nvlink_on_both_disaggregated_stacks(rendered):
    # gb200-disagg's 8 nodes sit in one u-p6e-gb200x72 UltraServer (18 instances): KV stays on NVLink
    # (tests/stacks/test_kv_topology.py: the topology choice, and EFA only with an -efa image beyond one domain).
    for stack in ("gb200-disagg", "gb300-disagg"):
        for c in workers(by_kind(rendered[stack].objects, "DynamoGraphDeployment")[0]):
            main = main_container(c)
            assert "vpc.amazonaws.com/efa" not in main["resources"]["limits"]
            assert "LIBFABRIC" not in " ".join(main["args"])
            env = {e["name"]: e.get("value") for e in main["env"]}
            assert "^" not in env.get("UCX_TLS", ""), "cuda_ipc stays on for NVLink"


@pytest.mark.parametrize("stack", STACKS)
def test_policy_rules_pass_on_eks_stacks(stack, rendered):
    from policies import rules

    violations, _ = rules.run_all(rendered[stack].objects)
    assert not [v for v in violations if v.rule in ("efa-uses-libfabric", "ucx-settings-consistent")], violations
    assert not [v for v in violations if v.level == "mandatory"], violations


BAD = {
    "capacity block without reservation id": (
        "gb300",
        {"cluster": {"mode": "eks", "gpuNodes": {"capacityType": "CAPACITY_BLOCK"}}},
        ["kimi-k3:cluster.gpuNodes.capacityReservationId", "CAPACITY_BLOCK", "cr-"],
    ),
    "on-demand for a Capacity Block type": (
        "gb300",
        {"cluster": {"mode": "eks", "gpuNodes": {"capacityType": "ON_DEMAND"}}},
        ["kimi-k3:cluster.gpuNodes.capacityType", "ON_DEMAND", "allowed: CAPACITY_BLOCK"],
    ),
    "recipe needs more nodes than the UltraServer": (
        "gb200-disagg",
        {
            "cluster": {
                "mode": "eks",
                "gpuNodes": {"capacityReservationId": "cr-0123456789abcdef0", "ultraServerNodes": 9},
            },
            "serving": {"pdRatio": "2:1"},
        },
        ["kimi-k3:cluster.gpuNodes.ultraServerNodes", "= 9", "needs 12 GPU nodes", "allowed: 18"],
    ),
    "recipe needs more nodes than the reservation": (
        "gb300",
        {
            "cluster": {
                "mode": "eks",
                "gpuNodes": {"capacityReservationId": "cr-0123456789abcdef0", "reservationNodes": 3},
            }
        },
        ["kimi-k3:cluster.gpuNodes.reservationNodes", "= 3", "needs 4 GPU nodes", ">= 4"],
    ),
    "x86 instance with the ARM AMI": (
        "gb300",
        {"cluster": {"mode": "eks", "gpuNodes": {"instanceType": "p5en.48xlarge"}}},
        [
            "kimi-k3:cluster.gpuNodes.instanceType",
            "p5en.48xlarge",
            "x86_64",
            "AL2023_ARM_64_NVIDIA",
            "allowed with this AMI: p6e-gb200.36xlarge, p6e-gb300.36xlarge",
        ],
    ),
    "GB200 instances for a GB300 recipe": (
        "gb300",
        {
            "cluster": {
                "mode": "eks",
                "gpuNodes": {"instanceType": "p6e-gb200.36xlarge", "capacityReservationId": "cr-0123456789abcdef0"},
            }
        },
        ["kimi-k3:cluster.gpuNodes.instanceType", "gb200", "allowed: p6e-gb300.36xlarge"],
    ),
    "GPU node group sized between zero and the recipe": (
        "gb300",
        {"cluster": eks_cluster("gb300", gpuNodes={"desiredNodes": 2})},
        ["kimi-k3:cluster.gpuNodes.desiredNodes", "= 2", "needs 4 GPU nodes", "allowed: 0 (scale to zero) or 4..18"],
    ),
    "public API endpoint without the networks allowed to reach it": (
        "gb300",
        {"cluster": eks_cluster("gb300", publicAccessCidrs=[])},
        ["kimi-k3:cluster.publicAccessCidrs", "required", "e.g. 203.0.113.0/24", "endpointPublicAccess: false"],
    ),
    "public API endpoint open to the whole internet": (
        "gb300",
        {"cluster": eks_cluster("gb300", publicAccessCidrs=["0.0.0.0/0"])},
        ["kimi-k3:cluster.publicAccessCidrs", "0.0.0.0/0", "whole internet", "allowPublicEndpointFromAnywhere: true"],
    ),
    "public CIDRs with the public endpoint off": (
        "gb300",
        {"cluster": eks_cluster("gb300", endpointPublicAccess=False)},
        ["kimi-k3:cluster.publicAccessCidrs", "endpointPublicAccess: false", "allowed: none"],
    ),
    "launch template rollout with nodes running": (
        "gb300",
        {"cluster": eks_cluster("gb300", gpuNodes={"rolloutLaunchTemplate": True})},
        ["kimi-k3:cluster.gpuNodes.rolloutLaunchTemplate", "desired size 0", "allowed: with desiredNodes: 0"],
    ),
    "IMDS hop limit beyond 2": (
        "gb300",
        {"cluster": eks_cluster("gb300", gpuNodes={"imdsHopLimit": 3})},
        ["kimi-k3:cluster.gpuNodes.imdsHopLimit", "3"],
    ),
    "public endpoint CIDR that is not a CIDR": (
        "gb300",
        {"cluster": eks_cluster("gb300", publicAccessCidrs=["203.0.113.0/33"])},
        ["kimi-k3:cluster.publicAccessCidrs", "203.0.113.0/33", "not an IPv4 CIDR", "allowed: e.g."],
    ),
    "FSx throughput PERSISTENT_2 does not offer": (
        "gb300",
        {"storage": {"kind": "fsx-lustre", "fsx": {"perUnitStorageThroughput": 300}}},
        ["kimi-k3:storage.fsx.perUnitStorageThroughput", "300", "allowed: 125, 250, 500, 1000"],
    ),
    "FSx with EFA but no EFA Lustre clients": (
        "gb300",
        {"storage": {"kind": "fsx-lustre", "fsx": {"efaEnabled": True}}},
        ["kimi-k3:storage.fsx.efaEnabled", "true", "mount over TCP", "allowed: false"],
    ),
    "compile cache volume outside eks mode": (
        "gb300",
        {"cluster": {"mode": "render"}, "storage": {"storageClass": "fsx", "compileCache": "efs"}},
        ["kimi-k3:storage.compileCache", "efs", "allowed here: none"],
    ),
    "Kubernetes without DRA GA": (
        "gb300",
        {"cluster": {"mode": "eks", "kubernetesVersion": "1.33"}},
        ["kimi-k3:cluster.kubernetesVersion", "1.33", "allowed: 1.34 or later"],
    ),
    "Kubernetes without pinned add-on versions": (
        "gb300",
        {"cluster": {"mode": "eks", "kubernetesVersion": "1.35"}},
        ["kimi-k3:cluster.kubernetesVersion", "1.35", "no pinned EKS add-on versions", "allowed: 1.34"],
    ),
    "FSx size that PERSISTENT_2 does not offer": (
        "gb300",
        {"storage": {"kind": "fsx-lustre", "fsx": {"storageCapacityGiB": 3000}}},
        ["kimi-k3:storage.fsx.storageCapacityGiB", "3000", "multiple of 2400"],
    ),
    "FSx smaller than the cache": (
        "gb300",
        {"storage": {"kind": "fsx-lustre", "fsx": {"storageCapacityGiB": 1200}}},
        ["kimi-k3:storage.fsx.storageCapacityGiB", "1200", "allowed: 2400"],
    ),
    "fsx outside eks mode": (
        "gb300",
        {"cluster": {"mode": "existing"}, "storage": {"kind": "fsx-lustre"}},
        ["kimi-k3:storage.kind", "fsx-lustre", "allowed here: existing"],
    ),
    "helm install in render mode": (
        "gb300",
        {
            "cluster": {"mode": "render"},
            "storage": {"storageClass": "fsx"},
            "platform": {"gpuOperator": {"install": True}},
        },
        ["kimi-k3:platform.gpuOperator.install", "allowed in render mode: false"],
    ),
    "EFA device plugin chart without the GB300 instance type in its node affinity": (
        "gb300",
        {"cluster": eks_cluster("gb300"), "platform": {"efaDevicePlugin": {"install": True, "version": "0.5.14"}}},
        ["kimi-k3:platform.efaDevicePlugin.version", "0.5.14", "p6e-gb300.36xlarge", "allowed: v0.5.24, v0.5.30"],
    ),
    "EFA device plugin values that drop the GPU instance type": (
        "gb200",
        {
            "cluster": eks_cluster("gb200"),
            "platform": {
                "efaDevicePlugin": {
                    "install": True,
                    "values": {"supportedInstanceLabels": {"values": ["p5en.48xlarge"]}},
                }
            },
        },
        ["kimi-k3:platform.efaDevicePlugin.values.supportedInstanceLabels.values", "p6e-gb200.36xlarge"],
    ),
    "parked outside eks mode": (
        "gb300",
        {
            "cluster": {"mode": "existing", "parked": True},
            "kubeconfig": "apiVersion: v1\n",
            "storage": {"kind": "existing", "storageClass": "fsx"},
        },
        ["kimi-k3:cluster.parked = true", "eks mode", "allowed: false"],
    ),
    "cluster region differs from the AWS provider's": (
        "gb300",
        {
            "cluster": {
                "mode": "eks",
                "region": "us-west-2",
                "gpuNodes": {"capacityReservationId": "cr-0123456789abcdef0"},
            }
        },
        ["kimi-k3:cluster.region", "us-west-2", "aws:region", "us-east-1"],
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_aws_input_one_clear_error_and_nothing_registered(name):
    assert_one_clear_error(*BAD[name])


def test_gpu_operator_and_dra_values_agree_with_upstream(shared_reference):
    """Our values are the EKS guide's, which the shared reference copies; and the DRA keys exist in 0.4.1."""
    from kimi_k3.k8s.addons import _defaults

    ours = _defaults()
    ref_op = yaml.safe_load((shared_reference / "aws" / "eks-gb200-gpu-operator-values.yaml").read_text())
    for key, val in ref_op.items():
        assert ours["gpuOperator"]["values"][key] == val, key
    ref_efa = yaml.safe_load((shared_reference / "aws" / "eks-gb200-efa-values.yaml").read_text())
    assert ours["efaDevicePlugin"]["values"]["tolerations"] == ref_efa["tolerations"]
    dra_defaults = yaml.safe_load((shared_reference / "dra" / "values-v0.4.1.yaml").read_text())
    for key in ours["draDriver"]["values"]:
        assert key in dra_defaults, f"{key} is not a value of dra-driver-nvidia-gpu 0.4.1"
    platform = yaml.safe_load((shared_reference / "dynamo" / "helm-platform" / "values.yaml").read_text())
    for sub in ("grove", "kai-scheduler"):
        assert {"install", "enabled"} <= set(platform["global"][sub])
    chart = yaml.safe_load((shared_reference / "dynamo" / "helm-platform" / "Chart.yaml").read_text())
    assert chart["version"] == ours["dynamoPlatform"]["version"]


def unknown_value_paths(ours, chart, path=""):
    """Key paths we set that the chart's values.yaml does not have. Below a chart value that is not a map with keys
    (`affinity: {}`, `tolerations: []`, a scalar) the value is free-form and not checked further."""
    out = []
    for key, value in ours.items():
        here = f"{path}.{key}" if path else key
        if key not in chart:
            out.append(here)
        elif isinstance(value, dict) and isinstance(chart[key], dict) and chart[key]:
            out += unknown_value_paths(value, chart[key], here)
    return out


def test_every_value_we_set_exists_in_the_reference_charts(rendered, shared_reference):
    """A value a chart does not have is silently ignored by helm (nodeSelector on the Dynamo operator was)."""
    charts = {
        "dynamo-platform": shared_reference / "dynamo" / "helm-platform" / "values.yaml",
        "dra-driver-nvidia-gpu": shared_reference / "dra" / "values-v0.4.1.yaml",
    }
    for name, values_file in charts.items():
        chart = yaml.safe_load(values_file.read_text())
        for stack in STACKS:
            ours = release(rendered[stack], name)["inputs"]["values"]
            # Below `kai-scheduler` are the KAI subchart's own values, not in ../shared: kai-scheduler/KAI-Scheduler
            # deployments/kai-scheduler/values.yaml has `scheduler.args: {}` (tests/stacks/test_kai_staleness.py).
            expected = ["kai-scheduler.scheduler"] if name == "dynamo-platform" else []
            assert unknown_value_paths(ours, chart) == expected, f"{stack}: {name} has no such values"
    assert unknown_value_paths(
        {"dynamo-operator": {"controllerManager": {"nodeSelector": {}}}},
        yaml.safe_load(charts["dynamo-platform"].read_text()),
    ) == ["dynamo-operator.controllerManager.nodeSelector"]


# --- chart references (issue 9 item 1) and the EFA device plugin's node affinity (item 11) -------------------------

OLD_DYNAMO = {"chart": "dynamo-platform", "repo": "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts"}


def test_every_chart_reference_is_the_form_its_publisher_documents():
    from kimi_k3.k8s.addons import ORDER, _defaults, chart_reference_problems

    d = _defaults()
    for key in ORDER:
        assert chart_reference_problems(key, d[key], d["publishers"]) == [], key
        assert d[key]["publisher"] in d["publishers"] and d["publishers"][d[key]["publisher"]]["source"]


@pytest.mark.parametrize(
    "key, change, expected",
    [
        # the shipped defect: a folder of packages given as a Helm repository (no index.yaml there)
        (
            "dynamoPlatform",
            OLD_DYNAMO,
            [
                "dynamoPlatform.repo",
                "/nvidia/ai-dynamo/charts",
                "publishes no Helm repository",
                "oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform",
            ],
        ),
        (
            "gpuOperator",
            {"repo": "https://helm.ngc.nvidia.com/nvidia/charts"},
            ["gpuOperator.repo", "a folder of packages under the root", "allowed: https://helm.ngc.nvidia.com/nvidia"],
        ),
        (
            "draDriver",
            {"chart": "dra-driver-nvidia-gpu", "repo": "oci://registry.k8s.io/dra-driver-nvidia/charts"},
            ["draDriver.repo", "no index.yaml", "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"],
        ),
        ("draDriver", {"repo": "https://example.com/charts"}, ["draDriver.repo", "ignored for an oci:// chart"]),
        (
            "dynamoPlatform",
            {"chart": "oci://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform:1.5.0"},
            ["dynamoPlatform.chart", "version goes in `version`"],
        ),
        (
            "efaDevicePlugin",
            {"repo": "https://aws.github.io/eks-charts/stable"},
            ["efaDevicePlugin.repo", "not the repository root"],
        ),
        ("efaDevicePlugin", {"chart": "eks/aws-efa-k8s-device-plugin"}, ["efaDevicePlugin.chart", "bare name"]),
    ],
)
def test_chart_reference_check_fails_on_wrong_forms(key, change, expected):
    from kimi_k3.k8s.addons import _defaults, chart_reference_problems

    d = _defaults()
    message = " ".join(chart_reference_problems(key, {**d[key], **change}, d["publishers"]))
    for part in expected:
        assert part in message, (part, message)


def test_recipe_with_an_unresolvable_chart_is_refused_before_anything_registers(monkeypatch):
    """The shipped form (repo = the packages' folder) now stops `render`/`up` with one message naming the file."""
    import kimi_k3.k8s.addons as addons

    real = addons._defaults()
    monkeypatch.setattr(
        addons, "_defaults", lambda: {**real, "dynamoPlatform": {**real["dynamoPlatform"], **OLD_DYNAMO}}
    )
    assert_one_clear_error(
        "gb300",
        {},
        ["recipes/platform/addons.yaml: dynamoPlatform.repo", "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts"],
    )


def test_efa_plugin_affinity_covers_every_gpu_instance_type(rendered):
    """The pinned chart's DaemonSet affinity lists every GPU instance type the stacks launch and recipes/facts/aws.yaml
    knows; recorded per chart version in recipes/platform/addons.yaml (tests cannot fetch the chart). 0.5.14 did not."""
    from kimi_k3.facts.aws import load_aws_facts
    from kimi_k3.k8s.addons import _defaults, efa_plugin_covers

    d = _defaults()["efaDevicePlugin"]
    launched = {
        one(rendered[s], "aws:ec2/launchTemplate:LaunchTemplate", "-gpu-lt")["inputs"]["instanceType"] for s in STACKS
    }
    assert launched == {"p6e-gb200.36xlarge", "p6e-gb300.36xlarge"}
    every = launched | {t for t, f in load_aws_facts().instance_types.items() if f.efa.devices}
    for itype in sorted(every):
        assert efa_plugin_covers(d["version"], {}, itype) is None, itype
    assert efa_plugin_covers("v0.5.14", {}, "p6e-gb300.36xlarge") is not None, "the old pin misses GB300"
    assert efa_plugin_covers("v0.5.14", {}, "p6e-gb200.36xlarge") is None
    assert set(d["affinityInstanceTypes"][d["version"]]) >= every


# --- Capacity Block lifecycle (issue 9 item 13) ----------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_up_never_writes_the_gpu_node_group_size_or_template_back(stack, rendered):
    """EKS scales a Capacity Block node group to 0 40 min before the block ends (capacity-blocks-mng); a later `up`
    must not scale it back, nor roll a new template onto running nodes (upgrades need desired size 0)."""
    ng = one(rendered[stack], "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")
    assert ng["ignoreChanges"] == ["launchTemplate.version", "scalingConfig.desiredSize"]
    assert ng["deleteBeforeReplace"], (
        "a replacement group beside the old one would wait for instances that do not exist"
    )
    assert ng["inputs"]["scalingConfig"]["desiredSize"] == NODES[stack], "created with the recipe's nodes"
    assert one(rendered[stack], "aws:eks/nodeGroup:NodeGroup", "-system-nodes")["ignoreChanges"] == []


def test_explicit_desired_size_is_written_and_rollout_is_staged():
    zero = render_with("gb300", cluster=eks_cluster("gb300", gpuNodes={"desiredNodes": 0}))
    ng = one(zero, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")
    assert ng["ignoreChanges"] == ["launchTemplate.version"], "step 1: only the size changes (to 0)"
    assert ng["inputs"]["scalingConfig"]["desiredSize"] == 0
    roll = render_with(
        "gb300", cluster=eks_cluster("gb300", gpuNodes={"desiredNodes": 0, "rolloutLaunchTemplate": True})
    )
    ng = one(roll, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")
    assert ng["ignoreChanges"] == [], "step 2: the new template version reaches the empty group"
    back = render_with("gb300", cluster=eks_cluster("gb300", gpuNodes={"desiredNodes": 4}))
    assert one(back, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")["ignoreChanges"] == ["launchTemplate.version"]


# --- least privilege (issue 9 item 14) -------------------------------------------------------------------------------


def old_form(resources, change):
    """resources.json entries with `change(entry)` applied to a deep copy (the form before the fix)."""
    import copy

    out = copy.deepcopy(resources)
    for r in out:
        change(r)
    return out


@pytest.mark.parametrize("stack", STACKS)
def test_least_privilege_holds_and_the_check_fails_on_the_old_forms(stack, rendered):
    from kimi_k3.aws.iam import least_privilege_problems

    res = rendered[stack].resources
    assert least_privilege_problems(res) == []

    def hop2(r):
        if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and r["name"].endswith("-gpu-lt"):
            r["inputs"]["metadataOptions"]["httpPutResponseHopLimit"] = 2

    def anywhere(r):
        if r["type"] == "aws:eks/cluster:Cluster":
            r["inputs"]["vpcConfig"]["publicAccessCidrs"] = ["0.0.0.0/0"]

    def no_role(r):
        if r["type"] == "aws:eks/addon:Addon":
            r["inputs"].pop("serviceAccountRoleArn", None)

    cni_on_node = old_form(res, lambda r: None) + [
        {
            "urn": "x",
            "type": "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "name": "kimi-k3-eks-node-cni",
            "inputs": {
                "role": "kimi-k3-eks-node-role-placeholder",
                "policyArn": "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
            },
        }
    ]
    assert [p.split(":")[1].strip() for p in least_privilege_problems(old_form(res, hop2))] == ["IMDS hop limit 2"]
    assert "whole internet" in " ".join(least_privilege_problems(old_form(res, anywhere)))
    assert "on a node role" in " ".join(least_privilege_problems(cni_on_node))
    assert len(least_privilege_problems(old_form(res, no_role))) == 3, (
        "vpc-cni, the Mountpoint driver (weights) and the EFS driver (compile cache)"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_node_role_has_no_cni_policy_and_cni_uses_its_own_role(stack, rendered):
    r = rendered[stack]
    attached = {
        x["inputs"]["policyArn"].rsplit("/", 1)[-1]: x["inputs"]["role"]
        for x in r.resources
        if x["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    }
    assert attached["AmazonEKS_CNI_Policy"] == "kimi-k3-eks-vpc-cni-placeholder"
    node_policies = sorted(p for p, role in attached.items() if role == "kimi-k3-eks-node-role-placeholder")
    assert node_policies == [
        "AmazonEC2ContainerRegistryPullOnly",
        "AmazonEKSWorkerNodePolicy",
        "AmazonSSMManagedInstanceCore",
    ]
    cni = one(r, "aws:eks/addon:Addon", "-vpc-cni")
    assert cni["inputs"]["serviceAccountRoleArn"].endswith("role/kimi-k3-eks-vpc-cni-placeholder")
    trust = json.loads(one(r, "aws:iam/role:Role", "-vpc-cni")["inputs"]["assumeRolePolicy"])["Statement"][0]
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert set(trust["Condition"]["StringEquals"].values()) == {
        "system:serviceaccount:kube-system:aws-node",
        "sts.amazonaws.com",
    }
    # EKS bootstraps no self-managed vpc-cni, so aws-node exists only as the add-on, with its role from the first pod:
    # the GPU nodes (15 min to boot) need not wait for it; the system nodes still do (CoreDNS lands on them).
    assert one(r, "aws:eks/cluster:Cluster")["inputs"]["bootstrapSelfManagedAddons"] is False
    assert cni["urn"] not in one(r, "aws:eks/nodeGroup:NodeGroup", "-gpu-nodes")["dependsOn"]
    assert cni["urn"] in one(r, "aws:eks/nodeGroup:NodeGroup", "-system-nodes")["dependsOn"]
    proxy, dns = one(r, "aws:eks/addon:Addon", "-kube-proxy"), one(r, "aws:eks/addon:Addon", "-coredns")
    assert one(r, "aws:eks/nodeGroup:NodeGroup", "-system-nodes")["urn"] in dns["dependsOn"], "CoreDNS needs nodes"
    for release in [x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release"]:
        assert {cni["urn"], proxy["urn"], dns["urn"]} <= set(release["dependsOn"]), release["name"]
    lt = one(r, "aws:ec2/launchTemplate:LaunchTemplate", "-gpu-lt")["inputs"]["metadataOptions"]
    assert lt == {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1}


@pytest.mark.parametrize(
    "kind, service_account", [("fsx-lustre", "fsx-csi-controller-sa"), ("efs", "efs-csi-controller-sa")]
)
def test_csi_driver_has_its_own_role_with_no_permissions(kind, service_account):
    r = render_with("gb300", storage={"kind": kind})
    addon = one(r, "aws:eks/addon:Addon", "-storage-csi-driver")["inputs"]
    assert addon["serviceAccountRoleArn"].endswith("role/kimi-k3-storage-csi-controller-placeholder")
    trust = json.loads(one(r, "aws:iam/role:Role", "-storage-csi-controller")["inputs"]["assumeRolePolicy"])[
        "Statement"
    ][0]
    assert f"system:serviceaccount:kube-system:{service_account}" in trust["Condition"]["StringEquals"].values()
    assert not [
        x
        for x in r.resources
        if x["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
        and x["inputs"]["role"] == "kimi-k3-storage-csi-controller-placeholder"
    ], "static PV: no FSx/EFS API"


def test_ways_to_open_access_when_needed():
    private = render_with("gb300", cluster=eks_cluster("gb300", endpointPublicAccess=False, publicAccessCidrs=[]))
    vpc = one(private, "aws:eks/cluster:Cluster")["inputs"]["vpcConfig"]
    assert vpc["endpointPublicAccess"] is False and vpc["endpointPrivateAccess"] is True
    assert "publicAccessCidrs" not in vpc
    anywhere = render_with(
        "gb300", cluster=eks_cluster("gb300", publicAccessCidrs=["0.0.0.0/0"], allowPublicEndpointFromAnywhere=True)
    )
    assert one(anywhere, "aws:eks/cluster:Cluster")["inputs"]["vpcConfig"]["publicAccessCidrs"] == ["0.0.0.0/0"]
    hop2 = render_with("gb300", cluster=eks_cluster("gb300", gpuNodes={"imdsHopLimit": 2}))
    assert (
        one(hop2, "aws:ec2/launchTemplate:LaunchTemplate", "-gpu-lt")["inputs"]["metadataOptions"][
            "httpPutResponseHopLimit"
        ]
        == 2
    )


# --- teardown that keeps the weights (issue 9 item 12) ---------------------------------------------------------------

HOURLY = (
    "aws:eks/cluster:Cluster",
    "aws:eks/nodeGroup:NodeGroup",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/eip:Eip",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:eks/addon:Addon",
)
KEPT_TYPES = {
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:fsx/lustreFileSystem:LustreFileSystem",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
    "aws:efs/fileSystem:FileSystem",
    "aws:s3/bucket:Bucket",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "kimi-k3:aws:GpuCluster",
    "kimi-k3:aws:ModelStorage",
}


@pytest.mark.parametrize("stack", STACKS)
def test_park_keeps_only_the_weights_and_their_network_unchanged(stack, rendered):
    """`make park`: the same program with kimi-k3:cluster.parked registers only the filesystem and its network, with
    the URNs and inputs they have now, so `pulumi up` deletes everything else and changes nothing that stays."""
    full = {x["urn"]: x for x in rendered[stack].resources}
    parked = render_with(stack, cluster=eks_cluster(stack, parked=True))
    assert parked.objects == [], "no Kubernetes object: the cluster goes"
    kept = {x["urn"]: x for x in parked.resources}
    assert set(kept) <= set(full), "nothing new is created while parking"
    assert {x["type"] for x in kept.values()} <= KEPT_TYPES
    for urn, x in kept.items():
        assert (x["inputs"], x["protect"], x["retainOnDelete"], x["parent"]) == (
            full[urn]["inputs"],
            full[urn]["protect"],
            full[urn]["retainOnDelete"],
            full[urn]["parent"],
        ), urn
    gone = [x for u, x in full.items() if u not in kept]
    assert {t for t in HOURLY} <= {x["type"] for x in gone}, "every hourly-billed piece is deleted"
    assert not any(x["protect"] for x in gone), "a protected resource would stop the parking `up`"
    # The stacks keep their weights in the bucket (storage kind s3): it stays, the fetchers and the token go.
    (bucket,) = [x for x in kept.values() if x["type"] == "aws:s3/bucket:Bucket"]
    assert bucket["protect"] and bucket["retainOnDelete"]
    assert not [
        x for x in kept.values() if x["type"] in ("aws:ec2/instance:Instance", "aws:secretsmanager/secret:Secret")
    ]
    assert parked.outputs == {
        "filesystemId": rendered[stack].outputs["filesystemId"],
        "parked": True,
        "weightsBucket": rendered[stack].outputs["weightsBucket"],
        "gpus": 0,
        "nodes": 0,
    }


def test_existing_cluster_destroy_passes_and_keeps_the_cache_claim():
    """In existing mode nothing is protected, so `pulumi destroy` runs; the claim and its namespace are retained
    (left in the cluster with the weights), and the next `up` adopts them (upsertExistingObjects)."""
    r = render_with(
        "gb300",
        cluster={"mode": "existing"},
        kubeconfig="apiVersion: v1\n",
        storage={"kind": "existing", "storageClass": "fsx"},
    )
    assert not [x["name"] for x in r.resources if x["protect"]]
    retained = sorted(x["type"].rsplit(":", 1)[-1] for x in r.resources if x["retainOnDelete"])
    assert retained == ["Namespace", "PersistentVolumeClaim"]
    (provider,) = [x for x in r.resources if x["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"]["upsertExistingObjects"] == "true"


def test_aws_least_privilege_rule_in_check_and_the_pack_sees_the_old_forms(rendered):
    """`kimi-k3 check` (and the policy pack, which gets the same props) reports each opened default, advisory."""
    from kimi_k3.commands.check_targets import resource_infos
    from policies import rules

    res = rendered["gb300"].resources
    violations, _ = rules.run_all(rendered["gb300"].objects, resource_infos(res))
    assert not [v for v in violations if v.rule == "aws-least-privilege"]
    opened = render_with(
        "gb300",
        cluster=eks_cluster(
            "gb300", publicAccessCidrs=["0.0.0.0/0"], allowPublicEndpointFromAnywhere=True, gpuNodes={"imdsHopLimit": 2}
        ),
    )
    violations, _ = rules.run_all(opened.objects, resource_infos(opened.resources))
    found = sorted((v.target.split("/")[0], v.level) for v in violations if v.rule == "aws-least-privilege")
    assert found == [("aws:ec2", "advisory"), ("aws:eks", "advisory")], found


@pytest.mark.parametrize("stack", STACKS)
def test_gpu_nodes_need_not_wait_for_the_cni_add_on_only_without_self_managed_add_ons(stack, rendered):
    """The GPU node group no longer waits for the vpc-cni add-on (2 min off the path). That is safe only because EKS
    bootstraps no self-managed aws-node: with it, a node joining before the add-on keeps the node role in aws-node."""
    from kimi_k3.aws.cluster import cni_ordering_problems

    res = rendered[stack].resources
    assert cni_ordering_problems(res) == []

    def bootstrap(r):
        if r["type"] == "aws:eks/cluster:Cluster":
            r["inputs"].pop("bootstrapSelfManagedAddons")

    def no_dns(r):
        if r["type"] == "aws:eks/addon:Addon" and r["inputs"]["addonName"] == "coredns":
            r["type"] = "removed"

    problems = cni_ordering_problems(old_form(res, bootstrap))
    assert len(problems) == 1 and problems[0].startswith("kimi-k3-eks-gpu-nodes: its nodes can join before")
    assert cni_ordering_problems(old_form(res, no_dns)) == [
        "kimi-k3-eks-eks: bootstrapSelfManagedAddons is false but no coredns add-on is installed"
    ]


def test_existing_cluster_is_not_replaced_by_bootstrap_self_managed_addons(rendered):
    """A cluster deployed before bootstrapSelfManagedAddons was set (f6da519 rendered no such input: the provider's
    default true) is kept: the provider replaces a cluster on that input (ForceNew), so the cluster ignores it, and
    the transition rule cluster-kept refuses a replacement of the EKS cluster (shown on the form without it)."""
    from policies.rules.upgrades import run_transition_rules

    head = rendered["gb200"].resources
    cluster = one(rendered["gb200"], "aws:eks/cluster:Cluster")
    assert cluster["inputs"]["bootstrapSelfManagedAddons"] is False
    assert "bootstrapSelfManagedAddons" in cluster["ignoreChanges"]
    old_inputs = {k: v for k, v in cluster["inputs"].items() if k != "bootstrapSelfManagedAddons"}
    base = [{**r, "inputs": old_inputs} if r is cluster else r for r in head]
    _, violations = run_transition_rules(base, head)
    assert not [v for v in violations if v.rule == "cluster-kept"]
    # The wrong form: the new value without ignore_changes replaces the user's cluster; the rule stops it.
    unguarded = [{**r, "ignoreChanges": []} if r is cluster else r for r in head]
    _, violations = run_transition_rules(base, unguarded)
    (v,) = [v for v in violations if v.rule == "cluster-kept"]
    assert "REPLACED" in v.message and "bootstrapSelfManagedAddons" in v.message


@pytest.mark.parametrize("stack", STACKS)
def test_network_add_ons_are_pinned_for_the_cluster_minor(stack, rendered):
    """kube-proxy and CoreDNS carry the versions recipes/facts/aws.yaml pins for the cluster's Kubernetes minor (AWS docs'
    version tables); kube-proxy is built per minor. The unpinned form (before) is reported."""
    from kimi_k3.aws.cluster import addon_version_problems

    res = rendered[stack].resources
    version = one(rendered[stack], "aws:eks/cluster:Cluster")["inputs"]["version"]
    addons = {r["inputs"]["addonName"]: r["inputs"] for r in res if r["type"] == "aws:eks/addon:Addon"}
    assert addons["kube-proxy"]["addonVersion"].startswith(f"v{version}.")
    assert addons["coredns"]["addonVersion"].startswith("v1.")
    assert addon_version_problems(res) == []

    def unpinned(r):
        if r["type"] == "aws:eks/addon:Addon" and r["inputs"]["addonName"] in ("kube-proxy", "coredns"):
            r["inputs"].pop("addonVersion")

    def other_minor(r):
        if r["type"] == "aws:eks/addon:Addon" and r["inputs"]["addonName"] == "kube-proxy":
            r["inputs"]["addonVersion"] = "v1.33.3-eksbuild.6"

    assert len(addon_version_problems(old_form(res, unpinned))) == 2
    assert addon_version_problems(old_form(res, other_minor)) == [
        "kimi-k3-eks-kube-proxy: kube-proxy v1.33.3-eksbuild.6 is not built for Kubernetes 1.34"
    ]
