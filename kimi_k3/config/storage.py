"""stack.py -> storage.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from kimi_k3.config.base import DNS_LABEL, InstanceType, Strict, allowed_as
from kimi_k3.data import recipe_file

# Provisioners whose volumes attach to one node at a time: a 1.5 TB cache shared by every worker needs RWX.
RWO_ONLY_PROVISIONERS = {
    "ebs.csi.aws.com",
    "kubernetes.io/aws-ebs",
    "pd.csi.storage.gke.io",
    "kubernetes.io/gce-pd",
    "disk.csi.azure.com",
    "kubernetes.io/azure-disk",
    "rancher.io/local-path",
    "kubernetes.io/no-provisioner",
}


# Default class names of managed clusters that are block storage (EKS gp2/gp3, GKE standard-rwo, AKS managed-csi).
RWO_ONLY_CLASS_NAMES = {"gp2", "gp3", "standard-rwo", "premium-rwo", "managed-csi", "managed-premium", "local-path"}


class FsxConfig(Strict):
    """`kimi-k3:storage.fsx`: the FSx for Lustre PERSISTENT_2 filesystem of the model cache."""

    storage_capacity_gib: int = Field(
        default_factory=lambda: recipe_file("facts/storage.yaml")["fsx_lustre"]["size_gib"],
        alias="storageCapacityGiB",
        ge=1,
        description="1200 or a multiple of 2400 GiB (recipes/facts/aws.yaml); aggregate "
        "throughput = TiB x perUnitStorageThroughput, the cold-start lever (docs/aws.md)",
    )
    per_unit_storage_throughput: int = Field(
        default_factory=lambda: recipe_file("facts/storage.yaml")["fsx_lustre"]["per_unit_mbps_per_tib"],
        alias="perUnitStorageThroughput",
        description="MB/s per TiB: 125, 250, 500 or 1000 (recipes/facts/aws.yaml)",
    )
    efa_enabled: bool = Field(
        False, alias="efaEnabled", description="refused: the GPU nodes mount over TCP (no EFA Lustre client is set up)"
    )
    file_system_type_version: str = Field("2.15", alias="fileSystemTypeVersion")
    s3_import_path: Optional[str] = Field(
        None,
        alias="s3ImportPath",
        pattern=allowed_as(r"^s3://[a-z0-9.-]{3,63}(/.*)?$", "s3://bucket/prefix, e.g. s3://my-weights/kimi-k3"),
        description="s3://bucket/prefix holding pre-staged weights (data repository association)",
    )

    @field_validator("efa_enabled")
    @classmethod
    def _no_efa_clients(cls, v: bool) -> bool:
        if v:
            raise ValueError(
                "an EFA-enabled file system serves EFA only to clients that run the EFA-enabled Lustre "
                "client with LNet over EFA (FSx 'Working with EFA-enabled file systems'); kimi-k3 does "
                "not set that up on the GPU nodes, so they would mount over TCP and gain nothing; "
                "allowed: false"
            )
        return v

    @field_validator("storage_capacity_gib")
    @classmethod
    def _size(cls, v: int) -> int:
        p2 = recipe_file("facts/aws.yaml")["fsx_persistent_2"]
        small, step = p2["small_size_gib"], p2["size_step_gib"]
        if v != small and (v < step or v % step):
            raise ValueError(
                f"{v} GiB is not a PERSISTENT_2 size; allowed: {small} or a multiple of {step} "
                f"({step}, {2 * step}, ...)"
            )
        return v

    @field_validator("per_unit_storage_throughput")
    @classmethod
    def _per_unit(cls, v: int) -> int:
        allowed = recipe_file("facts/aws.yaml")["fsx_persistent_2"]["per_unit_throughputs"]
        if v not in allowed:
            raise ValueError(f"{v} MB/s/TiB is not a PERSISTENT_2 throughput; allowed: {', '.join(map(str, allowed))}")
        return v


class S3Config(Strict):
    """`kimi-k3:storage.s3`: the weights in an S3 bucket of the stack, fetched from the Hub at t=0 by EC2 fetchers
    (independent of the cluster), read by the workers through Mountpoint for Amazon S3 (docs/aws.md)."""

    fetchers: int = Field(
        4,
        ge=1,
        le=32,
        description="EC2 instances that download disjoint shares of the checkpoint "
        "from the Hub into the bucket, in parallel",
    )
    fetcher_instance_type: InstanceType = Field(
        "m6in.8xlarge",
        alias="fetcherInstanceType",
        description="x86_64 type of each fetcher, >= 128 GiB memory (staging is "
        "a 110 GiB tmpfs); m6in.8xlarge: 32 vCPU, 128 GiB, 50 Gbps network",
    )


class EfsConfig(Strict):
    """`kimi-k3:storage.efs`: an EFS filesystem (smaller setup, ~1.5 GB/s per client: slow for 1.5 TB)."""

    throughput_mode: Literal["elastic", "bursting"] = Field("elastic", alias="throughputMode")


class StorageConfig(Strict):
    """`kimi-k3:storage`: the ReadWriteMany volume that caches the checkpoint."""

    kind: Optional[Literal["s3", "fsx-lustre", "efs", "gcs", "existing"]] = Field(
        None,
        description="s3 (default in eks mode: bucket + Mountpoint), fsx-lustre, efs, gcs (gke mode: bucket + "
        "GCS FUSE), or existing (a "
        "storageClass); default: existing when storageClass is set",
    )
    storage_class: Optional[str] = Field(
        None,
        alias="storageClass",
        pattern=allowed_as(
            DNS_LABEL.replace("{0,61}", "{0,252}"),
            "a StorageClass name: lower-case letters, digits and '-', e.g. fsx-sc",
        ),
        description="StorageClass of the model-cache PVC (kind existing); must support ReadWriteMany",
    )
    provisioner: Optional[str] = Field(None, description="the class's provisioner, when known, to reject block storage")
    size_gi: Optional[int] = Field(
        None, alias="sizeGi", ge=1, description="PVC size; default: checkpoint size plus headroom"
    )
    headroom_percent: int = Field(
        25,
        alias="headroomPercent",
        ge=0,
        le=400,
        description="space over the checkpoint size for partial downloads and metadata",
    )
    fsx: FsxConfig = Field(default_factory=FsxConfig)
    efs: EfsConfig = Field(default_factory=EfsConfig)
    s3: S3Config = Field(default_factory=S3Config)
    compile_cache: Optional[Literal["efs", "filestore", "none"]] = Field(
        None,
        alias="compileCache",
        description="shared volume for DeepGEMM/FlashInfer/torch.compile/Triton caches, "
        "keyed by image and flags: efs (default in eks mode) or none (pod-local, every start compiles)",
    )
    node_local_weights: Optional[bool] = Field(
        None,
        alias="nodeLocalWeights",
        description="copy the verified checkpoint onto every GPU node's instance-store "
        "NVMe before the workers start (the weights-prefetch DaemonSet; each byte crosses the Local Zone link once) "
        "and load it from there: default true in eks mode (its GPU nodes have the RAID0) and in gke mode with "
        "storage kind gcs (A4X / A4X Max Local SSD), false elsewhere",
    )

    @model_validator(mode="after")
    def _rwx_capable(self) -> "StorageConfig":
        if self.provisioner in RWO_ONLY_PROVISIONERS or self.storage_class in RWO_ONLY_CLASS_NAMES:
            what = f"provisioner {self.provisioner}" if self.provisioner in RWO_ONLY_PROVISIONERS else "that class"
            raise ValueError(
                f"storage class {self.storage_class!r} is not ReadWriteMany-capable ({what} is block storage); "
                "use a shared filesystem class (FSx for Lustre, EFS, Filestore, Azure Files, NFS)"
            )
        return self

    def resolved_compile_cache(self, mode: str) -> str:
        """efs (a shared volume of the stack) in eks mode unless turned off; none elsewhere."""
        if self.compile_cache:
            return self.compile_cache
        if self.resolved_kind == "existing":
            return "none"
        return {"eks": "efs", "gke": "filestore"}.get(mode, "none")

    def resolved_node_local_weights(self, mode: str) -> bool:
        """Only eks and gke mode know where the GPU nodes' local disks are mounted (they build the node pools); gke
        copies from the stack's bucket (kind gcs)."""
        known = mode == "eks" or (mode == "gke" and self.resolved_kind == "gcs")
        return known and (self.node_local_weights is not False)

    @property
    def resolved_kind(self) -> str:
        return self.kind or ("existing" if self.storage_class else "s3")
