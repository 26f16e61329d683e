"""kimi_k3/config: see docs/architecture.md."""
