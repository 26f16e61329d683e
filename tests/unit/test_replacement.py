"""kimi_k3.offline.replacement against the consumers' own cases.

The provider cases are pulumi-kubernetes' TestPatchToDiff (provider/pkg/provider/diff_test.go @94977969d641):
same old/new objects, same expected detailed diff (path -> add/update/delete, replace or not). The engine cases
follow pulumi/pulumi pkg/resource/deploy/step_generator.go @1b5949891b3c (ignoreChanges, replaceOnChanges,
providerChanged, protect); the AWS cases terraform-provider-aws' schema as recorded in recipes/facts/aws-force-new.yaml.
"""

from __future__ import annotations

import pytest

from kimi_k3.offline import k8s_replace, property_paths
from kimi_k3.offline import replacement as R
from kimi_k3.offline import state as offline_state

A, D, U = ("add", False), ("delete", False), ("update", False)
AR, DR, UR = ("add", True), ("delete", True), ("update", True)


def pod(*containers):
    return {"spec": {"containers": list(containers)}}


# (name, group, version, kind, old, new, provider settings, expected {path: (kind, replaces)})
PROVIDER_CASES = [
    (
        "Adding spec and nested field",
        "core",
        "v1",
        "PersistentVolumeClaim",
        {"spec": {}},
        {"spec": {"accessModes": {}}},
        {},
        {"spec.accessModes": AR},
    ),
    (
        "Deleting spec and nested field",
        "core",
        "v1",
        "PersistentVolumeClaim",
        {"spec": {"accessModes": {}}},
        {"spec": {}},
        {},
        {"spec.accessModes": DR},
    ),
    (
        "Changing image spec",
        "core",
        "v1",
        "Pod",
        pod({"name": "nginx", "image": "nginx"}),
        pod({"name": "nginx", "image": "nginx:1.15-alpine"}),
        {},
        {"spec.containers[0].image": UR},
    ),
    (
        "Group unspecified and changing image spec",
        "",
        "v1",
        "Pod",
        pod({"name": "nginx", "image": "nginx"}),
        pod({"name": "nginx", "image": "nginx:1.15-alpine"}),
        {},
        {"spec.containers[0].image": UR},
    ),
    (
        "Changing second image spec",
        "",
        "v1",
        "Pod",
        {
            "metadata": {"namespace": "default"},
            **pod({"name": "nginx", "image": "nginx"}, {"name": "nginx", "image": "nginx"}),
        },
        {
            "metadata": {"namespace": "default"},
            **pod({"name": "nginx", "image": "nginx"}, {"name": "nginx", "image": "nginx:1.15-alpine"}),
        },
        {},
        {"spec.containers[1].image": UR},
    ),
    (
        "Changing DNS policy and image spec",
        "core",
        "v1",
        "Pod",
        pod({"name": "nginx", "image": "nginx", "dnsPolicy": "Default"}),
        pod({"name": "nginx", "image": "nginx:1.15-alpine", "dnsPolicy": "None"}),
        {},
        {"spec.containers[0].dnsPolicy": U, "spec.containers[0].image": UR},
    ),
    (
        "Adding DNS policy",
        "core",
        "v1",
        "Pod",
        pod({"name": "nginx", "image": "nginx"}),
        pod({"name": "nginx", "image": "nginx", "dnsPolicy": "Default"}),
        {},
        {"spec.containers[0].dnsPolicy": A},
    ),
    (
        "Changing DNS policy",
        "core",
        "v1",
        "Pod",
        pod({"name": "nginx", "image": "nginx", "dnsPolicy": "Default"}),
        pod({"name": "nginx", "image": "nginx", "dnsPolicy": "None"}),
        {},
        {"spec.containers[0].dnsPolicy": U},
    ),
    (
        "Deleting DNS policy",
        "core",
        "v1",
        "Pod",
        pod({"name": "nginx", "image": "nginx", "dnsPolicy": "Default"}),
        pod({"name": "nginx", "image": "nginx"}),
        {},
        {"spec.containers[0].dnsPolicy": D},
    ),
    (
        "PVC resources don't trigger a replace",
        "core",
        "v1",
        "PersistentVolumeClaim",
        {"spec": {"resources": {"requests": {"storage": "10Gi"}}}},
        {"spec": {"resources": {"requests": {"storage": "20Gi"}}}},
        {},
        {"spec.resources.requests.storage": U},
    ),
    (
        "ConfigMap mutable",
        "core",
        "v1",
        "ConfigMap",
        {"data": {"property1": "3"}},
        {"data": {"property1": "4"}},
        {"enableConfigMapMutable": True},
        {"data.property1": U},
    ),
    (
        "ConfigMap replaced when enableConfigMapMutable is not set",
        "core",
        "v1",
        "ConfigMap",
        {"data": {"property1": "3"}},
        {"data": {"property1": "4"}},
        {},
        {"data.property1": UR},
    ),
    (
        "ConfigMap immutable replaced even when mutable is set",
        "core",
        "v1",
        "ConfigMap",
        {"data": {"property1": "3"}, "immutable": True},
        {"data": {"property1": "4"}, "immutable": True},
        {"enableConfigMapMutable": True},
        {"data.property1": UR},
    ),
    (
        "Secret mutable",
        "core",
        "v1",
        "Secret",
        {"data": {"property1": "3"}},
        {"data": {"property1": "4"}},
        {"enableSecretMutable": True},
        {"data.property1": U},
    ),
    (
        "Secret replaced when enableSecretMutable is not set",
        "core",
        "v1",
        "Secret",
        {"data": {"property1": "3"}},
        {"data": {"property1": "4"}},
        {},
        {"data.property1": UR},
    ),
    (
        "Secret type change replaces even when mutable",
        "core",
        "v1",
        "Secret",
        {"type": "kubernetes.io/dockerconfigjson", "data": {"property1": "3"}},
        {"type": "Opaque", "data": {"property1": "3"}},
        {"enableSecretMutable": True},
        {"type": UR},
    ),
    (
        "Secret immutable replaced even when mutable",
        "core",
        "v1",
        "Secret",
        {"data": {"property1": "3"}, "immutable": True},
        {"data": {"property1": "4"}, "immutable": True},
        {"enableSecretMutable": True},
        {"data.property1": UR},
    ),
    ("Removing array values", "core", "v1", "Pod", pod({"name": "nginx"}), pod(), {}, {"spec.containers[0]": D}),
    (
        "Removing a field that was nil should not panic (#1970)",
        "tekton.dev",
        "v1beta1",
        "Pipeline",
        {"taskSpec": {"spec": None, "steps": [{"name": "something"}]}},
        {"taskSpec": {"steps": [{"name": "something-else"}]}},
        {},
        {"taskSpec.spec": D, "taskSpec.steps[0].name": U},
    ),
]


