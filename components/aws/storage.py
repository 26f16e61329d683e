"""ModelStorage: where the weights live (an S3 bucket filled by fetchers at t=0, FSx for Lustre or EFS), their CSI
driver and a static PV; and the shared compile-cache volume (EFS) the workers keep JIT and compile artifacts on."""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.aws.fetchers import weights_fetchers
from components.aws.iam import service_account_role
from components.aws.storage_args import ModelStorageArgs
from kimi_k3 import names
from kimi_k3.aws import iam
from kimi_k3.aws import nodes as spec
from kimi_k3.aws import storage as aws_storage
from kimi_k3.facts.images import runtime_user
from kimi_k3.k8s import model_cache


class ModelStorage(pulumi.ComponentResource):
    """The weights' store, protected and retained, bound to the model-cache PVC through a static PV (Retain).

    Teardown (`pulumi destroy --exclude-protected`, `make down`) keeps what is protected and everything it depends
    on: the bucket or filesystem, its S3 association, security group, subnet and VPC. Nothing in Kubernetes is
    protected (protect would keep its provider, and so the EKS cluster); the PV is only retained.

    `storage_class` is "" (static binding); `ready` is what the model-cache Job must wait for (nothing GPU-related;
    with kind s3 it includes the fetchers, so the Job's verification follows them)."""

    filesystem_id: pulumi.Output[str]
    storage_class: str
    ready: list[pulumi.Resource]

    def __init__(
        self, name: str, args: ModelStorageArgs, provider: k8s.Provider, opts: Optional[pulumi.ResourceOptions] = None
    ):
        super().__init__("kimi-k3:aws:ModelStorage", name, None, opts)
        s, kind, tags = args.storage, args.storage.resolved_kind, {"kimi-k3/stack": pulumi.get_stack(), **args.tags}
        keep = pulumi.ResourceOptions(parent=self, protect=True, retain_on_delete=True)
        child = pulumi.ResourceOptions(parent=self)
        addon_name, driver = aws_storage.CSI[kind]
        self.ready: list[pulumi.Resource] = []
        self.bucket_name: Optional[pulumi.Output[str]] = None
        mount_options: Optional[list[str]] = None
        addon_args: dict[str, Any] = {}
        if kind == "s3":
            handle, attributes, mount_options, addon_args = self._s3(name, args, tags, keep, child)
        elif kind == "fsx-lustre":
            f = s.fsx
            sg = aws.ec2.SecurityGroup(
                f"{name}-fsx-sg",
                vpc_id=args.vpc_id,
                **aws_storage.fsx_security_group(args.vpc_cidr),
                tags=tags,
                opts=child,
            )
            fs = aws.fsx.LustreFileSystem(
                f"{name}-fsx",
                **aws_storage.fsx_filesystem(f),
                subnet_ids=args.subnet_id,
                security_group_ids=[sg.id],
                tags={**tags, "Name": f"{name}-fsx"},
                opts=keep,
            )
            self.ready.append(fs)
            if f.s3_import_path:
                self.ready.append(
                    aws.fsx.DataRepositoryAssociation(
                        f"{name}-s3-import",
                        file_system_id=fs.id,
                        **aws_storage.fsx_s3_import(f.s3_import_path, args.cache_path_in_fs),
                        tags=tags,
                        # Kept with the filesystem: a path holds one association, so a recreated one would collide.
                        opts=pulumi.ResourceOptions(parent=self, protect=True, retain_on_delete=True),
                    )
                )
            self.filesystem_id = fs.id
            handle = fs.id
            attributes = pulumi.Output.all(fs.dns_name, fs.mount_name).apply(
                lambda a: {"dnsname": a[0], "mountname": a[1]}
            )
            mount_options = ["flock"]
        else:  # efs
            fs, targets = self._efs(f"{name}-efs", args, tags, keep, child, s.efs.throughput_mode)
            self.ready += [fs, *targets]
            self.filesystem_id = fs.id
            handle, attributes, mount_options = fs.id, {}, args.efs_mount_options
        self.storage_class = ""
        if args.parked:
            self.register_outputs({"filesystemId": self.filesystem_id, "kind": kind, "parked": True})
            return
        if kind != "s3":
            addon_args = self._controller_identity(f"{name}-csi-controller", kind, args, tags)
        addon = aws.eks.Addon(
            f"{name}-csi-driver",
            cluster_name=args.cluster_name,
            addon_name=addon_name,
            resolve_conflicts_on_create="OVERWRITE",
            tags=tags,
            **addon_args,
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.wait_for),
        )
        self.ready.append(addon)
        pv = aws_storage.static_pv(
            args.claim_name,
            args.size_gi,
            driver,
            handle,
            attributes,
            args.claim_namespace,
            args.claim_name,
            mount_options,
        )
        self.volume = k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata=pv["metadata"],
            spec=pv["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, retain_on_delete=True),
        )
        self.ready.append(self.volume)
        self.compile_cache_ready: list[pulumi.Resource] = []
        if args.compile_cache:
            self._compile_cache(name, args, tags, child, provider, efs_addon=addon if kind == "efs" else None)
        outputs: dict[str, Any] = {"filesystemId": self.filesystem_id, "kind": kind}
        if self.bucket_name is not None:
            outputs["bucket"] = self.bucket_name
        self.register_outputs(outputs)

    def _s3(
        self,
        name: str,
        args: ModelStorageArgs,
        tags: dict[str, str],
        keep: pulumi.ResourceOptions,
        child: pulumi.ResourceOptions,
    ):
        """The weights bucket (protected, retained, never force-destroyed), the fetchers that fill it from t=0, and
        the Mountpoint driver's read-only access (IRSA)."""
        bucket = aws.s3.Bucket(
            f"{name}-weights",
            bucket_prefix="kimi-k3-weights-",
            force_destroy=False,
            tags={**tags, "Name": f"{name}-weights"},
            opts=keep,
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-weights-private", bucket=bucket.id, **aws_storage.private_bucket(), opts=child
        )
        self.bucket_name = bucket.bucket
        self.filesystem_id = bucket.bucket
        if args.parked:
            self.ready += [bucket]
            return None, None, None, {}
        fetchers = weights_fetchers(name, args, bucket, tags, self)
        # Mountpoint's node plugin reads the bucket with its own service account's role (EKS add-on guide: IRSA).
        driver_role, _ = service_account_role(
            f"{name}-mountpoint-role", args.oidc, "kube-system", aws_storage.MOUNTPOINT_SERVICE_ACCOUNT, [], self, tags
        )
        driver_policy = aws.iam.RolePolicy(
            f"{name}-mountpoint-policy",
            role=driver_role.id,
            policy=bucket.arn.apply(iam.bucket_read_policy),
            opts=child,
        )
        self.ready += [bucket, *fetchers, driver_policy]
        addon_args = {
            "service_account_role_arn": driver_role.arn,
            "configuration_values": aws_storage.MOUNTPOINT_ADDON_CONFIGURATION,
        }
        return (
            bucket.bucket,
            bucket.bucket.apply(lambda b: {"bucketName": b}),
            aws_storage.mountpoint_mount_options(args.region),
            addon_args,
        )

    def _controller_identity(
        self, name: str, kind: str, args: ModelStorageArgs, tags: dict[str, str]
    ) -> dict[str, Any]:
        """The FSx/EFS controller's own identity (IRSA) with no AWS permissions: static PVs need no FSx/EFS API call
        (no dynamic provisioning); without it the controller would fall back to the node role. Dynamic provisioning
        would need AmazonFSxFullAccess / AmazonEFSCSIDriverPolicy on this role (docs/aws.md)."""
        if args.oidc is None:
            return {}
        role, _ = service_account_role(
            name, args.oidc, "kube-system", aws_storage.CSI_CONTROLLER_SA[kind], [], self, tags
        )
        return {"service_account_role_arn": role.arn}

    def _efs(
        self,
        name: str,
        args: ModelStorageArgs,
        tags: dict[str, str],
        fs_opts: pulumi.ResourceOptions,
        child: pulumi.ResourceOptions,
        throughput_mode: str,
    ):
        sg = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.vpc_id, **aws_storage.efs_security_group(args.vpc_cidr), tags=tags, opts=child
        )
        fs = aws.efs.FileSystem(
            name,
            **aws_storage.efs_filesystem(throughput_mode),
            tags={**tags, "Name": name},
            opts=fs_opts,
        )
        targets = (
            []
            if args.parked
            else [
                aws.efs.MountTarget(
                    f"{name}-mt-{i}", file_system_id=fs.id, subnet_id=sid, security_groups=[sg.id], opts=child
                )
                for i, sid in enumerate(args.mount_subnet_ids)
            ]
        )
        return fs, targets

    def _compile_cache(
        self,
        name: str,
        args: ModelStorageArgs,
        tags: dict[str, str],
        child: pulumi.ResourceOptions,
        provider: k8s.Provider,
        efs_addon: Optional[aws.eks.Addon],
    ) -> None:
        """EFS (elastic, a few GB) for the workers' JIT and compile caches: reproducible, so neither protected nor
        retained. Its PV + PVC are pre-bound like the weights'."""
        fs, targets = self._efs(f"{name}-compile-cache", args, tags, child, child, "elastic")
        addon = efs_addon or aws.eks.Addon(
            f"{name}-efs-csi-driver",
            cluster_name=args.cluster_name,
            addon_name=aws_storage.CSI["efs"][0],
            resolve_conflicts_on_create="OVERWRITE",
            tags=tags,
            **self._controller_identity(f"{name}-efs-csi-controller", "efs", args, tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.wait_for),
        )
        claim = names.NAMES["compile_cache"]
        # Writable by the workers' uid (their image's USER, runtime_user()): every request through the access point.
        uid, gid = runtime_user()
        ap = aws.efs.AccessPoint(
            f"{name}-compile-cache-ap",
            **spec.compile_cache_access_point(fs.id, uid, gid),
            tags={**tags, "Name": f"{name}-compile-cache"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=targets),
        )
        handle = pulumi.Output.all(fs.id, ap.id).apply(lambda a: spec.efs_access_point_handle(a[0], a[1]))
        pv = aws_storage.static_pv(
            claim,
            model_cache.COMPILE_CACHE_GI,
            aws_storage.CSI["efs"][1],
            handle,
            {},
            args.claim_namespace,
            claim,
            args.efs_mount_options,
        )
        volume = k8s.core.v1.PersistentVolume(
            f"{name}-compile-cache-pv",
            metadata=pv["metadata"],
            spec=pv["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        pvc = model_cache.compile_cache_pvc(args.claim_namespace)
        self.compile_cache_claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-compile-cache-pvc",
            metadata=pvc["metadata"],
            spec=pvc["spec"],
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=[volume, *([args.namespace] if args.namespace else [])]
            ),
        )
        self.compile_cache_ready = [fs, *targets, ap, addon, volume, self.compile_cache_claim]
