"""The import contract (pyproject.toml [tool.importlinter], run by `make lint`) fails on a planted violation, and
kimi_k3/pods/ imports only the standard library (checked here against sys.stdlib_module_names as well)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
while not (ROOT / "pyproject.toml").exists() and ROOT != ROOT.parent:  # the same file from a lane folder
    ROOT = ROOT.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    """The packages the contract covers and its configuration, in a fresh directory."""
    for name in ("kimi_k3", "components", "policies"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess:
    if not LINT_IMPORTS.exists():
        pytest.fail(f"{LINT_IMPORTS} missing: make venv installs import-linter (pyproject.toml dev extra)")
    # -I-like isolation: only the copy is on the path (the editable install would point back at the checkout)
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # lint-imports in a subprocess, twice (~10 s)
def test_an_upward_import_breaks_the_layer_contract(tmp_path):
    tree = _copy(tmp_path)
    (tree / "kimi_k3" / "errors.py").write_text(
        (tree / "kimi_k3" / "errors.py").read_text() + "\nimport kimi_k3.commands.main  # planted\n"
    )
    out = _lint(tree)
    assert out.returncode != 0
    assert "kimi_k3.errors is not allowed to import kimi_k3.commands" in out.stdout, out.stdout[-2000:]
    clean = _lint(_copy(tmp_path / "clean"))
    assert "kimi_k3.errors is not allowed to import" not in clean.stdout


PODS = "pods: programs shipped into pods import only the standard library"
LAYERS = "layers: each folder imports only the layers below it"


@pytest.mark.slow  # lint-imports in a subprocess per case (~5 s each)
@pytest.mark.parametrize(
    "planted, named, contract",
    [
        ("import yaml", "yaml", PODS),
        ("import pulumi", "pulumi", PODS),
        ("from kimi_k3 import flags", "kimi_k3.flags", LAYERS),
    ],
)
def test_a_pod_program_importing_beyond_the_standard_library_breaks_the_contract(tmp_path, planted, named, contract):
    tree = _copy(tmp_path)
    (tree / "kimi_k3" / "pods" / "planted.py").write_text(f"{planted}\n")
    out = _lint(tree)
    assert out.returncode != 0
    assert f"{contract} BROKEN" in out.stdout, out.stdout[-2000:]
    assert f"kimi_k3.pods is not allowed to import {named}" in out.stdout, out.stdout[-2000:]
    assert f"kimi_k3.pods.planted -> {named} (l.1)" in out.stdout, out.stdout[-2000:]


# What the image a program runs in provides beside the standard library (the image is pinned in recipes/):
PROVIDED = {
    "fabric_preflight.py": {"torch"},  # runs in the serving runtime image (vLLM's torch), kimi_k3/k8s/preflight_job.py
    "fetch_checkpoint.py": {"huggingface_hub"},  # the download image + pinned hubVersion (model.hubVersion)
    "verify_checkpoint.py": {"huggingface_hub"},
}


def non_stdlib_imports(folder: Path) -> list[str]:
    """`file: module` for every import in `folder` that is neither the standard library, folder's own package nor
    what the program's image provides (PROVIDED)."""
    bad = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if (
                    top not in sys.stdlib_module_names
                    and not name.startswith("kimi_k3.pods")
                    and top not in PROVIDED.get(path.name, ())
                ):
                    bad.append(f"{path.relative_to(folder)}: {name}")
    return bad


def test_pod_programs_import_only_the_standard_library():
    assert (ROOT / "kimi_k3" / "pods" / "__init__.py").exists()
    assert non_stdlib_imports(ROOT / "kimi_k3" / "pods") == []


def test_the_stdlib_check_sees_a_planted_third_party_import(tmp_path):
    shutil.copytree(ROOT / "kimi_k3" / "pods", tmp_path / "pods")
    (tmp_path / "pods" / "planted.py").write_text("import json\n\ndef f():\n    import requests\n")
    (tmp_path / "pods" / "smoke.py").write_text("import torch\n")  # torch only where the image provides it
    assert non_stdlib_imports(tmp_path / "pods") == ["planted.py: requests", "smoke.py: torch"]


ARGPARSE = "argparse: only commands parse a command line; the core takes typed options"


@pytest.mark.slow  # lint-imports in a subprocess, ~5 s
def test_argparse_outside_the_commands_breaks_the_contract(tmp_path):
    """The rehearsal took an argparse.Namespace and a policy built its own parser; commands build typed options."""
    tree = _copy(tmp_path)
    planted = ["kimi_k3/rehearsal", "policies/rules", "kimi_k3/config", "kimi_k3/commands"]
    for where in planted:
        (tree / where / "planted.py").write_text("import argparse\n")
    out = _lint(tree)
    assert out.returncode != 0
    assert f"{ARGPARSE} BROKEN" in out.stdout, out.stdout[-2000:]
    for where in planted[:-1]:
        assert f"{where.replace('/', '.')}.planted -> argparse (l.1)" in out.stdout, out.stdout[-2000:]
    assert "kimi_k3.commands.planted" not in out.stdout  # a command is where a command line is parsed


CIRCLES = "no import circles: sibling modules and folders import one way only"


@pytest.mark.slow  # lint-imports in a subprocess, ~5 s
def test_a_type_only_import_back_breaks_the_circle_contract(tmp_path):
    """The circle this contract was added for: the fetchers took ModelStorage's args type from the module that
    imports them (under TYPE_CHECKING, which the layer contract between folders never compared)."""
    tree = _copy(tmp_path)
    fetchers = tree / "components" / "aws" / "fetchers.py"
    planted = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from components.aws.storage import ModelStorage\n"
    )
    fetchers.write_text(fetchers.read_text() + planted)
    out = _lint(tree)
    assert out.returncode != 0
    assert f"{CIRCLES} BROKEN" in out.stdout, out.stdout[-2000:]
    assert "No cycles are allowed in components.aws." in out.stdout, out.stdout[-2000:]
