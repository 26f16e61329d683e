"""No import circle anywhere in kimi_k3, components and policies (issue 26), function-local and type-only imports
included, as tools/relayout/imports.py measures them. `make lint`'s acyclic_siblings contract gates circles between
siblings; this also sees a package and its own modules (graph/__init__ -> graph.model -> graph), which it does not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
while not (ROOT / "pyproject.toml").exists() and ROOT != ROOT.parent:  # the same file from a lane folder
    ROOT = ROOT.parent
_spec = importlib.util.spec_from_file_location("relayout_imports", ROOT / "tools" / "relayout" / "imports.py")
imports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(imports)


def test_no_module_imports_itself_round():
    measured = imports.analyse(ROOT)
    assert len(measured["modules"]) > 100
    assert measured["cycles_with_local"] == []


def test_a_planted_circle_is_found(tmp_path):
    """A package whose module imports it back (type-only), the form fetchers <-> storage had; two siblings that
    import each other, one of them inside a function."""
    for top in imports.ROOTS:
        (tmp_path / top).mkdir()
    (tmp_path / "kimi_k3" / "__init__.py").write_text("from kimi_k3.model import Model\n")
    (tmp_path / "kimi_k3" / "model.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kimi_k3\nclass Model: ...\n"
    )
    (tmp_path / "components" / "a.py").write_text("from components import b\n")
    (tmp_path / "components" / "b.py").write_text("def f():\n    from components import a\n")
    measured = imports.analyse(tmp_path)
    assert measured["cycles"] == [["kimi_k3", "kimi_k3.model"]]
    assert measured["cycles_with_local"] == [["components.a", "components.b"], ["kimi_k3", "kimi_k3.model"]]
