"""The reference in docs/ (moved out of README.md by issue 26) stays true where it lists what the code defines:
the commands, the layers of the import contract, the folders of the tree, the stacks, the pages of docs/ and
every relative link and anchor. (Config keys: test_readme.py; make targets: test_makefile.py; README's commands:
test_readme_commands.py; its "where to go next": test_readme_next.py; recipes/: test_recipes_layout.py.)"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Pages other branches add (the fault lane, trace replay): linked already, absent until those branches merge.
PENDING = {"docs/faults.md", "docs/traces.md"}


def section(markdown: str, heading: str) -> str:
    body = markdown.split(f"\n{heading}\n", 1)[1]
    return re.split(r"\n## ", body, maxsplit=1)[0]


def first_cells(markdown: str) -> list[str]:
    rows = [line for line in markdown.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    return [row.strip("|").split("|")[0].strip() for row in rows]


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# ------------------------------------------------------------------------------------------- commands
def test_the_commands_table_is_the_cli():
    from kimi_k3.commands.main import COMMANDS

    table = section((DOCS / "render-and-check.md").read_text(), "## The commands")
    documented = {re.match(r"kimi-k3 ([a-z-]+)", c)[1] for cell in first_cells(table) for c in backticked(cell)}
    assert documented == set(COMMANDS)


# ------------------------------------------------------------------------------------------- layers
def contract_layers() -> list[str]:
    """Every module the layers contract names (pyproject.toml), parentheses (optional) and siblings split."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [m.strip("() ") for layer in layers for m in re.split(r"[|:]", layer)]


def as_path(module: str) -> str:
    """The folder (or root file) a contract module lives in: kimi_k3.graph.build -> kimi_k3/graph/."""
    parts = module.split(".")
    if (ROOT / Path(*parts)).is_dir() or len(parts) == 1:
        return "/".join(parts) + "/"
    if len(parts) == 2:
        return "/".join(parts) + ".py"  # a foundation module at kimi_k3's root
    return "/".join(parts[:2]) + "/"


def test_the_layers_table_names_every_layer_of_the_contract():
    table = section((DOCS / "architecture.md").read_text(), "## The layers")
    named = {p for cell in table.splitlines() if cell.startswith("|") for p in backticked(cell)}
    missing = sorted({as_path(m) for m in contract_layers()} - named)
    assert missing == []


def test_a_layer_missing_from_the_table_is_caught():
    assert as_path("kimi_k3.graph.build") == "kimi_k3/graph/" and as_path("kimi_k3.errors") == "kimi_k3/errors.py"
    assert as_path("policies") == "policies/"


