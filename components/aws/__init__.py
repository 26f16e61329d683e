"""AWS components of `kimi-k3:cluster.mode: eks`: the GPU cluster and the model storage."""

from components.aws.cluster import GpuCluster, GpuClusterArgs
from components.aws.storage import ModelStorage, ModelStorageArgs

__all__ = ["GpuCluster", "GpuClusterArgs", "ModelStorage", "ModelStorageArgs"]
