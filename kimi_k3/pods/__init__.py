"""Programs that run inside pods or on instances (standard library only: an import contract in pyproject.toml).

Each is shipped as its source text (a ConfigMap, user data); program_path names the file that is shipped."""

from pathlib import Path


def program_path(name: str) -> Path:
    """The file of the in-pod program `name` (e.g. "smoke.py"), whose text the Kubernetes objects ship."""
    return Path(__file__).with_name(name)
