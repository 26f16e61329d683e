"""kimi_k3/facts: see docs/architecture.md."""
