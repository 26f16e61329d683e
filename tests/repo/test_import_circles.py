"""No import circle anywhere in kimi_k3, components and policies (issue 26), type-only imports included: `make lint`'s
acyclic_siblings contract sees circles between siblings at every depth; this also sees a package and its own modules
(graph/__init__ -> graph.model -> graph), which that contract does not compare."""

from __future__ import annotations

import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
while not (ROOT / "pyproject.toml").exists() and ROOT != ROOT.parent:  # the same file from a lane folder
    ROOT = ROOT.parent


def circles(*packages: str) -> list[list[str]]:
    """Every set of modules that import each other round (strongly connected, more than one module), sorted."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm; the graphs here are a few hundred modules deep at most
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while component[-1:] != [module]:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_module_imports_itself_round():
    assert circles("kimi_k3", "components", "policies") == []


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A package whose __init__ imports its module, which imports the package back (type-only), and two siblings
    that import each other."""
    pkg = tmp_path / "planted_circles"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from planted_circles.model import Model\n")
    (pkg / "model.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import planted_circles\nclass Model: ...\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from planted_circles.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from planted_circles.sub import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "planted_circles"
    for name in [m for m in sys.modules if m.startswith("planted_circles")]:
        del sys.modules[name]


def test_a_planted_circle_is_found(planted):
    assert circles(planted) == [
        ["planted_circles", "planted_circles.model"],
        ["planted_circles.sub.a", "planted_circles.sub.b"],
    ]
