"""kimi_k3/offline: see docs/architecture.md."""
