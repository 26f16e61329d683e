"""README's "Where to go next" table names folders and files that exist (a newcomer finds each by folder name).

Before tools/relayout/relayout.py has laid the tree out, README has no such section yet: the table the step will
append (tools/relayout/where-to-go-next.md) is checked against the tree the step produces (today's files plus the
destinations in tools/relayout/moves.txt)."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
while not (ROOT / "pyproject.toml").exists() and ROOT != ROOT.parent:  # the same file from a lane folder
    ROOT = ROOT.parent
PENDING = ROOT / "tools" / "relayout" / "where-to-go-next.md"
HEADING = "## Where to go next"


def table_paths(markdown: str) -> list[str]:
    """The backticked paths (with a '/') in the second column of the section's table."""
    section = markdown.split(HEADING, 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    assert rows, "the section has no table rows"
    paths = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 2, row
        found = [
            p
            for p in re.findall(r"`([^`]+)`", cells[1])
            if re.fullmatch(r"[\w.-]+(/[\w.-]*)*", p) and ("/" in p or re.search(r"\.\w+$", p))
        ]
        assert found, f"row names no folder or file: {row}"
        paths += found
    return paths


def tree_after_step() -> set[str]:
    """Files and folders of this checkout, plus what moves.txt creates if the step has not run yet."""
    have = checkout()
    if (ROOT / "kimi_k3" / "k8s").is_dir():  # laid out: the tree is what it is
        return have
    moves = (ROOT / "tools" / "relayout" / "moves.txt").read_text()
    for dst in re.findall(r"(?:moves to|to) (\S+\.py)", moves):
        have.add(dst)
        parts = Path(dst).parts
        have.update(str(Path(*parts[:i])) for i in range(1, len(parts)))
    return have


def checkout() -> set[str]:
    have = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith((".git", ".venv", "build", "__pycache__"))]
        rel = Path(dirpath).relative_to(ROOT)
        have.update(str(rel / n) for n in dirnames + filenames)
    return have


def missing(paths: list[str], tree: set[str]) -> list[str]:
    return [p for p in paths if p.rstrip("/") not in tree]


def test_where_to_go_next_names_what_exists():
    readme = (ROOT / "README.md").read_text()
    if HEADING in readme:
        paths = table_paths(readme)
        assert missing(paths, tree_after_step()) == []
    else:
        paths = table_paths(PENDING.read_text())
        assert missing(paths, tree_after_step()) == []
    assert len(paths) >= 12


def test_a_folder_that_does_not_exist_is_caught():
    table = f"{HEADING}\n\n| looking for | where |\n|---|---|\n| a thing | `kimi_k3/nowhere/` |\n| a command | `kimi_k3/commands/` |\n"
    assert missing(table_paths(table), tree_after_step()) == ["kimi_k3/nowhere/"]
