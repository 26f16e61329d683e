"""Issue 19 finding 1: every writable mount of a shared filesystem is writable by the uid that runs.

The consumers' facts the rule and the fix rest on (sources in policies/rules/storage.py and kimi_k3/aws/nodes.py): the
Dynamo runtime image runs as uid 1000 gid 0, the operator sets only fsGroup, a new EFS root is root:root 0755,
kubelet makes a missing subPath with the root's mode, the EFS CSI driver declares no fsGroupPolicy."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from conftest import STACKS, by_kind

from kimi_k3.facts.images import image_facts, runtime_user
from policies import rules
from policies.rules import base, engine_form
from policies.rules.base import all_containers, pod_specs

RULE = "shared-mounts-writable"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0-kimi-k3-dev.1"
AP_TYPE = "aws:efs/accessPoint:AccessPoint"


def infos(records):
    return [
        engine_form.resource_info(r["type"], r["name"], r["inputs"], r.get("protect", False), r.get("retainOnDelete"))
        for r in records
    ]


def evaluate(objects, records=None):
    v, s = base.evaluate(
        rules.RULES_BY_NAME[RULE], objects, base.Context({}, infos(records) if records is not None else None)
    )
    return v, s


def old_form(r):
    """The render as it was before the fix: the compile-cache PV mounts the EFS root (no access point), and no
    container says which uid it runs as (the image's USER decides)."""
    objects, records = copy.deepcopy(r.objects), copy.deepcopy(r.resources)
    for pv in by_kind(objects, "PersistentVolume"):
        handle = pv["spec"]["csi"]["volumeHandle"]
        pv["spec"]["csi"]["volumeHandle"] = handle.split("::")[0]
    for dgd in by_kind(objects, "DynamoGraphDeployment"):
        for comp in dgd["spec"]["components"]:
            for c in comp["podTemplate"]["spec"]["containers"]:
                for k in ("runAsUser", "runAsGroup", "runAsNonRoot"):
                    c.get("securityContext", {}).pop(k, None)
    return objects, [x for x in records if x["type"] != AP_TYPE]


def worker_components(objects):
    (dgd,) = by_kind(objects, "DynamoGraphDeployment")
    return [c for c in dgd["spec"]["components"] if c["type"] != "frontend"]


@pytest.mark.parametrize("stack", STACKS)
def test_rule_passes_on_the_render_and_fails_on_its_old_form(stack, rendered):
    r = rendered[stack]
    violations, skipped = evaluate(r.objects, r.resources)
    assert violations == [] and skipped == []
    violations, _ = evaluate(*old_form(r))
    names = {c["name"] for c in worker_components(r.objects)}
    assert len(violations) == len(names), violations
    for name in names:
        (v,) = [v for v in violations if f"component {name} container main: /compile-cache" in v.message]
        assert "uid 1000 gid 0 (the image's USER" in v.message and "root:root 0755" in v.message
        assert "subPath" in v.message


@pytest.mark.parametrize("stack", STACKS)
def test_compile_cache_access_point_writes_as_the_workers_uid(stack, rendered):
    r = rendered[stack]
    (ap,) = [x for x in r.resources if x["type"] == AP_TYPE]
    (fs,) = [
        x
        for x in r.resources
        if x["type"] == "aws:efs/fileSystem:FileSystem" and x["name"] == "kimi-k3-storage-compile-cache"
    ]
    uid, gid = runtime_user()
    assert (uid, gid) == image_facts(IMAGE).user == (1000, 0)
    assert ap["inputs"]["posixUser"] == {"uid": uid, "gid": gid}
    assert ap["inputs"]["rootDirectory"]["creationInfo"] == {"ownerUid": uid, "ownerGid": gid, "permissions": "0775"}
    assert ap["inputs"]["fileSystemId"] == f"{fs['name']}-id"
    # EFS can only create the access point's directory through a mount target
    assert {
        x["urn"]
        for x in r.resources
        if x["type"] == "aws:efs/mountTarget:MountTarget" and x["name"].startswith(fs["name"])
    } <= set(ap["dependsOn"])
    (pv,) = [o for o in by_kind(r.objects, "PersistentVolume") if o["metadata"]["name"] == "kimi-k3-compile-cache"]
    assert pv["spec"]["csi"]["volumeHandle"] == f"{fs['name']}-id::{ap['name']}-id"
    dgd_urn = next(x["urn"] for x in r.resources if x["type"].endswith("DynamoGraphDeployment"))
    assert ap["urn"] in next(x for x in r.resources if x["urn"] == dgd_urn)["dependsOn"], "workers wait for it"
    for comp in worker_components(r.objects):
        (main,) = comp["podTemplate"]["spec"]["containers"]
        sc = main["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == (uid, gid, True)
        (mount,) = [m for m in main["volumeMounts"] if m["mountPath"] == "/compile-cache"]
        assert mount["subPath"] and not mount.get("readOnly")


@pytest.mark.parametrize("stack", STACKS)
def test_every_container_that_writes_names_its_uid(stack, rendered):
    """Where the uid matters (a writable volume other than emptyDir), the container says which one it runs as."""
    for obj in rendered[stack].objects:
        for label, spec in pod_specs(obj):
            volumes = {v["name"]: v for v in spec.get("volumes") or []}
            for c in all_containers(spec):
                writes = [
                    m
                    for m in c.get("volumeMounts") or []
                    if not m.get("readOnly") and "emptyDir" not in volumes.get(m["name"], {})
                ]
                if writes:
                    uid = (c.get("securityContext") or {}).get(
                        "runAsUser", (spec.get("securityContext") or {}).get("runAsUser")
                    )
                    assert uid is not None, (obj["metadata"]["name"], label, c["name"], writes)


def _hand_written(pv_or_sc, security=None, mount_extra=None, pod_security=None):
    pod = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "cache-user", "namespace": "ml"},
        "spec": {
            "template": {
                "spec": {
                    **({"securityContext": pod_security} if pod_security else {}),
                    "containers": [
                        {
                            "name": "vllm",
                            "image": IMAGE,
                            **({"securityContext": security} if security else {}),
                            "volumeMounts": [{"name": "cache", "mountPath": "/cache", **(mount_extra or {})}],
                        }
                    ],
                    "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "cache"}}],
                }
            }
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "cache", "namespace": "ml"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
    }
    if pv_or_sc["kind"] == "StorageClass":
        pvc["spec"]["storageClassName"] = pv_or_sc["metadata"]["name"]
    else:
        pvc["spec"]["volumeName"] = pv_or_sc["metadata"]["name"]
    return [pv_or_sc, pvc, pod]


EFS_PV = {
    "apiVersion": "v1",
    "kind": "PersistentVolume",
    "metadata": {"name": "efs-cache"},
    "spec": {
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteMany"],
        "csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-0123456789abcdef0"},
    },
}