# ------------------------------------------------------------------------------------------- layout
def tracked_top_level() -> set[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {f.split("/")[0] + "/" for f in files.splitlines() if "/" in f}


def test_the_layout_table_is_the_tree():
    table = section((DOCS / "architecture.md").read_text(), "## Layout")
    rows = [p for cell in first_cells(table) for p in backticked(cell)]
    assert [p for p in rows if not (ROOT / p).exists()] == [], "rows for what does not exist"
    layers = {f"kimi_k3/{p.name}/" for p in (ROOT / "kimi_k3").iterdir() if (p / "__init__.py").exists()}
    assert sorted((tracked_top_level() | layers) - set(rows)) == [], "folders without a row"


# ------------------------------------------------------------------------------------------- stacks
def test_the_readme_stacks_table_is_the_stacks():
    from kimi_k3.blueprint import load_stack

    table = section((ROOT / "README.md").read_text(), "## Stacks")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| `")]
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
    assert sorted(r[0].strip("`") for r in rows) == stacks
    for row in rows:
        _, graph = load_stack(row[0].strip("`"), ROOT)
        assert (int(row[3]), int(row[4])) == (graph.gpus, graph.nodes), row


# ------------------------------------------------------------------------------------------- pages and links
def test_the_index_lists_every_page():
    index = (DOCS / "README.md").read_text()
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert sorted(pages - linked) == [], "pages docs/README.md does not list"
    assert sorted(f"docs/{p}" for p in linked - pages) == sorted(PENDING & {f"docs/{p}" for p in linked - pages})


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def broken_links(doc: Path) -> list[str]:
    out = []
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        page, _, frag = target.partition("#")
        dest = (doc.parent / page).resolve() if page else doc
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if rel in PENDING:
            continue
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            out.append(f"{target}: no such heading in {rel}")
    return out


DOC_FILES = ["README.md", "recipes/README.md", *sorted(f"docs/{p.name}" for p in DOCS.glob("*.md"))]


@pytest.mark.parametrize("doc", DOC_FILES)
def test_every_relative_link_resolves(doc):
    assert broken_links(ROOT / doc) == []


def test_a_broken_link_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Some: heading\n")
    page = tmp_path / "docs" / "b.md"
    page.write_text("[ok](a.md#some-heading) [x](a.md#nope) [y](gone.md) [z](faults.md) [w](https://x)\n")
    assert broken_links(page) == ["a.md#nope: no such heading in docs/a.md", "gone.md: no such file"]


def cited_pages(root: Path = ROOT) -> dict[str, set[str]]:
    """docs/<page>.md (with its #anchor, if any) -> the tracked files outside docs/ that cite it (code, comments,
    error messages, workflows, recipes)."""
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    out: dict[str, set[str]] = {}
    for rel in files.splitlines():
        path = root / rel
        if (
            rel.startswith("docs/")
            or rel == "tests/repo/test_docs.py"
            or not path.is_file()
            or path.suffix in {".png", ".npz", ".gz"}
        ):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for cited in re.findall(r"(?<![\w/.-])docs/[\w-]+\.md(?:#[\w-]+)?", text):
            out.setdefault(cited, set()).add(rel)
    return out


def test_every_page_the_code_cites_exists():
    wrong = []
    for cited, where in sorted(cited_pages().items()):
        page, _, frag = cited.partition("#")
        if page in PENDING:
            continue
        if not (ROOT / page).exists():
            wrong.append(f"{cited} (cited in {', '.join(sorted(where))}): no such page")
        elif frag and frag not in anchors(ROOT / page):
            wrong.append(f"{cited} (cited in {', '.join(sorted(where))}): no such heading")
    assert wrong == []


# ------------------------------------------------------------------------------------------- recipes
def recipe_cell(markdown: str) -> list[str]:
    (row,) = [line for line in markdown.splitlines() if line.startswith("| `kimi-k3:recipe` |")]
    return backticked(re.split(r"(?<!\\)\|", row)[2])  # cells split at unescaped pipes


def test_the_configure_recipe_list_is_what_the_config_accepts():
    """docs/configure.md listed only the seed four recipes after seven more were added (issue 26)."""
    import typing

    from kimi_k3.config.stack import StackConfig

    accepted = typing.get_args(StackConfig.model_fields["recipe"].annotation)
    assert recipe_cell((DOCS / "configure.md").read_text()) == list(accepted)
    assert sorted(accepted) == sorted(p.stem for p in (ROOT / "recipes" / "profiles").glob("*.yaml"))


def test_a_stale_recipe_list_is_caught():
    stale = "| `kimi-k3:recipe` | `gb200` \\| `gb300` (required) | which profile |\n"
    assert recipe_cell(stale) == ["gb200", "gb300"]


def test_no_page_counts_the_stacks_by_a_word():
    """Four stacks became sixteen while five pages still said "the four stacks"; name the set instead."""
    stale = [
        f"{doc.relative_to(ROOT)}: {m.group(0)!r}"
        for doc in sorted(DOCS.glob("*.md"))
        for m in re.finditer(
            r"(?<![\w.-])(?:all |our |the )?(?:two|three|four|five|six|\d+) (?:EKS |GKE )?stacks\b", doc.read_text()
        )
        if not re.match(r"(?:the |all |our )?four seed", m.group(0))
    ]
    assert not stale, stale
