"""kimi_k3/graph: see docs/architecture.md."""
