"""nodes.py -> storage.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import base64
from typing import Any, Optional

from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import StackConfig
from kimi_k3.config.storage import FsxConfig
from kimi_k3.facts.aws import load_aws_facts
from kimi_k3.pods import program_path


def static_pv(
    name: str,
    capacity_gi: int,
    driver: str,
    volume_handle: Any,
    attributes: dict[str, Any],
    claim_namespace: str,
    claim_name: str,
    mount_options: Optional[list[str]] = None,
) -> dict[str, Any]:
    """A PersistentVolume pre-bound (claimRef) to the model-cache PVC, reclaim policy Retain.

    Why a static PV and not a StorageClass: the filesystem is a Pulumi resource, protected and retained, so the
    claim must bind to exactly that filesystem. Dynamic provisioning would create a second, untracked filesystem
    whose lifetime follows the PVC, not the stack."""
    spec: dict[str, Any] = {
        "capacity": {"storage": f"{capacity_gi}Gi"},
        "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "volumeMode": "Filesystem",
        "claimRef": {"namespace": claim_namespace, "name": claim_name},
        "csi": {"driver": driver, "volumeHandle": volume_handle, "volumeAttributes": attributes},
    }
    if mount_options:
        spec["mountOptions"] = mount_options
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "kimi-k3"}},
        "spec": spec,
    }


def pv_size_gi(cfg: StackConfig, cache_gi: int) -> int:
    """What the static PV advertises: the FSx capacity (GiB), or the cache size for EFS (elastic)."""
    return cfg.storage.fsx.storage_capacity_gib if cfg.storage.resolved_kind == "fsx-lustre" else cache_gi


def check_storage(cfg: StackConfig, cache_gi: int) -> None:
    if cfg.storage.resolved_kind == "fsx-lustre" and cache_gi > cfg.storage.fsx.storage_capacity_gib:
        cap, step = cfg.storage.fsx.storage_capacity_gib, load_aws_facts().fsx_size_step_gib
        need = -(-cache_gi // step) * step
        raise ConfigError(
            f"kimi-k3:storage.fsx.storageCapacityGiB = {cap}: the model cache needs {cache_gi} GiB; "
            f"allowed: {need} or more (a multiple of {step})"
        )


FETCH_SCRIPT = program_path("fetch_checkpoint.py")


# Amazon Linux 2023 for the fetchers, resolved by EC2 at launch ("resolve:ssm:" image ids, EC2 user guide
# "Use a Systems Manager parameter instead of an AMI ID"); the public parameter AWS publishes per architecture.
FETCHER_AMI = "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"


MOUNTPOINT_ADDON = "aws-mountpoint-s3-csi-driver"  # EKS add-on name (EKS user guide, mountpoint-for-s3-add-on)


MOUNTPOINT_DRIVER = "s3.csi.aws.com"


MOUNTPOINT_SERVICE_ACCOUNT = "s3-csi-driver-sa"  # the add-on's node service account in kube-system (same guide)


# Per storage kind: the EKS add-on that installs its CSI driver, and the driver's name in a PV.
CSI = {
    "fsx-lustre": ("aws-fsx-csi-driver", "fsx.csi.aws.com"),
    "efs": ("aws-efs-csi-driver", "efs.csi.aws.com"),
    "s3": (MOUNTPOINT_ADDON, MOUNTPOINT_DRIVER),
}
# The CSI controllers' service accounts (EKS add-ons aws-fsx-csi-driver, aws-efs-csi-driver).
CSI_CONTROLLER_SA = {"fsx-lustre": "fsx-csi-controller-sa", "efs": "efs-csi-controller-sa"}
# The node plugin must run on the tainted GPU nodes: the chart's default tolerates no taint
# (mountpoint-s3-csi-driver chart README: node.tolerateAllTaints, default false).
MOUNTPOINT_ADDON_CONFIGURATION = '{"node":{"tolerateAllTaints":true}}'
ALL_EGRESS = [{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}]


def is_local_zone(zone: str, region: str) -> bool:
    """A Local Zone's name extends its parent Region's with a location (us-east-1-dfw-2a); an AZ's adds a letter."""
    return zone.startswith(region + "-")


def storage_zone(cfg: StackConfig) -> str:
    """Where a filesystem of the stack (FSx, EFS mount target) is created: the GPU zone, unless it is a Local Zone.
    No source shows FSx for Lustre or EFS in the Dallas Local Zone (docs/aws.md "Model storage"): the EKS Local
    Zones guide lists node groups, EBS volumes and ALBs only. Then the first control-plane zone, across the link."""
    c = cfg.cluster
    gz = c.gpu_nodes.availability_zone
    return c.availability_zones[0] if is_local_zone(gz, c.region) else gz


