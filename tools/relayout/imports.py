"""The code's own import graph: cycles, upward (layer-breaking) imports and files over 400 lines.

Reads every .py under kimi_k3/, components/, policies/ and __main__.py with `ast` (nothing is imported), resolves
module-level AND function-local imports to project modules (type-only ones under TYPE_CHECKING count as
module-level: a circle in the types is still a circle), and prints:
  cycles      strongly connected components of the module-level graph (function-local imports listed apart:
              they are how a circle is hidden, so they count as edges for the layer check)
  upward      an import from a lower layer into a higher one (layers as in pyproject's import-linter contract)
  long files  files over 400 lines
Exit status 1 when there is a cycle or an upward import (`--strict`), so it can be part of a proof.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOTS = ("kimi_k3", "components", "policies")
# Top to bottom; a layer may import only layers below it (siblings in one tuple are independent of each other).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__main__", "kimi_k3.__main__"),
    ("kimi_k3.commands",),
    ("policies",),
    ("components",),
    ("kimi_k3.offline", "kimi_k3.rehearsal"),
    ("kimi_k3.blueprint",),
    ("kimi_k3.k8s",),
    ("kimi_k3.graph",),
    ("kimi_k3.aws",),
    ("kimi_k3.sizing", "kimi_k3.config"),
    ("kimi_k3.facts",),
    ("kimi_k3.errors", "kimi_k3.data", "kimi_k3.flags", "kimi_k3.names"),
    ("kimi_k3.pods",),
)
# Layers whose members may import each other (the foundation files import only each other).
TOGETHER = {("kimi_k3.errors", "kimi_k3.data", "kimi_k3.flags", "kimi_k3.names")}
LONG = 400


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__main__"


def project_files(root: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for top in ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            files[module_name(root, path)] = path
    if (root / "__main__.py").exists():
        files["__main__"] = root / "__main__.py"
    return files


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest project module that `name` (a dotted import target) names or lies in."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in modules:
            return cand
        parts.pop()
    return None


def imports_of(mod: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(target module, line, is_function_local) for each project import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    target = _resolve(alias.name, modules)
                    if target:
                        out.append((target, child.lineno, local))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    pkg = package.split(".")
                    pkg = pkg[: len(pkg) - (child.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                for alias in child.names:
                    target = _resolve(f"{base}.{alias.name}", modules) or _resolve(base, modules)
                    if target:
                        out.append((target, child.lineno, local))
            visit(child, inner)

    visit(tree, False)
    return [(t, line, loc) for t, line, loc in out if t != mod]


FOUNDATION_FILES: set[str] = set()  # kimi_k3/<name>.py files at the package root outside LAYERS (filled by analyse)


def layer_of(mod: str) -> int | None:
    if mod in FOUNDATION_FILES:
        return next(i for i, g in enumerate(LAYERS) if g in TOGETHER)
    for i, group in enumerate(LAYERS):
        for prefix in group:
            if mod == prefix or mod.startswith(prefix + "."):
                return i
    return None


def sibling_group(mod: str) -> str | None:
    if mod in FOUNDATION_FILES:
        return "kimi_k3.errors"
    for group in LAYERS:
        for prefix in group:
            if mod == prefix or mod.startswith(prefix + "."):
                return prefix
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def analyse(root: Path) -> dict:
    modules = project_files(root)
    FOUNDATION_FILES.clear()
    FOUNDATION_FILES.update(
        m
        for m, p in modules.items()
        if m.count(".") == 1
        and m.startswith("kimi_k3.")
        and p.name != "__init__.py"
        and layer_of(m) is None
        and m != "kimi_k3.__main__"
    )
    edges: dict[str, set[str]] = {m: set() for m in modules}
    all_edges: dict[str, set[str]] = {m: set() for m in modules}
    local: list[tuple[str, str, int]] = []
    for mod, path in modules.items():
        for target, line, is_local in imports_of(mod, path, modules):
            # a package's __init__ imported on the way to a submodule is not a dependency on the package itself
            all_edges[mod].add(target)
            if is_local:
                local.append((mod, target, line))
            else:
                edges[mod].add(target)
    upward = []
    for mod, targets in all_edges.items():
        lm = layer_of(mod)
        for t in sorted(targets):
            lt = layer_of(t)
            if lm is None or lt is None:
                continue
            if lt < lm or (lt == lm and sibling_group(mod) != sibling_group(t) and LAYERS[lm] not in TOGETHER):
                upward.append((mod, t))
    long_files = sorted(
        ((str(p.relative_to(root)), len(p.read_text().splitlines())) for p in modules.values()),
        key=lambda x: -x[1],
    )
    return {
        "modules": modules,
        "cycles": cycles(edges),
        "cycles_with_local": cycles(all_edges),
        "local": local,
        "upward": upward,
        "long": [(p, n) for p, n in long_files if n > LONG],
        "unlayered": sorted(m for m in modules if layer_of(m) is None),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=".", type=Path)
    ap.add_argument("--strict", action="store_true", help="exit 1 on a cycle or an upward import")
    args = ap.parse_args(argv)
    r = analyse(args.root.resolve())
    print(f"{len(r['modules'])} modules")
    print(f"cycles (module-level imports): {len(r['cycles'])}")
    for c in r["cycles"]:
        print("  " + " <-> ".join(c))
    print(f"cycles counting function-local imports: {len(r['cycles_with_local'])}")
    for c in r["cycles_with_local"]:
        print("  " + " <-> ".join(c))
        for a in c:
            for t, line, loc in imports_of(a, r["modules"][a], r["modules"]):
                if t in c:
                    print(f"      {a}:{line} -> {t}" + (" (function-local)" if loc else ""))
    print(f"function-local project imports: {len(r['local'])}")
    print(f"upward imports (lower layer -> higher): {len(r['upward'])}")
    for a, b in r["upward"]:
        print(f"  {a} -> {b}")
    if r["unlayered"]:
        print(f"modules outside the layers: {len(r['unlayered'])}: {', '.join(r['unlayered'])}")
    print(f"files over {LONG} lines: {len(r['long'])}")
    for p, n in r["long"]:
        print(f"  {n:5d} {p}")
    bad = r["cycles_with_local"] or r["upward"]
    return 1 if (args.strict and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
