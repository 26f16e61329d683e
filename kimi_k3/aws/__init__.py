"""kimi_k3/aws: see docs/architecture.md."""
