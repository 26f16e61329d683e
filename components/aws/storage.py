"""ModelStorage: the filesystem that holds the weights (FSx for Lustre or EFS), its CSI driver and a static PV."""
from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from kimi_k3 import aws as spec
from kimi_k3.config import StorageConfig

from .iam import Oidc, service_account_role

CSI = {"fsx-lustre": ("aws-fsx-csi-driver", "fsx.csi.aws.com"), "efs": ("aws-efs-csi-driver", "efs.csi.aws.com")}
# The CSI controllers' service accounts (EKS add-ons aws-fsx-csi-driver, aws-efs-csi-driver).
CSI_CONTROLLER_SA = {"fsx-lustre": "fsx-csi-controller-sa", "efs": "efs-csi-controller-sa"}


class ModelStorageArgs:
    def __init__(self, storage: StorageConfig, cluster_name: pulumi.Input[str], vpc_id: pulumi.Input[str],
                 vpc_cidr: str, subnet_id: pulumi.Input[str], mount_subnet_ids: list[pulumi.Input[str]],
                 claim_namespace: str, claim_name: str, cache_path_in_fs: str, size_gi: int,
                 wait_for: Optional[list[pulumi.Resource]] = None, tags: Optional[dict[str, str]] = None,
                 oidc: Optional[Oidc] = None, parked: bool = False):
        """
        :param storage: `kimi-k3:storage` (kind fsx-lustre or efs, sizes, throughput, optional S3 import path).
        :param cluster_name: the EKS cluster, for the CSI driver add-on.
        :param vpc_id: VPC of the filesystem's security group.
        :param vpc_cidr: clients allowed to mount (the node subnets are inside it).
        :param subnet_id: the filesystem's subnet: the GPU nodes' zone, where the weights are read.
        :param mount_subnet_ids: EFS mount targets (one per zone).
        :param claim_namespace: namespace of the model-cache PVC the PV is pre-bound to.
        :param claim_name: name of that PVC.
        :param cache_path_in_fs: where the checkpoint lives inside the filesystem (for the S3 association).
        :param size_gi: capacity the PV advertises (>= the PVC's request).
        :param wait_for: what the CSI driver add-on needs (nodes to run on: the system node group).
        :param tags: tags on every AWS resource.
        :param oidc: the cluster's IAM OIDC provider: the CSI controller gets its own IRSA role, not the node role.
        :param parked: only the filesystem (and its S3 association, security group): no cluster to mount it in.
        """
        self.oidc = oidc
        self.parked = parked
        self.wait_for = wait_for or []
        self.storage = storage
        self.cluster_name = cluster_name
        self.vpc_id = vpc_id
        self.vpc_cidr = vpc_cidr
        self.subnet_id = subnet_id
        self.mount_subnet_ids = mount_subnet_ids
        self.claim_namespace = claim_namespace
        self.claim_name = claim_name
        self.cache_path_in_fs = cache_path_in_fs
        self.size_gi = size_gi
        self.tags = tags or {}