@pytest.mark.parametrize("case", PROVIDER_CASES, ids=[c[0] for c in PROVIDER_CASES])
def test_provider_patch_to_diff_cases(case):
    _, group, version, kind, old, new, provider, expected = case
    obj = {**old, "apiVersion": f"{group}/{version}" if group else version, "kind": kind}
    force_new = k8s_replace.k8s_force_new(obj, provider)
    got = {c.path: (c.kind, c.replaces) for c in R._diff(old, new, force_new)}
    assert got == expected


# ----------------------------------------------------------------------------------------------- records
STACK = "urn:pulumi:s::kimi-k3::"
PROVIDER_URN = STACK + "pulumi:providers:kubernetes::k8s"


def provider(**inputs):
    return {
        "urn": PROVIDER_URN,
        "type": "pulumi:providers:kubernetes",
        "name": "k8s",
        "provider": "",
        "inputs": {"kubeconfig": "[secret]", **inputs},
    }


def k8s(kind, name, spec=None, api="v1", ns="kimi-k3", urn_name=None, **opts):
    group = api.rpartition("/")[0] or "core"
    version = api.rpartition("/")[2]
    urn_name = urn_name or name
    obj = {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": ns}}
    if spec is not None:
        obj["spec"] = spec
    return {
        "urn": f"{STACK}kubernetes:{group}/{version}:{kind}::{urn_name}",
        "type": f"kubernetes:{group}/{version}:{kind}",
        "name": urn_name,
        "provider": PROVIDER_URN,
        "inputs": obj,
        **opts,
    }


def one(base, head, urn=None):
    out = R.classify(base, head)
    return (
        next(c for c in out if urn is None or c.urn == urn)
        if urn
        else [c for c in out if c.type != provider()["type"]][0]
    )


DGD_API = "nvidia.com/v1beta1"


def test_custom_resource_spec_changes_are_updates_name_and_namespace_replace():
    old = k8s("DynamoGraphDeployment", "kimi-k3", {"components": [{"name": "Decode", "replicas": 1}]}, api=DGD_API)
    new = k8s("DynamoGraphDeployment", "kimi-k3", {"components": [{"name": "Decode", "replicas": 2}]}, api=DGD_API)
    c = one([provider(), old], [provider(), new])
    assert c.action == R.UPDATE and c.replace_paths == ()
    renamed = k8s("DynamoGraphDeployment", "kimi-k3-gb300", old["inputs"]["spec"], api=DGD_API, urn_name="kimi-k3")
    c = one([provider(), old], [provider(), renamed])
    assert c.action == R.REPLACE and c.replace_paths == ("metadata.name",)
    assert not c.delete_before_replace, "a new name: the new object is created before the old is deleted"
    moved_ns = k8s("DynamoGraphDeployment", "kimi-k3", old["inputs"]["spec"], api=DGD_API, ns="other")
    c = one([provider(), old], [provider(), moved_ns])
    assert c.action == R.REPLACE and c.replace_paths == ("metadata.namespace",)


def test_job_template_change_replaces_and_deletes_first():
    old = k8s("Job", "dl", {"template": {"spec": {"containers": [{"name": "v", "image": "a"}]}}}, api="batch/v1")
    new = k8s("Job", "dl", {"template": {"spec": {"containers": [{"name": "v", "image": "b"}]}}}, api="batch/v1")
    c = one([provider(), old], [provider(), new])
    assert c.action == R.REPLACE and c.delete_before_replace, "same name: pulumi-kubernetes deletes first"
    assert c.changes[0].why == "spec.template"


def test_missing_namespace_is_default():
    old = k8s("ConfigMap", "x", ns=None)
    del old["inputs"]["metadata"]["namespace"]
    new = k8s("ConfigMap", "x", ns="default")
    assert one([provider(), old], [provider(), new]).action == R.SAME


def test_ignore_changes_resets_the_path_before_the_diff():
    old = k8s(
        "PersistentVolumeClaim", "cache", {"resources": {"requests": {"storage": "2000Gi"}}, "storageClassName": "fsx"}
    )
    new = k8s(
        "PersistentVolumeClaim",
        "cache",
        {"resources": {"requests": {"storage": "4000Gi"}}, "storageClassName": "fsx"},
        ignoreChanges=["spec.resources.requests.storage"],
    )
    assert one([provider(), old], [provider(), new]).action == R.SAME
    new["ignoreChanges"] = []
    assert one([provider(), old], [provider(), new]).action == R.UPDATE


def test_replace_on_changes_and_delete_before_replace_option():
    old = k8s("DynamoGraphDeployment", "g", {"backendFramework": "vllm"}, api=DGD_API)
    new = k8s(
        "DynamoGraphDeployment",
        "g",
        {"backendFramework": "sglang"},
        api=DGD_API,
        replaceOnChanges=["spec.backendFramework"],
        deleteBeforeReplace=False,
    )
    c = one([provider(), old], [provider(), new])
    assert c.action == R.REPLACE and c.changes[0].why == "replaceOnChanges spec.backendFramework"
    assert not c.delete_before_replace, "the option overrides the provider's delete-first"


def test_protected_replace_is_blocked():
    old = k8s("PersistentVolumeClaim", "cache", {"storageClassName": "a"}, protect=True)
    new = k8s("PersistentVolumeClaim", "cache", {"storageClassName": "b"}, protect=True)
    c = one([provider(), old], [provider(), new])
    assert c.action == R.REPLACE and c.blocked and c.replace_paths == ("spec.storageClassName",)


def test_removed_protected_resource_is_a_blocked_delete():
    old = k8s("PersistentVolumeClaim", "cache", {"storageClassName": "a"}, protect=True, retainOnDelete=True)
    c = one([provider(), old], [provider()])
    assert c.action == R.DELETE and c.blocked and c.retained


def test_urn_change_for_the_same_object_is_flagged_as_moved():
    old = k8s("DynamoGraphDeployment", "kimi-k3", {"x": 1}, api=DGD_API, urn_name="serving-deployment")
    new = k8s("DynamoGraphDeployment", "kimi-k3", {"x": 1}, api=DGD_API, urn_name="graph")
    out = {c.action: c for c in R.classify([provider(), old], [provider(), new]) if c.type.endswith("Deployment")}
    assert out[R.CREATE].moved == old["urn"] and out[R.DELETE].moved == new["urn"]
    # apiVersion is part of the type token: v1alpha1 -> v1beta1 is a new URN for the same object
    alpha = k8s("DynamoGraphDeployment", "kimi-k3", {"x": 1}, api="nvidia.com/v1alpha1")
    beta = k8s("DynamoGraphDeployment", "kimi-k3", {"x": 1}, api=DGD_API)
    assert {c.action for c in R.classify([provider(), alpha], [provider(), beta]) if c.moved} == {R.CREATE, R.DELETE}


def test_provider_render_directory_change_replaces_everything_it_manages():
    cm = k8s("ConfigMap", "x", None)
    c = one([provider(renderYamlToDirectory="a"), cm], [provider(renderYamlToDirectory="b"), cm])
    assert c.action == R.REPLACE and "provider" in c.replace_paths
    p = next(x for x in R.classify([provider(renderYamlToDirectory="a")], [provider(renderYamlToDirectory="b")]))
    assert p.action == R.REPLACE
    # a version-only change of the provider is not a config change (FilterProviderConfig)
    assert one([provider(version="4.34.2"), cm], [provider(version="4.35.0"), cm]).action == R.SAME


def test_helm_release_name_replaces_values_update():
    def rel(**inputs):
        return {
            "urn": f"{STACK}kubernetes:helm.sh/v3:Release::dynamo",
            "type": "kubernetes:helm.sh/v3:Release",
            "name": "dynamo",
            "provider": PROVIDER_URN,
            "inputs": {"name": "dynamo-platform", "namespace": "dynamo-system", "version": "1.5.0", **inputs},
        }

    assert one([provider(), rel()], [provider(), rel(version="1.6.0")]).action == R.UPDATE
    assert one([provider(), rel()], [provider(), rel(namespace="dynamo")]).action == R.REPLACE


def aws(rtype, **inputs):
    return {"urn": f"{STACK}{rtype}::r", "type": rtype, "name": "r", "provider": "", "inputs": inputs}


def test_aws_force_new_from_the_terraform_schema():
    ng = "aws:eks/nodeGroup:NodeGroup"
    base = aws(ng, amiType="AL2023_ARM_64_NVIDIA", scalingConfig={"desiredSize": 4, "maxSize": 4, "minSize": 0})
    assert (
        one(
            [base],
            [aws(ng, amiType="AL2023_ARM_64_NVIDIA", scalingConfig={"desiredSize": 0, "maxSize": 4, "minSize": 0})],
        ).action
        == R.UPDATE
    )
    c = one([base], [aws(ng, amiType="AL2023_x86_64_NVIDIA", scalingConfig=base["inputs"]["scalingConfig"])])
    assert c.action == R.REPLACE and c.replace_paths == ("amiType",)
    fsx = "aws:fsx/lustreFileSystem:LustreFileSystem"
    assert one([aws(fsx, storageCapacity=4800)], [aws(fsx, storageCapacity=9600)]).action == R.UPDATE
    assert one([aws(fsx, storageCapacity=9600)], [aws(fsx, storageCapacity=4800)]).action == R.REPLACE
    assert one([aws(fsx, deploymentType="PERSISTENT_2")], [aws(fsx, deploymentType="SCRATCH_2")]).action == R.REPLACE
    c = one([aws(fsx, efaEnabled=False)], [aws(fsx, efaEnabled=True)])
    assert c.action == R.UPDATE and not c.certain, "not in the schema version read: uncertain, not a guess"
    c = one([aws("aws:ec2/vpc:Vpc", cidrBlock="10.0.0.0/16")], [aws("aws:ec2/vpc:Vpc", cidrBlock="10.1.0.0/16")])
    assert not c.certain


def test_gcp_force_new_from_the_terraform_schema():
    """terraform-provider-google's node_config.go: ephemeral_storage_local_ssd_config is ForceNew, so adding Local SSD
    ephemeral storage to an existing GPU pool recreates it (recipes/facts/gcp-force-new.yaml); any other GCP change is
    an update nobody read the schema for: uncertain, as on AWS."""
    pool = "gcp:container/nodePool:NodePool"
    base = aws(pool, nodeCount=4, nodeConfig={"machineType": "a4x-highgpu-4g"})
    ssd = {"machineType": "a4x-highgpu-4g", "ephemeralStorageLocalSsdConfig": {"localSsdCount": 0}}
    c = one([base], [aws(pool, nodeCount=4, nodeConfig=ssd)])
    assert c.action == R.REPLACE and c.replace_paths == ("nodeConfig.ephemeralStorageLocalSsdConfig",)
    c = one([base], [aws(pool, nodeCount=6, nodeConfig=base["inputs"]["nodeConfig"])])
    assert c.action == R.UPDATE and not c.certain
    c = one([aws("gcp:compute/network:Network", mtu=1460)], [aws("gcp:compute/network:Network", mtu=8896)])
    assert c.action == R.UPDATE and not c.certain


def test_property_paths_round_trip():
    p = 'metadata.annotations["pulumi.com/waitFor"]'
    assert property_paths.parse_path(p) == ("metadata", "annotations", "pulumi.com/waitFor")
    assert property_paths.format_path(property_paths.parse_path(p)) == p
    assert property_paths.parse_path("spec.containers[*].image") == ("spec", "containers", "*", "image")
    assert property_paths.path_contains(
        property_paths.parse_path("spec.containers[*]"), property_paths.parse_path("spec.containers[3].env[0]")
    )


# ------------------------------------------------------------------------------------ upgrade (transition) rules
from policies.rules import upgrades  # noqa: E402


def cache_pvc(ns="kimi-k3"):
    return k8s(
        "PersistentVolumeClaim",
        "kimi-k3-model-cache",
        {"storageClassName": "fsx", "accessModes": ["ReadWriteMany"]},
        ns=ns,
        protect=True,
        retainOnDelete=True,
    )


def graph(name="kimi-k3", ns="kimi-k3", replicas=1):
    return k8s(
        "DynamoGraphDeployment",
        name,
        {"components": [{"name": "Decode", "replicas": replicas}]},
        api=DGD_API,
        ns=ns,
        urn_name="kimi-k3-serving-deployment",
    )


def test_transition_rules_pass_an_in_place_update():
    _, v = upgrades.run_transition_rules(
        [provider(), graph(), cache_pvc()], [provider(), graph(replicas=2), cache_pvc()]
    )
    assert v == []


def test_transition_rules_fail_a_renamed_graph_and_a_moved_cache():
    _, v = upgrades.run_transition_rules(
        [provider(), graph(), cache_pvc()], [provider(), graph(name="kimi-k3-gb300"), cache_pvc(ns="prod")]
    )
    assert {(x.rule, x.level) for x in v} == {
        ("graph-updated-in-place", "mandatory"),
        ("model-cache-kept", "mandatory"),
    }
    assert "ai-dynamo/dynamo#13495" in next(x.message for x in v if x.rule == "graph-updated-in-place")
    assert "protect" in next(x.message for x in v if x.rule == "model-cache-kept")


def test_transition_rules_allow_a_retained_cache_dropped_from_the_stack_but_not_a_deleted_graph():
    _, v = upgrades.run_transition_rules([provider(), graph(), cache_pvc()], [provider()])
    assert [x.rule for x in v] == ["graph-updated-in-place"]


def test_state_export_records_match_render_records():
    """`pulumi stack export` (checkpoint v3) as the previous side: secrets, default providers, provider ids."""
    state = {
        "version": 3,
        "deployment": {
            "resources": [
                {"urn": STACK + "pulumi:pulumi:Stack::kimi-k3-s", "type": "pulumi:pulumi:Stack", "custom": False},
                {"urn": STACK + "pulumi:providers:aws::default_7_51_1", "type": "pulumi:providers:aws", "custom": True},
                {
                    **provider(),
                    "inputs": {
                        "kubeconfig": {offline_state.SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "x"}
                    },
                },
                {**graph(), "provider": PROVIDER_URN + "::04da6b54"},
                {
                    **k8s("Secret", "kimi-k3-hf-token"),
                    "provider": PROVIDER_URN + "::04da6b54",
                    "inputs": {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "kimi-k3-hf-token", "namespace": "kimi-k3"},
                        "stringData": {offline_state.SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "y"},
                    },
                },
            ]
        },
    }
    old = offline_state.records_from_state(state)
    assert [r["type"] for r in old] == [
        "pulumi:providers:kubernetes",
        DGD_API and "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment",
        "kubernetes:core/v1:Secret",
    ]
    secret = k8s("Secret", "kimi-k3-hf-token")
    secret["inputs"]["stringData"] = {"HF_TOKEN": "[secret]"}  # as render writes it
    out = R.classify(old, [provider(), graph(), secret])
    assert {c.action for c in out} == {R.SAME}, [c.as_json() for c in out if c.action != R.SAME]


