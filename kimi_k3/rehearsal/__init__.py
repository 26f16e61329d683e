"""kimi_k3/rehearsal: see docs/architecture.md."""
