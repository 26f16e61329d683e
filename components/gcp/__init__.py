"""Google Cloud components of `kimi-k3:cluster.mode: gke`: the GKE cluster, its pools and the weights' storage."""
