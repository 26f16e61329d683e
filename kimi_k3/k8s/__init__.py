"""kimi_k3/k8s: see docs/architecture.md."""
