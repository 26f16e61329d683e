"""Issue 24: the GKE compile cache on Filestore is reachable and writable by the workers (uid 1000).

Consumers' facts (sources in recipes/facts/gcp.yaml and policies/rules/storage.py): the Filestore CSI driver's
StorageClass `network` defaults to `default` (our VPC is not it); its CSIDriver says fsGroupPolicy File, so kubelet
gives the volume root the pod's fsGroup with g+rwx and setgid; a new share's root is root:root 0755; the Dynamo
runtime image runs as 1000:0."""

from __future__ import annotations

import copy

import pytest
from conftest import ROOT, by_kind
from support import render_stack_once as render_stack  # one render per stack per session

from policies import rules
from policies.rules import base

RULE = "shared-mounts-writable"
STACKS = ("gke-gb300", "gke-gb200-disagg")  # both machine types, aggregated and disaggregated


@pytest.fixture(scope="module")
def rendered():
    return {s: render_stack(s, ROOT) for s in STACKS}


def check(objects):
    return base.evaluate(rules.RULES_BY_NAME[RULE], objects, base.Context({}, None))


def compile_cache_claim(r):
    (pvc,) = [p for p in by_kind(r.objects, "PersistentVolumeClaim") if p["metadata"]["name"].endswith("compile-cache")]
    return pvc


@pytest.mark.parametrize("stack", STACKS)
def test_filestore_class_is_ours_and_on_the_cluster_vpc(rendered, stack):
    r = rendered[stack]
    pvc = compile_cache_claim(r)
    classes = {c["metadata"]["name"]: c for c in by_kind(r.objects, "StorageClass")}
    sc = classes.get(pvc["spec"]["storageClassName"])
    assert sc is not None, f"{stack}: the compile cache's StorageClass must be in the render, not GKE's default"
    assert sc["provisioner"] == "filestore.csi.storage.gke.io"
    # The driver's default network is `default`: the instance must be on the VPC the cluster's nodes are on.
    (cluster,) = [x for x in r.resources if x["type"] == "gcp:container/cluster:Cluster"]
    (vpc,) = [x for x in r.resources if x["type"] == "gcp:compute/network:Network" and x["name"].endswith("-vpc")]
    assert cluster["inputs"]["network"] == f"{vpc['name']}-id"
    assert sc["parameters"]["network"] == f"{vpc['name']}-placeholder" != "default"
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer"  # the instance lands in the first worker's zone


@pytest.mark.parametrize("stack", STACKS)
def test_workers_compile_cache_mount_is_evaluated_and_writable(rendered, stack):
    violations, skipped = check(rendered[stack].objects)
    assert not violations, [v.message for v in violations]
    assert not [s for s in skipped if "Filestore" in s.reason or "compile" in s.reason], [s.reason for s in skipped]


def _workers_with(objects, security_context):
    (dgd,) = by_kind(objects, "DynamoGraphDeployment")
    for comp in dgd["spec"]["components"]:
        spec = comp.get("podTemplate", {}).get("spec", {})
        spec.pop("securityContext", None)
        if security_context is not None:
            spec["securityContext"] = security_context
    return objects


def test_rule_catches_a_worker_whose_security_context_drops_the_fs_group(rendered):
    """Any securityContext turns the operator's fsGroup default off (ai-dynamo/dynamo graph.go): without fsGroup the
    share's root stays root:root 0755, which uid 1000 cannot write."""
    objects = _workers_with(copy.deepcopy(rendered["gke-gb300"].objects), {"runAsNonRoot": True})
    violations, _ = check(objects)
    assert violations
    assert all("fsGroup" in v.message and "Filestore" in v.message for v in violations)


def test_rule_knows_the_operator_default_for_a_template_without_security_context(rendered):
    objects = _workers_with(copy.deepcopy(rendered["gke-gb300"].objects), None)
    violations, skipped = check(objects)
    assert not violations, [v.message for v in violations]
    assert not [s for s in skipped if "Filestore" in s.reason or "compile" in s.reason]


def test_every_worker_mounting_the_cache_sets_its_fs_group(rendered):
    (dgd,) = by_kind(rendered["gke-gb200-disagg"].objects, "DynamoGraphDeployment")
    mounting = [
        c["podTemplate"]["spec"]
        for c in dgd["spec"]["components"]
        if any(v["name"] == "compile-cache" for v in c.get("podTemplate", {}).get("spec", {}).get("volumes", []))
    ]
    assert len(mounting) == 2  # prefill and decode
    # Written out in the pod spec (the operator's default would vanish the moment any securityContext is set).
    assert all(s.get("securityContext", {}).get("fsGroupChangePolicy") == "OnRootMismatch" for s in mounting)
