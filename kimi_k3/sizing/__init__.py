"""kimi_k3/sizing: see docs/architecture.md."""
