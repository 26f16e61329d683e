"""recipes/ by kind: recipes/README.md's table lists exactly the folders and files of the tree, each file's `read by`
column names exactly the program modules that read it, nothing sits loose in recipes/, and no reference to an old
flat path is left (tools/relayout/move_recipes.py --check)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
PROGRAM = ["__main__.py", "kimi_k3", "components", "policies"]
# How the program names a recipe file: recipe_file("kind/name.yaml"), a path joined from RECIPES or "recipes", or
# recipe_file(f"profiles/{name}.yaml") (a stack's profile by its name).
READS = re.compile(
    r"""recipe_file\(\s*f?["']([^"']+)["']|(?:RECIPES|["']recipes["'])\s*/\s*["'](\w+)["']\s*/\s*["']([^"']+)["']"""
)


def table(text: str) -> dict[str, list[str]]:
    """path -> the backticked .py paths of its `read by` cell, from the table under "## Every folder and file"."""
    section = text.split("## Every folder and file", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 3, row
        (path,) = re.findall(r"`([^`]+)`", cells[0])
        assert path not in out, f"{path} has two rows"
        out[path] = re.findall(r"`([^`]+\.py)`", cells[1])
    return out


def tree(root: Path = RECIPES) -> set[str]:
    out = set()
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if p.is_dir():
            out.add(rel + "/")
        elif p.name != "README.md":
            out.add(rel)
    return out


def readers(root: Path = ROOT) -> dict[str, set[str]]:
    """recipe path -> the program modules that read it, from their source."""
    files = sorted(recipes_of(root))
    out: dict[str, set[str]] = {f: set() for f in files}
    for top in PROGRAM:
        paths = [root / top] if top.endswith(".py") else sorted((root / top).rglob("*.py"))
        paths = [p for p in paths if p.is_file()]
        for py in paths:
            rel = py.relative_to(root).as_posix()
            for m in READS.finditer(py.read_text()):
                name = m[1] or f"{m[2]}/{m[3]}"
                if rel == "kimi_k3/data.py":
                    continue  # the reader itself (its docstring's example)
                hits = [f for f in files if f == name or ("{" in name and re.fullmatch(pattern(name), f))]
                assert hits, f"{rel} reads recipes/{name}, which does not exist"
                for f in hits:
                    out[f].add(rel)
    return out


def pattern(name: str) -> str:
    return "".join("[^/]+" if part.startswith("{") else re.escape(part) for part in re.split(r"(\{[^}]*\})", name))


def recipes_of(root: Path) -> set[str]:
    return {p for p in tree(root / "recipes") if not p.endswith("/")}


def test_readme_lists_every_folder_and_file():
    rows = table((RECIPES / "README.md").read_text())
    assert sorted(set(rows) - tree()) == [], "rows for what is not in recipes/"
    assert sorted(tree() - set(rows)) == [], "files or folders in recipes/ without a row in recipes/README.md"


def test_no_yaml_loose_in_recipes():
    assert sorted(p.name for p in RECIPES.iterdir() if p.is_file() and p.name != "README.md") == []


def test_read_by_is_what_the_code_reads():
    rows, code = table((RECIPES / "README.md").read_text()), readers()
    for path, modules in code.items():
        assert sorted(rows[path]) == sorted(modules), f"recipes/{path}: README says {rows[path]}, code {modules}"
    assert all(code.values()), "a recipe file nothing reads"


def test_a_file_added_without_a_row_is_caught(tmp_path):
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "new.yaml").write_text("a: 1\n")
    (tmp_path / "loose.yaml").write_text("a: 1\n")
    rows = table((RECIPES / "README.md").read_text())
    assert sorted(tree(tmp_path) - set(rows)) == ["facts/new.yaml", "loose.yaml"]


def test_a_reader_not_in_the_table_is_caught(tmp_path):
    for top in ("recipes/facts", "kimi_k3"):
        (tmp_path / top).mkdir(parents=True)
    (tmp_path / "recipes" / "facts" / "model.yaml").write_text("a: 1\n")
    (tmp_path / "kimi_k3" / "x.py").write_text('recipe_file("facts/model.yaml")\nRECIPES / "facts" / "model.yaml"\n')
    assert readers(tmp_path) == {"facts/model.yaml": {"kimi_k3/x.py"}}
    (tmp_path / "kimi_k3" / "y.py").write_text('recipe_file("model.yaml")\n')  # an old flat name
    with pytest.raises(AssertionError, match="reads recipes/model.yaml, which does not exist"):
        readers(tmp_path)


def test_no_old_flat_reference_is_left():
    proc = subprocess.run(
        [sys.executable, "tools/relayout/move_recipes.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_rewrite_is_idempotent_and_leaves_others_recipes_alone():
    sys.path.insert(0, str(ROOT / "tools" / "relayout"))
    try:
        import move_recipes
    finally:
        sys.path.pop(0)
    table_ = move_recipes.moves()
    text = (
        'recipe_file("model.yaml") see recipes/model.yaml. ../recipes/gb300.yaml RECIPES / "perf-raw.yaml"\n'
        'recipes/{name}.yaml recipe_file(f"{name}.yaml") ai-dynamo/dynamo/recipes/kimi-k3 recipes/gb300.yamlx\n'
        'if name == "dcp.yaml"\n'
        'match=r"recipes/gb300\\.yaml: "\n'
    )
    once = move_recipes.rewrite_text(text, table_)
    assert once == (
        'recipe_file("facts/model.yaml") see recipes/facts/model.yaml. ../recipes/profiles/gb300.yaml '
        'RECIPES / "facts" / "perf-raw.yaml"\n'
        'recipes/profiles/{name}.yaml recipe_file(f"profiles/{name}.yaml") ai-dynamo/dynamo/recipes/kimi-k3 '
        "recipes/gb300.yamlx\n"
        'if name == "facts/dcp.yaml"\n'
        'match=r"recipes/profiles/gb300\\.yaml: "\n'
    )
    assert move_recipes.rewrite_text(once, table_) == once
