"""Storage: every writable mount of a shared filesystem (EFS, NFS, FSx) can be written by the uid that runs.

Who may write a shared volume is decided outside the pod spec, so the rule assembles it from four places:
- the container's effective uid/gid: securityContext runAsUser/runAsGroup (container over pod), else the image's USER
  (recipes/facts/images.yaml `user`; ai-dynamo/dynamo container/templates/vllm_runtime.Dockerfile ends in `USER dynamo`,
  uid 1000 gid 0); the Dynamo operator sets only fsGroup (deploy/operator/internal/dynamo/graph.go,
  applyDefaultSecurityContext), never runAsUser;
- fsGroup and supplementalGroups do nothing here: the EFS CSI driver declares no fsGroupPolicy (its chart's
  csidriver.yaml), so for ReadWriteMany volumes without fsType kubelet chowns nothing, and NFS has no ownership
  management at all; except on a driver whose CSIDriver says `fsGroupPolicy: File` (Filestore): there kubelet gives
  the volume root the pod's fsGroup, adds group rwx and setgid (pkg/volume/volume_linux.go SetVolumeOwnership);
- how the volume root is prepared: an EFS access point (every request runs as its PosixUser; EFS creates its root
  directory with CreationInfo owner and mode), the EFS CSI driver's dynamic provisioning (an access point per claim,
  root directory owned by its uid/gid with `directoryPerms`), or nothing: a new EFS file system's root is root:root
  0755 (EFS user guide, NFS-level permissions), assumed the same for NFS exports and FSx;
- a subPath that does not exist is created by kubelet (root on the node, or the access point's user) with the volume
  root's mode (kubernetes pkg/kubelet/kubelet_pods.go makeMounts: SafeMakeDir with GetMode(volumePath)): it has the
  root's owner and mode, so it is writable exactly when the root is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping, Optional, Sequence

from kimi_k3.facts.images import image_facts, operator_default_fs_group
from policies.rules.base import Context, Finding, Result, Skipped, all_containers, name_of, pod_specs, target_of

EFS_DRIVER = "efs.csi.aws.com"
# CSI drivers (and the in-tree `nfs` source) of network filesystems many pods share, whose files carry POSIX owners.
SHARED_DRIVERS = {
    EFS_DRIVER: "EFS",
    "fsx.csi.aws.com": "FSx for Lustre",
    "nfs.csi.k8s.io": "NFS",
    "filestore.csi.storage.gke.io": "Filestore",
    "nfs": "NFS",
}
# Block devices (one node's filesystem, fsGroup applies): never a shared filesystem, whatever the claim's access mode.
BLOCK_DRIVERS = {"ebs.csi.aws.com", "pd.csi.storage.gke.io", "disk.csi.azure.com"}
# Shared drivers whose CSIDriver declares fsGroupPolicy File (kubernetes-sigs/gcp-filestore-csi-driver
# deploy/kubernetes/overlays/stable-master/fsgrouppolicy.yaml): kubelet applies the pod's fsGroup to the volume root.
FS_GROUP_DRIVERS = {"filestore.csi.storage.gke.io"}
ACCESS_POINT_TYPE = "aws:efs/accessPoint:AccessPoint"
NEW_ROOT = (0, 0, 0o755)  # owner uid, gid, mode of a new EFS root (documented) or NFS/FSx export (assumed)
# What the Pulumi engine passes a policy for a value not known yet (pulumi_policy/proxy.py UNKNOWN_*_VALUE): during a
# first preview the PV's volumeHandle (file system and access point ids) is one of these.
UNKNOWN_VALUES = ("04da6b54-80e4-46f7-96ec-b56ff0331ba9", "dd056dcd-154b-4c76-9bd3-c8f88648b5ff")


@dataclass(frozen=True)
class Prepared:
    """Who writes through the volume and what its root allows."""

    owner_uid: int
    owner_gid: int
    mode: int
    how: str
    writer: Optional[tuple[int, int]] = None  # an access point's enforced POSIX user (replaces the container's)
    fs_group: bool = False  # the driver applies the pod's fsGroup to the root (FS_GROUP_DRIVERS)


def _by_name(objects: Sequence[Mapping], kind: str) -> dict[tuple[Optional[str], str], Mapping]:
    out = {}
    for o in objects:
        if o.get("kind") == kind:
            meta = o.get("metadata") or {}
            out[(meta.get("namespace"), str(meta.get("name")))] = o
    return out


def _find(index: Mapping[tuple[Optional[str], str], Mapping], namespace: Optional[str], name: str) -> Optional[Mapping]:
    """An object by (namespace, name); hand-written files often leave the namespace out."""
    return index.get((namespace, name)) or next(
        (o for (ns, n), o in index.items() if n == name and (ns is None or namespace is None)), None
    )


def _access_point(handle: str, ctx: Context) -> Optional[Mapping[str, Any]]:
    """The inputs of the EFS access point a volumeHandle `fs-id::fsap-id` names, where the stack shows it."""
    fs_id, _, ap_id = handle.split(":", 2)
    aps = [r for r in ctx.resources or () if r.type == ACCESS_POINT_TYPE]
    # A real stack: the resource's id; a render: NAME-id (kimi_k3/offline/synth.py); else the one on that filesystem.
    for r in aps:
        if ap_id in ((r.aws_inputs or {}).get("id"), f"{r.name}-id"):
            return r.aws_inputs or {}
    on_fs = [r for r in aps if str((r.aws_inputs or {}).get("fileSystemId")) == fs_id]
    return (on_fs[0].aws_inputs or {}) if len(on_fs) == 1 else None


def _octal(value: Any) -> Optional[int]:
    try:
        return int(str(value), 8)
    except ValueError:
        return None


def _prepared(
    claim: Optional[Mapping], namespace: Optional[str], objects: Sequence[Mapping], ctx: Context, claim_name: str
) -> tuple[Optional[str], Any]:
    """(filesystem kind, Prepared | skip reason str) of a claim; (None, None) when it is not a shared filesystem."""
    if claim is None:
        return None, None
    spec = claim.get("spec") or {}
    # Many nodes writing one volume is a shared filesystem, whatever its class or driver is called.
    shared = "ReadWriteMany" in (spec.get("accessModes") or [])
    pvs = _by_name(objects, "PersistentVolume")
    pv = (
        _find(pvs, None, spec["volumeName"])
        if spec.get("volumeName")
        else next(
            (
                p
                for p in pvs.values()
                if ((p.get("spec") or {}).get("claimRef") or {}).get("name") == claim_name
                and ((p.get("spec") or {}).get("claimRef") or {}).get("namespace") in (None, namespace)
            ),
            None,
        )
    )
    if pv is not None:
        pspec = pv.get("spec") or {}
        csi = pspec.get("csi") or {}
        driver = csi.get("driver") or ("nfs" if pspec.get("nfs") else None)
        if driver not in SHARED_DRIVERS:
            if driver not in BLOCK_DRIVERS and (shared or "ReadWriteMany" in (pspec.get("accessModes") or [])):
                return "shared", (
                    f"PersistentVolume {(pv.get('metadata') or {}).get('name')} is ReadWriteMany on "
                    f"{driver or 'a volume source'} this rule does not know: who owns its root is unknown"
                )
            return None, None
        kind = SHARED_DRIVERS[driver]
        handle = str(csi.get("volumeHandle") or "")
        pv_name = (pv.get("metadata") or {}).get("name")
        if any(u in handle or u == str(pspec.get("csi")) for u in UNKNOWN_VALUES):
            return kind, (
                f"PersistentVolume {pv_name}: its volumeHandle is not known yet (a preview before the file "
                "system exists)"
            )
        if driver == EFS_DRIVER and handle.count(":") == 2 and handle.split(":", 2)[2]:
            ap = _access_point(handle, ctx)
            if ap is None:
                return kind, (
                    f"PersistentVolume {pv_name} mounts EFS access point {handle.split(':', 2)[2]}, which "
                    "this stack does not show (its PosixUser and root directory decide who can write)"
                )
            user = ap.get("posixUser") or {}
            root = ap.get("rootDirectory") or {}
            info = root.get("creationInfo") or {}
            writer = (int(user["uid"]), int(user["gid"])) if "uid" in user and "gid" in user else None
            if info and _octal(info.get("permissions")) is not None:
                return kind, Prepared(
                    int(info["ownerUid"]),
                    int(info["ownerGid"]),
                    _octal(info["permissions"]),
                    f"EFS access point root {root.get('path', '/')} created "
                    f"{info['ownerUid']}:{info['ownerGid']} {info['permissions']}",
                    writer,
                )
            if root.get("path", "/") in ("", "/"):
                return kind, Prepared(*NEW_ROOT, "EFS access point at the file system root (root:root 0755)", writer)
            return kind, (
                f"PersistentVolume {pv_name}: access point root {root.get('path')} has no CreationInfo, "
                "so its owner is whatever made it"
            )
        return kind, Prepared(
            *NEW_ROOT,
            f"PersistentVolume {pv_name}: {kind} root as created, root:root 0755"
            + ("" if driver in FS_GROUP_DRIVERS else " (no access point, nothing chowns it)"),
            fs_group=driver in FS_GROUP_DRIVERS,
        )
    sc_name = spec.get("storageClassName")
    sc = _find(_by_name(objects, "StorageClass"), None, sc_name) if sc_name else None
    if sc is None:
        if shared or sc_name and any(k in str(sc_name).lower() for k in ("efs", "nfs", "fsx", "filestore")):
            if not sc_name:
                return "shared", (
                    "a ReadWriteMany claim of the cluster's default storage class, not in the input: "
                    "who owns a provisioned volume's root is unknown"
                )
            return "shared", (
                f"storage class {sc_name!r} looks like a shared filesystem but is not in the input: who "
                "owns a provisioned volume's root is unknown"
            )
        return None, None
    driver = sc.get("provisioner")
    if driver not in SHARED_DRIVERS:
        if shared and driver not in BLOCK_DRIVERS:
            return "shared", (
                f"storage class {sc_name} ({driver}) provisions a ReadWriteMany volume this rule does "
                "not know: who owns its root is unknown"
            )
        return None, None
    params = sc.get("parameters") or {}
    if driver == EFS_DRIVER and params.get("provisioningMode") == "efs-ap":
        mode = _octal(params.get("directoryPerms", ""))
        if mode is None:
            return SHARED_DRIVERS[driver], f"storage class {sc_name}: directoryPerms {params.get('directoryPerms')!r}"
        # The driver's access point writes as its uid (default: the allocated gid) and owns its root directory.
        uid = int(params.get("uid", params.get("gid", -1)))
        gid = int(params.get("gid", uid))
        return SHARED_DRIVERS[driver], Prepared(
            uid,
            gid,
            mode,
            f"storage class {sc_name}: EFS access point per claim, directoryPerms {params.get('directoryPerms')}",
            (uid, gid),
        )
    if driver in FS_GROUP_DRIVERS:  # a new share's root, as any NFS export's: root:root 0755, until kubelet's fsGroup
        return SHARED_DRIVERS[driver], Prepared(
            *NEW_ROOT, f"storage class {sc_name}: a new {SHARED_DRIVERS[driver]} share, root:root 0755", fs_group=True
        )
    return SHARED_DRIVERS[driver], f"storage class {sc_name} ({driver}): how it prepares a volume's root is unknown"


def _can_write(uid: int, groups: set[int], p: Prepared) -> bool:
    if uid == 0:
        return True  # EFS and NFS without root squashing (no EFS file system policy here) let root write
    if uid == p.owner_uid:
        return bool(p.mode & 0o200)
    if p.owner_gid in groups:
        return bool(p.mode & 0o020)
    return bool(p.mode & 0o002)


def effective_user(container: Mapping, spec: Mapping) -> tuple[Optional[int], Optional[int], str]:
    """(uid, gid, where it comes from) a container runs as: its securityContext, the pod's, else the image's USER."""
    csc, psc = container.get("securityContext") or {}, spec.get("securityContext") or {}
    image = image_facts(container.get("image")).user
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup"))
    if uid is None:
        if image is None:
            return (
                None,
                None,
                f"image {container.get('image')}: USER unknown (recipes/facts/images.yaml) and no runAsUser",
            )
        uid, where = image[0], f"the image's USER ({container.get('image')})"
    else:
        where = "securityContext.runAsUser"
    if gid is None:
        # No runAsGroup: the runtime takes the user's group from the image (its USER's, else 0).
        gid = image[1] if image and image[0] == uid else 0
    return int(uid), int(gid), where


def check_shared_mounts_writable(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    pvcs = _by_name(objects, "PersistentVolumeClaim")
    for obj in objects:
        namespace = (obj.get("metadata") or {}).get("namespace")
        for label, spec in pod_specs(obj):
            volumes = {v.get("name"): v for v in spec.get("volumes") or []}
            psc = spec.get("securityContext") or {}
            fs_group = int(psc["fsGroup"]) if psc.get("fsGroup") is not None else None
            fs_from = "the pod's fsGroup"
            if label.startswith("component ") and "securityContext" not in spec:
                fs_group, fs_from = operator_default_fs_group(), "the Dynamo operator's default fsGroup"
            # kubelet adds fsGroup to every container's supplementary groups, whatever the volume.
            groups_extra = {int(g) for g in psc.get("supplementalGroups") or []} | (
                {fs_group} if fs_group is not None else set()
            )
            for container in all_containers(spec):
                for mount in container.get("volumeMounts") or []:
                    vol = volumes.get(mount.get("name")) or {}
                    if mount.get("readOnly"):
                        continue
                    where = f"{label} container {name_of(container)}: {mount.get('mountPath')}"
                    if vol.get("nfs") is not None:
                        kind, prep = "NFS", Prepared(*NEW_ROOT, f"NFS export {vol['nfs'].get('path')} (root:root 0755)")
                    elif vol.get("persistentVolumeClaim"):
                        pvc_src = vol["persistentVolumeClaim"]
                        if pvc_src.get("readOnly"):
                            continue
                        claim_name = str(pvc_src.get("claimName"))
                        kind, prep = _prepared(_find(pvcs, namespace, claim_name), namespace, objects, ctx, claim_name)
                    else:
                        continue
                    if kind is None:
                        continue
                    sub = (
                        f" (subPath {mount['subPath']}: kubelet makes it with the root's owner and mode)"
                        if mount.get("subPath")
                        else ""
                    )
                    if isinstance(prep, str):
                        yield Skipped(target_of(obj), f"{where}: writable {kind} mount; {prep}")
                        continue
                    if prep.fs_group and fs_group is not None:
                        prep = replace(
                            prep,
                            owner_gid=fs_group,
                            mode=prep.mode | 0o2770,
                            how=f"{prep.how}, then {fs_from} {fs_group} (fsGroupPolicy File): g+rwx setgid",
                        )
                    if prep.writer is not None:
                        uid, gid = prep.writer
                        who = f"the access point's POSIX user {uid}:{gid}"
                    else:
                        uid, gid, src = effective_user(container, spec)
                        if uid is None:
                            if not prep.mode & 0o002:
                                yield Skipped(target_of(obj), f"{where}: writable {kind} mount; {src}")
                            continue
                        who = f"uid {uid} gid {gid} ({src})"
                    if _can_write(uid, {gid} | groups_extra, prep):
                        continue
                    yield Finding(
                        target_of(obj),
                        f"{where}{sub} is a writable {kind} mount ({prep.how}), but it "
                        f"runs as {who}, which cannot write there "
                        + (
                            "(the driver applies fsGroup, and the pod sets none); set the pod's "
                            "securityContext.fsGroup to a group of that uid"
                            if prep.fs_group
                            else "(fsGroup changes nothing on this driver); prepare the volume for that uid (an "
                            "EFS access point with that PosixUser and CreationInfo) or run as the owner"
                        ),
                    )