def test_state_defaults_of_bridged_providers_are_not_removals():
    fsx = "aws:fsx/lustreFileSystem:LustreFileSystem"
    deployed = {**aws(fsx, storageCapacity=4800, copyTagsToBackups=False, storageType="SSD"), "fromState": True}
    assert one([deployed], [aws(fsx, storageCapacity=4800)]).action == R.SAME
    del deployed["fromState"]  # two renders: a key that disappears is a real removal (ForceNew here)
    assert one([deployed], [aws(fsx, storageCapacity=4800)]).action == R.REPLACE


def test_diff_reports_a_replaced_graph_as_a_new_violation():
    """`kimi-k3 diff` (the PR comment) carries the upgrade rules, offline, for what the pack cannot see."""
    from kimi_k3.commands import diff_compare

    def render(*records):
        return diff_compare.Render({r["urn"]: r for r in records}, {}, [], [])

    report = diff_compare.diff_stack(
        "s", render(provider(), graph()), render(provider(), graph(name="kimi-k3-gb300")), {"base": None, "head": None}
    )
    assert [v["rule"] for v in report["policy"]["new"]] == ["graph-updated-in-place"]
    same = diff_compare.diff_stack(
        "s", render(provider(), graph()), render(provider(), graph(replicas=3)), {"base": None, "head": None}
    )
    assert same["policy"]["new"] == []