def efs_class(**params):
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "efs-sc"},
        "provisioner": "efs.csi.aws.com",
        "parameters": {"provisioningMode": "efs-ap", "fileSystemId": "fs-0123456789abcdef0", **params},
    }


@pytest.mark.parametrize(
    "case, objects, fires",
    [
        # the image's USER (1000) on the root of an EFS file system: the finding's old form, by hand
        ("EFS root, image user", _hand_written(EFS_PV), True),
        ("EFS root, fsGroup (ignored by the EFS driver)", _hand_written(EFS_PV, pod_security={"fsGroup": 1000}), True),
        ("EFS root, subPath", _hand_written(EFS_PV, mount_extra={"subPath": "vllm"}), True),
        # NVIDIA's K3 profiles: runAsUser 0
        ("EFS root as root", _hand_written(EFS_PV, security={"runAsUser": 0}), False),
        ("EFS root read-only", _hand_written(EFS_PV, mount_extra={"readOnly": True}), False),
        # the driver's dynamic provisioning: an access point per claim that owns its root directory
        ("efs-ap class, 700", _hand_written(efs_class(directoryPerms="700", uid="1000", gid="0")), False),
        ("efs-ap class, 555", _hand_written(efs_class(directoryPerms="555")), True),
        (
            "inline NFS, uid 1000",
            [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p"},
                    "spec": {
                        "containers": [
                            {"name": "c", "image": IMAGE, "volumeMounts": [{"name": "n", "mountPath": "/n"}]}
                        ],
                        "volumes": [{"name": "n", "nfs": {"server": "10.0.0.2", "path": "/export"}}],
                    },
                }
            ],
            True,
        ),
        (
            "a block-storage claim is no shared filesystem",
            _hand_written(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": "gp3"},
                    "provisioner": "ebs.csi.aws.com",
                }
            ),
            False,
        ),
    ],
)
def test_hand_written_manifests(case, objects, fires):
    violations, skipped = evaluate(objects)
    assert bool(violations) is fires, (case, violations, skipped)
    assert not skipped, (case, skipped)


def test_what_cannot_be_seen_is_not_evaluated_never_passed():
    # an access point the input does not show, a class not in the input, an image of unknown USER
    ap_pv = copy.deepcopy(EFS_PV)
    ap_pv["spec"]["csi"]["volumeHandle"] = "fs-0123456789abcdef0::fsap-0123456789abcdef0"
    _, skipped = evaluate(_hand_written(ap_pv))
    assert len(skipped) == 1 and "fsap-0123456789abcdef0" in skipped[0].reason
    missing_class = _hand_written(efs_class(directoryPerms="700"))[1:]
    _, skipped = evaluate(missing_class)
    assert len(skipped) == 1 and "efs-sc" in skipped[0].reason
    # a first preview: the engine passes the PV's not-yet-known volumeHandle as its unknown-string sentinel
    preview_pv = copy.deepcopy(EFS_PV)
    preview_pv["spec"]["csi"]["volumeHandle"] = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    violations, skipped = evaluate(_hand_written(preview_pv))
    assert violations == [] and len(skipped) == 1 and "not known yet" in skipped[0].reason
    unknown = _hand_written(EFS_PV)
    unknown[2]["spec"]["template"]["spec"]["containers"][0]["image"] = "example.com/own/image:1"
    violations, skipped = evaluate(unknown)
    assert violations == [] and len(skipped) == 1 and "USER unknown" in skipped[0].reason


def test_kimi_k3_check_reports_it_on_a_hand_written_file(tmp_path, capsys):
    from kimi_k3.commands.main import main

    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump_all(_hand_written(EFS_PV, mount_extra={"subPath": "triton"})))
    code = main(["check", str(path)])
    out = capsys.readouterr().out
    assert code != 0 and RULE in out and "Deployment/cache-user" in out and "uid 1000" in out


def test_upstream_k3_profiles_run_as_root_and_pass(shared_reference):
    root = shared_reference / "dynamo" / "recipes" / "kimi-k3" / "vllm"
    for deploy in sorted(root.glob("*/deploy.yaml")):
        objects = [o for o in yaml.safe_load_all(deploy.read_text()) if o]
        violations, _ = evaluate(objects)
        assert violations == [], (deploy, json.dumps([v.message for v in violations]))
