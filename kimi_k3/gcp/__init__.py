"""The Google Cloud side of `kimi-k3:cluster.mode: gke`, as pure data (a sibling of kimi_k3/aws/)."""