KUBECONFIG_A = "apiVersion: v1\nclusters:\n- cluster: {server: 'https://127.0.0.1:1'}\n  name: fake-cluster\n"
KUBECONFIG_B = KUBECONFIG_A.replace("server:", "tls-server-name: pulumi.com, server:")


# pulumi-kubernetes provider/pkg/provider/testdata/diffconfig/* (@94977969d641): olds, news, wantReplaces
@pytest.mark.parametrize(
    "olds,news,want",
    [
        ({"renderYamlToDirectory": "/foo"}, {"renderYamlToDirectory": "/bar"}, ["renderYamlToDirectory"]),
        ({}, {"clusterIdentifier": "foo"}, []),  # add-cluster-identifier
        (
            {"clusterIdentifier": "foo"},
            {"clusterIdentifier": "bar"},
            ["clusterIdentifier"],
        ),  # change-cluster-identifier
        ({"clusterIdentifier": "foo"}, {}, []),  # remove-cluster-identifier
        ({"kubeconfig": KUBECONFIG_A}, {"kubeconfig": KUBECONFIG_B}, ["kubeconfig"]),  # change-kubeconfig
        (
            {"kubeconfig": KUBECONFIG_A, "clusterIdentifier": "foo"},
            {"kubeconfig": KUBECONFIG_B, "clusterIdentifier": "foo"},
            [],
        ),  # ...-with-identifier
        (
            {"kubeconfig": KUBECONFIG_A, "clusterIdentifier": "foo"},
            {"kubeconfig": KUBECONFIG_B},
            ["kubeconfig"],
        ),  # remove-cluster-identifier-with-kubeconfig-change
        ({"kubeconfig": KUBECONFIG_A}, {"kubeconfig": KUBECONFIG_A}, []),  # no-changes
    ],
    ids=[
        "render-dir",
        "add-id",
        "change-id",
        "remove-id",
        "kubeconfig",
        "kubeconfig-with-id",
        "remove-id-kubeconfig",
        "no-changes",
    ],
)
def test_provider_diffconfig_cases(olds, news, want):
    assert k8s_replace.k8s_provider_replaces(olds, news) == want