def fetcher_user_data(
    *,
    bucket: str,
    prefix: str,
    repo: str,
    revision: str,
    secret_arn: str,
    region: str,
    index: int,
    count: int,
    hub_version: str,
    deadline_seconds: int = 28800,
    drafter: Optional[tuple[str, str, str]] = None,
) -> str:
    """Cloud-init script of one fetcher: Python 3.12 + huggingface_hub, the token from Secrets Manager (never in user
    data), the fetch script, then power off (the instance terminates: shutdown behaviour `terminate`). An EXIT trap
    powers off on every path, and on failure first writes the failing step and the log's tail to the bucket
    (fetch_checkpoint.failure_key), which the verify Job reports at once instead of polling for hours. Every step
    ends by `deadline_seconds` from boot (the stack's download timeout): a hung step has no exit path otherwise.
    `drafter` (repo, revision, bucket prefix: kimi-k3:serving.speculation): the same program fetches this fetcher's
    share of it first, under its own revision's prefix, with its own manifest, within the same deadline; a failure
    is recorded under both prefixes (a share's manifest supersedes its failure record, so a finished one is not
    failed by it)."""
    from kimi_k3.pods.fetch_checkpoint import failure_key

    script = base64.b64encode(FETCH_SCRIPT.read_bytes()).decode()
    failed = f"s3://{bucket}/{failure_key(prefix, index, count)}"
    also = f"s3://{bucket}/{failure_key(drafter[2], index, count)}" if drafter else ""
    log = "/var/log/kimi-k3-fetch.log"
    record = f'{{ echo "fetcher {index + 1}/{count} failed (exit $rc) at: $step$why"; tail -n 40 {log}; }}'
    return "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            f"export AWS_DEFAULT_REGION={region}",
            # Every exit (a failed step under set -e, a signal, success) runs this; it cannot itself stop the power-off.
            "step=boot",
            f"deadline=$((SECONDS + {deadline_seconds}))",
            # A hung step (stalled transfer, unanswering mirror) is cut at the deadline: exit 124, then the trap.
            'bounded() { local left=$((deadline - SECONDS)); timeout --kill-after=30 $((left > 1 ? left : 1)) "$@"; }',
            "finish() {",
            "  rc=$?",
            "  trap - EXIT",
            "  set +e",
            '  if [ "$rc" -ne 0 ]; then',
            '    why=\'\'; [ "$rc" -eq 124 ] && why=" (timed out: the deadline is '
            + str(deadline_seconds)
            + ' s from boot)"',
            f"    {record} \\",
            f"      | timeout 60 aws s3 cp --only-show-errors - {failed}",
            *([f"    {record} \\", f"      | timeout 60 aws s3 cp --only-show-errors - {also}"] if drafter else []),
            "  fi",
            "  shutdown -h now",
            "}",
            "trap finish EXIT",
            "trap 'exit 143' TERM INT HUP",
            f"exec > >(tee {log} | logger -t kimi-k3-fetch) 2>&1",
            # A replaced fetcher clears its share's earlier failure, so the verify Job does not report a stale one.
            f"step='clear the earlier failure'; bounded aws s3 rm --only-show-errors {failed}",
            *([f"bounded aws s3 rm --only-show-errors {also}"] if drafter else []),
            # Staging in memory: files in flight (fetch_checkpoint.PARALLEL_FILES shards) must fit; tmpfs defaults to half.
            "step='size /dev/shm'; mount -o remount,size=110G /dev/shm",
            "step='install python'; bounded dnf install -y -q python3.12 python3.12-pip",
            f"step='install huggingface_hub'; bounded python3.12 -m pip install -q 'huggingface_hub[hf_xet]=={hub_version}'",
            f"echo '{script}' | base64 -d > /opt/fetch_checkpoint.py",
            f"export MODEL_REPO={repo} MODEL_REVISION={revision} BUCKET={bucket} "
            f"PREFIX={prefix} FETCHER_INDEX={index} FETCHERS={count} STAGING=/dev/shm/kimi-k3 HF_XET_HIGH_PERFORMANCE=1",
            "step='read the token from Secrets Manager'",
            f"HF_TOKEN=$(bounded aws secretsmanager get-secret-value --secret-id {secret_arn} --query SecretString --output text)",
            "export HF_TOKEN",
            *(
                [
                    f"step='fetch_checkpoint.py (drafter {drafter[0]}@{drafter[1]})'; bounded env MODEL_REPO={drafter[0]} "
                    f"MODEL_REVISION={drafter[1]} PREFIX={drafter[2]} python3.12 /opt/fetch_checkpoint.py"
                ]
                if drafter
                else []
            ),
            "step='fetch_checkpoint.py'; bounded python3.12 /opt/fetch_checkpoint.py",
            "exit 0",
            "",
        ]
    )


def mountpoint_mount_options(region: str) -> list[str]:
    """Mountpoint options (mount-s3 flags without --, as the CSI driver takes them): read-only, other users
    (the containers' uid) may read, the bucket's Region."""
    return ["read-only", "allow-other", f"region {region}"]


def efs_mount_options(cfg: StackConfig) -> list[str]:
    """GPU nodes in a Local Zone have no mount target there: name the Regional zone's (EFS mount helper `az`
    option, EFS user guide "Mounting ... on EC2 in a different Availability Zone"); TLS in transit."""
    c = cfg.cluster
    if is_local_zone(c.gpu_nodes.availability_zone, c.region):
        return ["tls", f"az={storage_zone(cfg)}"]
    return ["tls"]