class ModelStorage(pulumi.ComponentResource):
    """The weights' filesystem, protected and retained, bound to the model-cache PVC through a static PV (Retain).

    Teardown (`pulumi destroy --exclude-protected`, `make down`) keeps what is protected and everything it depends
    on: the filesystem, its S3 association, security group, subnet and VPC. Nothing in Kubernetes is protected
    (protect would keep its provider, and so the EKS cluster); the PV is only retained.

    `storage_class` is "" (static binding); `ready` is what the download Job must wait for (nothing GPU-related)."""

    filesystem_id: pulumi.Output[str]
    storage_class: str
    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: ModelStorageArgs, provider: k8s.Provider,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:aws:ModelStorage", name, None, opts)
        s, kind, tags = args.storage, args.storage.resolved_kind, {"kimi-k3/stack": pulumi.get_stack(), **args.tags}
        keep = pulumi.ResourceOptions(parent=self, protect=True, retain_on_delete=True)
        child = pulumi.ResourceOptions(parent=self)
        addon_name, driver = CSI[kind]
        if kind == "fsx-lustre":
            f = s.fsx
            sg = aws.ec2.SecurityGroup(
                f"{name}-fsx-sg", vpc_id=args.vpc_id, description="FSx for Lustre: LNET from the VPC, EFA within",
                ingress=[{"protocol": "tcp", "from_port": 988, "to_port": 988, "cidr_blocks": [args.vpc_cidr]},
                         {"protocol": "tcp", "from_port": 1018, "to_port": 1023, "cidr_blocks": [args.vpc_cidr]},
                         {"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
                egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}],
                tags=tags, opts=child)
            fs = aws.fsx.LustreFileSystem(
                f"{name}-fsx", deployment_type="PERSISTENT_2", storage_type="SSD",
                storage_capacity=f.storage_capacity_gib, per_unit_storage_throughput=f.per_unit_storage_throughput,
                file_system_type_version=f.file_system_type_version, efa_enabled=f.efa_enabled,
                metadata_configuration={"mode": "AUTOMATIC"}, data_compression_type="NONE",
                subnet_ids=args.subnet_id, security_group_ids=[sg.id], tags={**tags, "Name": f"{name}-fsx"},
                opts=keep)
            self.ready: list[pulumi.Resource] = [fs]
            if f.s3_import_path:
                # Weights pre-staged in the user's bucket appear in the cache path and load lazily from S3.
                self.ready.append(aws.fsx.DataRepositoryAssociation(
                    f"{name}-s3-import", file_system_id=fs.id, data_repository_path=f.s3_import_path,
                    file_system_path=args.cache_path_in_fs, batch_import_meta_data_on_create=True,
                    s3={"auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]}},
                    delete_data_in_filesystem=False, tags=tags,
                    # Kept with the filesystem: a path holds one association, so a recreated one would collide.
                    opts=pulumi.ResourceOptions(parent=self, protect=True, retain_on_delete=True)))
            self.filesystem_id = fs.id
            handle: Any = fs.id
            attributes: Any = pulumi.Output.all(fs.dns_name, fs.mount_name).apply(
                lambda a: {"dnsname": a[0], "mountname": a[1]})
            mount_options = ["flock"]
        else:  # efs
            sg = aws.ec2.SecurityGroup(
                f"{name}-efs-sg", vpc_id=args.vpc_id, description="EFS: NFS from the VPC",
                ingress=[{"protocol": "tcp", "from_port": 2049, "to_port": 2049, "cidr_blocks": [args.vpc_cidr]}],
                egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}],
                tags=tags, opts=child)
            fs = aws.efs.FileSystem(f"{name}-efs", encrypted=True, performance_mode="generalPurpose",
                                    throughput_mode=s.efs.throughput_mode, tags={**tags, "Name": f"{name}-efs"},
                                    opts=keep)
            targets = [] if args.parked else [
                aws.efs.MountTarget(f"{name}-efs-mt-{i}", file_system_id=fs.id, subnet_id=sid, security_groups=[sg.id],
                                    opts=child) for i, sid in enumerate(args.mount_subnet_ids)]
            self.ready = [fs, *targets]
            self.filesystem_id = fs.id
            handle, attributes, mount_options = fs.id, {}, None
        self.storage_class = ""
        if args.parked:
            self.register_outputs({"filesystemId": self.filesystem_id, "kind": kind, "parked": True})
            return
        # The controller's own identity (IRSA) with no AWS permissions: the static PV needs no FSx/EFS API call (no
        # dynamic provisioning); without it the controller would fall back to the node role. Dynamic provisioning
        # would need AmazonFSxFullAccess / AmazonEFSCSIDriverPolicy on this role (docs/aws.md).
        csi_role = None
        if args.oidc is not None:
            csi_role, _ = service_account_role(f"{name}-csi-controller", args.oidc, "kube-system",
                                               CSI_CONTROLLER_SA[kind], [], self, tags)
        addon = aws.eks.Addon(f"{name}-csi-driver", cluster_name=args.cluster_name, addon_name=addon_name,
                              service_account_role_arn=csi_role.arn if csi_role else None,
                              resolve_conflicts_on_create="OVERWRITE", tags=tags,
                              opts=pulumi.ResourceOptions(parent=self, depends_on=args.wait_for))
        self.ready.append(addon)
        pv = spec.static_pv(args.claim_name, args.size_gi, driver, handle, attributes,
                            args.claim_namespace, args.claim_name, mount_options)
        self.volume = k8s.core.v1.PersistentVolume(
            f"{name}-pv", metadata=pv["metadata"], spec=pv["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, retain_on_delete=True))
        self.ready.append(self.volume)
        self.storage_class = ""
        self.register_outputs({"filesystemId": self.filesystem_id, "kind": kind})
