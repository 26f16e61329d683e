"""diff.py -> revisions.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Sequence


class DiffError(Exception):
    """A revision that git cannot resolve, or a stack that exists on neither side."""


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DiffError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def resolve(root: Path, ref: str) -> str:
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except DiffError:
        raise DiffError(f"unknown revision {ref!r} (in CI, fetch it: actions/checkout with fetch-depth: 0)") from None


def default_base(root: Path) -> str:
    for ref in ("origin/main", "main"):
        with contextlib.suppress(DiffError):
            resolve(root, ref)
            return ref
    raise DiffError("neither origin/main nor main exists; pass --base REF")


@contextlib.contextmanager
def worktree(root: Path, sha: str) -> Iterator[Path]:
    """The project directory inside a temporary detached worktree of `sha`, removed afterwards."""
    prefix = _git(root, "rev-parse", "--show-prefix")  # the project may sit below the repository root
    tmp = Path(tempfile.mkdtemp(prefix="kimi-k3-diff-"))
    tree = tmp / "tree"
    _git(root, "worktree", "add", "--detach", "--quiet", str(tree), sha)
    try:
        yield tree / prefix
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def cli_module(project: Path) -> str:
    """The CLI's module at that revision (commands moved from kimi_k3/cli.py to kimi_k3/commands/)."""
    return "kimi_k3" if (project / "kimi_k3" / "__main__.py").is_file() else "kimi_k3.cli"


def render_dirs(project: Path, stacks: Sequence[str], out: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Render `stacks` with the code at `project`: ({stack: render dir}, {stack: why it did not render})."""
    # Worktree first on sys.path: its kimi_k3/components/policies win over this venv's editable install.
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    done: dict[str, Path] = {}
    errors: dict[str, str] = {}
    pending = [s for s in stacks if (project / f"Pulumi.{s}.yaml").is_file()]
    while pending:  # one process for all stacks (imports dominate); `render` stops at the first failure
        target = out / pending[0] if len(pending) == 1 else out  # `render --out` is the dir itself for one stack
        proc = subprocess.run(
            [sys.executable, "-m", cli_module(project), "render", *pending, "--out", str(target)],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        rendered = [s for s in pending if (out / s / "manifests.yaml").is_file()]
        done.update((s, out / s) for s in rendered)
        rest = [s for s in pending if s not in rendered]
        if rest and proc.returncode == 0:
            raise DiffError(f"render at {project} exited 0 without writing {', '.join(rest)}")
        if rest:
            lines = (proc.stderr or proc.stdout).strip().splitlines() or [f"exit status {proc.returncode}"]
            errors[rest[0]] = lines[-1]
        pending = rest[1:]
    return done, errors


def environment_fingerprint() -> str:
    """Python and every installed distribution's version: a render depends on them as much as on the code."""
    from importlib import metadata

    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    return sys.version + "\n" + "\n".join(dists)


def cache_dir(root: Path, sha: str) -> Path:
    """Where renders of commit `sha` are kept: keyed by the project's tree (code + stacks + recipes) and the
    environment, so a diff against the same base re-renders nothing."""
    prefix = _git(root, "rev-parse", "--show-prefix")
    tree = _git(root, "rev-parse", f"{sha}:{prefix}")
    key = hashlib.sha256(f"{tree}\n{environment_fingerprint()}".encode()).hexdigest()[:20]
    return root / "build" / "render-cache" / key


def stacks_at(root: Path, sha: str) -> set[str]:
    """Stack names at commit `sha`, read from git (no checkout needed)."""
    prefix = _git(root, "rev-parse", "--show-prefix")
    names = _git(root, "ls-tree", "--name-only", f"{sha}:{prefix}").splitlines()
    return {
        n[len("Pulumi.") : -len(".yaml")]
        for n in names
        if n.startswith("Pulumi.") and n.endswith(".yaml") and n != "Pulumi.yaml"
    }


def render_commit(root: Path, sha: str, stacks: Sequence[str], out: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """render_dirs for a commit, through the render cache (a checkout is made only for what is not cached)."""
    cache = cache_dir(root, sha)
    done = {s: cache / s for s in stacks if (cache / s / "resources.json").is_file()}
    todo = [s for s in stacks if s not in done]
    errors: dict[str, str] = {}
    if todo:
        with worktree(root, sha) as project:
            rendered, errors = render_dirs(project, todo, out)
        for stack, directory in rendered.items():
            staging = Path(tempfile.mkdtemp(prefix=f".{stack}-", dir=_mkdir(cache)))
            shutil.copytree(directory, staging, dirs_exist_ok=True)
            with contextlib.suppress(OSError):  # another diff stored it first: theirs is the same bytes
                staging.rename(cache / stack)
            shutil.rmtree(staging, ignore_errors=True)
            done[stack] = cache / stack if (cache / stack).is_dir() else directory
    return done, errors


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
