"""What ModelStorage is given: its own module, so the fetchers (a part of it) read the same type without importing it."""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi

from components.aws.iam import Oidc
from kimi_k3.config.storage import StorageConfig


class ModelStorageArgs:
    def __init__(
        self,
        storage: StorageConfig,
        cluster_name: pulumi.Input[str],
        vpc_id: pulumi.Input[str],
        vpc_cidr: str,
        subnet_id: pulumi.Input[str],
        mount_subnet_ids: list[pulumi.Input[str]],
        claim_namespace: str,
        claim_name: str,
        cache_path_in_fs: str,
        size_gi: int,
        wait_for: Optional[list[pulumi.Resource]] = None,
        tags: Optional[dict[str, str]] = None,
        *,
        region: str = "us-east-1",
        efs_mount_options: Sequence[str] = ("tls",),
        hf_token: Optional[pulumi.Input[str]] = None,
        model_repo: str = "",
        model_revision: str = "main",
        hub_version: str = "",
        fetcher_subnet_id: Optional[pulumi.Input[str]] = None,
        egress_ready: Sequence[pulumi.Resource] = (),
        oidc: Optional[Oidc] = None,
        compile_cache: bool = False,
        namespace: Optional[pulumi.Resource] = None,
        parked: bool = False,
        fetch_deadline_seconds: int = 28800,
        drafter: Optional[tuple[str, str, str]] = None,
    ):
        """
        :param storage: `kimi-k3:storage` (kind s3, fsx-lustre or efs, sizes, fetchers, compile cache).
        :param cluster_name: the EKS cluster, for the CSI driver add-ons.
        :param vpc_id: VPC of the security groups.
        :param vpc_cidr: clients allowed to mount (the node subnets are inside it).
        :param subnet_id: the filesystem's subnet (kimi_k3.aws.storage.storage_zone: the GPU zone unless it is a Local Zone).
        :param mount_subnet_ids: EFS mount targets (one per control-plane zone).
        :param claim_namespace: namespace of the PVCs the PVs are pre-bound to.
        :param claim_name: name of the model-cache PVC.
        :param cache_path_in_fs: where the checkpoint lives inside the filesystem or bucket (/<repo>).
        :param size_gi: capacity the model-cache PV advertises (>= the PVC's request).
        :param wait_for: what the CSI driver add-ons need (nodes to run on: the system node group).
        :param tags: tags on every AWS resource.
        :param region: the stack's Region (Mountpoint's bucket Region, the fetchers' CLI).
        :param efs_mount_options: EFS mount helper options (kimi_k3.aws.storage.efs_mount_options).
        :param hf_token: Hugging Face token (a Pulumi secret) the fetchers read from Secrets Manager (kind s3).
        :param model_repo: / model_revision / hub_version: what the fetchers download, with which huggingface_hub.
        :param fetcher_subnet_id: private subnet with NAT egress and the S3 gateway endpoint, for the fetchers.
        :param egress_ready: what the fetchers' egress needs (NAT gateway, route table associations).
        :param oidc: the cluster's IAM OIDC provider: each CSI driver gets its own IRSA role, not the node role
            (the Mountpoint driver's may read the bucket; the FSx/EFS controllers' have no permissions).
        :param compile_cache: create the shared compile-cache volume (EFS) and its PV + PVC.
        :param namespace: the serving namespace, which the compile-cache PVC lives in.
        :param fetch_deadline_seconds: every fetcher step ends by then from boot (the stack's download timeout).
        :param drafter: (repo, revision, bucket prefix) of the speculative drafter the fetchers fetch too (kind s3).
        :param parked: only what holds the weights (the bucket; a filesystem with its S3 association and security
            group): no cluster to mount it in, no fetchers.
        """
        self.parked = parked
        self.fetch_deadline_seconds = fetch_deadline_seconds
        self.drafter = drafter
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
        self.region = region
        self.efs_mount_options = list(efs_mount_options)
        self.hf_token = hf_token
        self.model_repo = model_repo
        self.model_revision = model_revision
        self.hub_version = hub_version
        self.fetcher_subnet_id = fetcher_subnet_id
        self.egress_ready = list(egress_ready)
        self.oidc = oidc
        self.compile_cache = compile_cache
        self.namespace = namespace