def test_eks_cluster_version_and_subnets_update_role_replaces():
    eks = "aws:eks/cluster:Cluster"
    base = aws(eks, roleArn="arn:r1", version="1.34", vpcConfig={"subnetIds": ["a", "b"]})
    assert (
        one([base], [aws(eks, roleArn="arn:r1", version="1.35", vpcConfig={"subnetIds": ["a", "c"]})]).action
        == R.UPDATE
    )
    c = one([base], [aws(eks, roleArn="arn:r2", version="1.34", vpcConfig={"subnetIds": ["a", "b"]})])
    assert c.action == R.REPLACE and c.replace_paths == ("roleArn",) and c.certain


def test_a_moved_object_under_upsert_is_deleted_after_adoption():
    old = k8s("DynamoGraphDeployment", "kimi-k3", {"x": 1}, api=DGD_API, urn_name="serving-deployment")
    new = k8s("DynamoGraphDeployment", "kimi-k3", {"x": 1}, api=DGD_API, urn_name="graph")
    p = provider(upsertExistingObjects="true")
    create = next(c for c in R.classify([p, old], [p, new]) if c.action == R.CREATE)
    assert "adopts the live object" in create.reasons[0]
    create = next(c for c in R.classify([provider(), old], [provider(), new]) if c.action == R.CREATE)
    assert "already exists" in create.reasons[0]