def fsx_security_group_problems(ingress: list[dict[str, Any]], egress: list[dict[str, Any]]) -> list[str]:
    """What FSx for Lustre rejects or cannot serve in a file system's security group (FSx Lustre guide, "File system
    access control with Amazon VPC" and "EFA-enabled security groups"; cannot-create-fs: "allow all internal inbound
    and outbound traffic"): LNET 988 and 1018-1023 in, and all traffic to and from the group itself both ways."""

    def has(rules: list[dict[str, Any]], pred) -> bool:
        return any(pred(r) for r in rules)

    def self_all(r: dict[str, Any]) -> bool:
        return str(r.get("protocol")) == "-1" and bool(r.get("self"))

    def tcp(lo: int, hi: int):
        return lambda r: (
            r.get("protocol") == "tcp"
            and r.get("from_port", r.get("fromPort")) <= lo
            and r.get("to_port", r.get("toPort")) >= hi
        )

    problems = []
    if not has(ingress, tcp(988, 988)) and not has(ingress, self_all):
        problems.append("no inbound LNET (tcp 988)")
    if not has(ingress, tcp(1018, 1023)) and not has(ingress, self_all):
        problems.append("no inbound LNET (tcp 1018-1023)")
    if not has(ingress, self_all):
        problems.append("no inbound all-traffic rule from the group itself")
    if not has(egress, self_all):
        problems.append("no outbound all-traffic rule to the group itself")
    return problems


def fsx_security_group(vpc_cidr: str) -> dict[str, Any]:
    """FSx needs LNET (988, 1018-1023) from its clients; all traffic within the group both ways is what an
    EFA-enabled file system requires (FSx "EFA-enabled security groups"), harmless without EFA."""
    return {
        "description": "FSx for Lustre: LNET from the VPC, all within",
        "ingress": [
            {"protocol": "tcp", "from_port": 988, "to_port": 988, "cidr_blocks": [vpc_cidr]},
            {"protocol": "tcp", "from_port": 1018, "to_port": 1023, "cidr_blocks": [vpc_cidr]},
            {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True},
        ],
        "egress": [{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}, *ALL_EGRESS],
    }


def fsx_filesystem(fsx: FsxConfig) -> dict[str, Any]:
    """The weights' FSx for Lustre file system, as `kimi-k3:storage.fsx` sizes it (subnet and groups aside)."""
    return {
        "deployment_type": "PERSISTENT_2",
        "storage_type": "SSD",
        "storage_capacity": fsx.storage_capacity_gib,
        "per_unit_storage_throughput": fsx.per_unit_storage_throughput,
        "file_system_type_version": fsx.file_system_type_version,
        "efa_enabled": fsx.efa_enabled,
        "metadata_configuration": {"mode": "AUTOMATIC"},
        "data_compression_type": "NONE",
    }


def fsx_s3_import(s3_import_path: str, cache_path_in_fs: str) -> dict[str, Any]:
    """Weights pre-staged in the user's bucket appear in the cache path and load lazily from S3."""
    return {
        "data_repository_path": s3_import_path,
        "file_system_path": cache_path_in_fs,
        "batch_import_meta_data_on_create": True,
        "s3": {"auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]}},
        "delete_data_in_filesystem": False,
    }


def efs_security_group(vpc_cidr: str) -> dict[str, Any]:
    return {
        "description": "EFS: NFS from the VPC",
        "ingress": [{"protocol": "tcp", "from_port": 2049, "to_port": 2049, "cidr_blocks": [vpc_cidr]}],
        "egress": list(ALL_EGRESS),
    }


def efs_filesystem(throughput_mode: str) -> dict[str, Any]:
    return {"encrypted": True, "performance_mode": "generalPurpose", "throughput_mode": throughput_mode}


def private_bucket() -> dict[str, Any]:
    """The weights bucket's public access block: nothing in it is ever public."""
    return {
        "block_public_acls": True,
        "block_public_policy": True,
        "ignore_public_acls": True,
        "restrict_public_buckets": True,
    }


def fetcher_security_group() -> dict[str, Any]:
    return {
        "description": "weights fetchers: egress only (Hub over NAT, S3 over the endpoint)",
        "egress": list(ALL_EGRESS),
    }


def fetcher_launch_template(instance_type: str) -> dict[str, Any]:
    """The fetchers' launch template (profile and security group aside): IMDSv2 only, terminated on power-off."""
    return {
        "image_id": FETCHER_AMI,
        "instance_type": instance_type,
        "instance_initiated_shutdown_behavior": "terminate",
        "metadata_options": {"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": 1},
        "block_device_mappings": [
            {
                "device_name": "/dev/xvda",
                "ebs": {
                    # Room for pip, the AL2023 image and hf_xet's chunk cache (under ~/.cache; 10 GB by default).
                    "volume_size": 100,
                    "volume_type": "gp3",
                    "delete_on_termination": "true",
                    "encrypted": "true",
                },
            }
        ],
    }
