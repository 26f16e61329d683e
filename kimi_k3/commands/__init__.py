"""The offline commands (render, check, diff, plan): thin shells over the pure core in kimi_k3/."""
