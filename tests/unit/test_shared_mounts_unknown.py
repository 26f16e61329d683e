"""Issue 19 review, rule shared-mounts-writable on hand-written manifests: a writable ReadWriteMany claim whose
storage class, or PV's driver, the input does not show is a shared filesystem of unknown preparation. It must be
reported as not evaluated, never passed silently because the class's name lacks "efs"/"nfs"."""

from __future__ import annotations

import copy

from test_shared_mounts import EFS_PV, _hand_written, efs_class, evaluate


def test_an_unknown_class_on_a_shared_claim_is_not_evaluated():
    objects = _hand_written(efs_class(directoryPerms="700"))[1:]  # the class left out of the input
    objects[0]["spec"]["storageClassName"] = "rwx-cache"  # a name without a hint
    violations, skipped = evaluate(objects)
    assert violations == [] and len(skipped) == 1 and "rwx-cache" in skipped[0].reason, skipped


def test_a_shared_claim_of_the_default_class_is_not_evaluated():
    objects = _hand_written(efs_class(directoryPerms="700"))[1:]
    del objects[0]["spec"]["storageClassName"]  # the cluster's default class: unknown here
    violations, skipped = evaluate(objects)
    assert violations == [] and len(skipped) == 1 and "default" in skipped[0].reason, skipped


def test_a_shared_volume_of_an_unknown_driver_is_not_evaluated():
    pv = copy.deepcopy(EFS_PV)
    pv["spec"]["csi"]["driver"] = "cephfs.csi.ceph.com"
    violations, skipped = evaluate(_hand_written(pv))
    assert violations == [] and len(skipped) == 1 and "cephfs.csi.ceph.com" in skipped[0].reason, skipped
    sc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "ceph"},
        "provisioner": "cephfs.csi.ceph.com",
    }
    violations, skipped = evaluate(_hand_written(sc))
    assert violations == [] and len(skipped) == 1 and "cephfs.csi.ceph.com" in skipped[0].reason, skipped


def test_a_block_claim_of_an_unknown_class_still_passes():
    objects = _hand_written(efs_class(directoryPerms="700"))[1:]
    objects[0]["spec"].update(storageClassName="gp3", accessModes=["ReadWriteOnce"])
    assert evaluate(objects) == ([], [])
