"""The offline commands (render, check, diff, plan, rehearse): thin shells over the pure core in kimi_k3/."""
