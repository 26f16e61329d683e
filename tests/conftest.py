"""Shared fixtures: rendered stacks (once per session) and the upstream reference data in ../shared."""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

import pytest
from support import render_once, render_stack_once

from kimi_k3.config.stack import SECRET_KEYS
from kimi_k3.config.stack_files import read_stack_config

ROOT = Path(__file__).resolve().parent.parent
# A test may reuse another lane's helpers (`from test_rules import ...`): every lane folder is importable, whatever
# order pytest (or an xdist worker) collects them in.
for _lane in sorted(p for p in Path(__file__).resolve().parent.iterdir() if p.is_dir() and p.name != "__pycache__"):
    if str(_lane) not in sys.path:
        sys.path.append(str(_lane))
SHARED = ROOT.parent / "shared" / "reference"
STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")
# NVIDIA's v1.5.0-kimi-k3-dev.1 profiles (issue 22): separate from STACKS so seed-only assertions stay as they are.
V15_STACKS = ("gb200-v1.5", "gb300-v1.5", "gb300-disagg-v1.5")
UPSTREAM = {  # our stack -> upstream profile directory
    "gb200": "agg-gb200-agentic",
    "gb200-disagg": "disagg-gb200-agentic",
    "gb300": "agg-gb300-agentic",
    "gb300-disagg": "disagg-gb300-agentic",
}


class ReferencePath(type(Path())):
    """A path into ../shared that skips the test, naming the missing path, when a file the test reads is not there
    (an incomplete copy of shared/ is a reason to skip, not a failure)."""

    def need(self) -> "ReferencePath":
        """Skip unless this path exists (for a path handed to code that opens it itself)."""
        if not self.exists():
            pytest.skip(
                f"upstream reference data incomplete: {self} is missing (shared/reference beside the "
                "project's checkout)"
            )
        return self

    def read_text(self, *args, **kwargs):
        self.need()
        return super().read_text(*args, **kwargs)

    def read_bytes(self):
        self.need()
        return super().read_bytes()

    def open(self, *args, **kwargs):
        self.need()
        return super().open(*args, **kwargs)

    def iterdir(self):
        self.need()
        return super().iterdir()

    def glob(self, pattern, *args, **kwargs):
        self.need()
        return super().glob(pattern, *args, **kwargs)

    def rglob(self, pattern, *args, **kwargs):
        self.need()
        return super().rglob(pattern, *args, **kwargs)


@pytest.fixture(scope="session")
def shared_reference() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"upstream reference data not found at {SHARED} (only present beside the project's own checkout)")
    return ReferencePath(SHARED)


@pytest.fixture(autouse=True)
def _patched_code_renders_alone(request):
    """A test that monkeypatches may change what the program renders: its renders are neither shared nor kept."""
    import support

    support.bypass["on"] = "monkeypatch" in request.fixturenames
    yield
    support.bypass["on"] = False


def pytest_collection_finish(session):
    """What collection imported (the SDKs, the program, every test module) lives for the whole session: frozen, the
    cyclic collector stops walking it on every full pass (~27% of a render's CPU in a test process)."""
    gc.collect()
    gc.freeze()


def pytest_configure(config):
    """Lanes that start no rehearsal see no rehearsal environment, as on CI, where `make test` runs before
    .venv-rehearse exists: a command that looked for it before naming a bad argument passed here and failed there."""
    if "rehearse" not in (config.option.markexpr or "").replace("not rehearse", ""):
        os.environ.setdefault("KIMI_K3_REHEARSE_PYTHON", "/nonexistent/no-rehearsal-venv-in-this-lane/python")


@pytest.fixture(scope="session")
def rendered():
    return {stack: render_stack_once(stack, ROOT) for stack in STACKS}  # shared with render_with(stack)


@pytest.fixture(scope="session")
def rendered_v15():
    """The v1.5.0-kimi-k3-dev.1 stacks, rendered once per session."""
    return {stack: render_stack_once(stack, ROOT) for stack in V15_STACKS}


def stack_config(stack: str, **overrides) -> tuple[dict[str, str], set[str]]:
    """A stack's config with `kimi-k3:<key>` values replaced (dicts are JSON-encoded, as the engine passes them).

    Secret keys given here are marked secret, as `pulumi config set --secret` would."""
    stack_file = read_stack_config(stack, ROOT)
    config, secrets = stack_file.config, stack_file.secrets
    for key, value in overrides.items():
        full = f"kimi-k3:{key}"
        if value is None:
            config.pop(full, None)
            secrets.discard(full)
        else:
            config[full] = value if isinstance(value, str) else json.dumps(value)
            if key in SECRET_KEYS:
                secrets.add(full)
    return config, secrets


def render_with(stack: str, **overrides):
    """The stack rendered with these overrides: once per session per distinct variant (tests/support.py)."""
    config, secrets = stack_config(stack, **overrides)
    return render_once(stack, config, secrets, ROOT)


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def model_cache_pvcs(objects):
    """The claims holding weights (a stack may also have its compile-cache claim)."""
    return [o for o in by_kind(objects, "PersistentVolumeClaim") if o["metadata"]["name"] != "kimi-k3-compile-cache"]


def workers(dgd):
    return [c for c in dgd["spec"]["components"] if c["type"] != "frontend"]


def main_container(component):
    return next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")


def env_of(container) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def flag(args: list[str], name: str):
    """Value after `name` in an argv list; True for a bare flag; None when absent."""
    if name not in args:
        return None
    i = args.index(name)
    return args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else True


def assert_one_clear_error(stack: str, overrides: dict, expected: list[str]) -> None:
    """Bad input: one short message holding every expected part, and nothing registered."""
    from kimi_k3.offline.synth import RenderError

    with pytest.raises(RenderError) as info:
        render_with(stack, **overrides)
    message = str(info.value)
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"
    assert len(message.splitlines()) <= 2, message
    assert info.value.registered == [], "a configuration error must register nothing"


def project_copy(dest: Path) -> Path:
    """The project as a fresh clone would have it (the repository's files, no build output), at `dest`.

    `.venv` is this checkout's (linked, and older than pyproject.toml's copy, so make does not rebuild it)."""
    import os
    import shutil
    import subprocess

    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    for name in ("pyproject.toml", "constraints.txt"):
        os.utime(dest / name, (0, 0))
    return dest


# A stand-in for the commit a team pins by pull request in the shared stack files (`pulumi up` refuses none).
PINNED_REVISION = "0123456789abcdef0123456789abcdef01234567"


def pin_model_revision(clone: Path) -> Path:
    """The clone's shared stack files with kimi-k3:model.revision set, as a team's merged pull request leaves them."""
    for stack_file in clone.glob("Pulumi.*.yaml"):
        text = stack_file.read_text()
        assert "kimi-k3:model:" not in text, f"{stack_file.name} pins the model already: update this helper"
        stack_file.write_text(text.rstrip("\n") + f"\n  kimi-k3:model:\n    revision: {PINNED_REVISION}\n")
    return clone


def fake_pulumi_bin(tmp_path: Path) -> Path:
    """A directory holding `pulumi`: tests/fake_pulumi.py run by this interpreter."""
    import sys

    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "pulumi"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "tests" / "fake_pulumi.py"}" "$@"\n')
    script.chmod(0o755)
    return bin_dir
