"""AWS components of `kimi-k3:cluster.mode: eks`: the GPU cluster and the model storage."""
from .cluster import GpuCluster, GpuClusterArgs
from .storage import ModelStorage, ModelStorageArgs

__all__ = ["GpuCluster", "GpuClusterArgs", "ModelStorage", "ModelStorageArgs"]
