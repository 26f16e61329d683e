#!/usr/bin/env python3
"""recipes/ by kind (issue 26): git mv each file recipes_moves.txt names, then rewrite every reference to it.

usage (from the checkout's root):
  python3 tools/relayout/move_recipes.py                 move what is still loose, then rewrite references
  python3 tools/relayout/move_recipes.py --rewrite-only  rewrite references only (after merging another branch)
  python3 tools/relayout/move_recipes.py --check         exit 1, listing them, if any reference is left to rewrite

Both parts are idempotent: a moved file is not moved again and a rewritten reference no longer matches (it has
its kind folder after `recipes/`). References rewritten, in every tracked text file (code, tests, docs, comments,
error messages, the recipes themselves):
  recipes/NAME, ../recipes/NAME      -> recipes/KIND/NAME
  recipe_file("NAME")                -> recipe_file("KIND/NAME")     (kimi_k3/data.py, the one reader)
  name == "NAME"                     -> name == "KIND/NAME"          (a test's stand-in for recipe_file)
  recipes/NAME as a regex (dots escaped) -> recipes/KIND/NAME, escaped alike
  RECIPES / "NAME", "recipes" / "NAME" -> ... / "KIND" / "NAME"
  recipes/{expr}.yaml, recipes/<stack>.yaml, recipe_file(f"{name}.yaml") -> the profiles folder (a stack's recipe)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MOVES = HERE / "recipes_moves.txt"
# (and the test of the rewrite, whose examples are old paths on purpose)
SKIP = {"tools/relayout/recipes_moves.txt", "tools/relayout/move_recipes.py", "tests/repo/test_recipes_layout.py"}
# Shipped byte for byte into ConfigMaps: a rewritten comment there would roll every pod (pyproject.toml, ruff).
SKIP_UNDER = ("kimi_k3/pods/",)


def moves(path: Path = MOVES) -> dict[str, str]:
    """NAME -> KIND, from recipes_moves.txt (comments and blank lines ignored)."""
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[0].endswith(".yaml") or "/" in parts[0]:
            sys.exit(f"{path}:{n}: {line!r}: expected `NAME.yaml KIND`")
        if parts[0] in out:
            sys.exit(f"{path}:{n}: {parts[0]} is listed twice")
        out[parts[0]] = parts[1]
    return out


def rules(table: dict[str, str]) -> list[tuple[re.Pattern[str], str]]:
    names = "|".join(re.escape(n) for n in sorted(table, key=len, reverse=True))
    escaped = "|".join(re.escape(n.replace(".", "\\.")) for n in sorted(table, key=len, reverse=True))
    return [
        # recipes/NAME, not someone else's (ai-dynamo/dynamo/recipes/...): nothing path-like before it but `../`.
        (re.compile(rf"(?<![\w/.-])((?:\.\./)*)recipes/({names})(?![\w-]|\.\w)"), "path"),  # a full stop may follow
        # the same path written as a regex in a test (`recipes/gb300\.yaml`)
        (re.compile(rf"(?<![\w/.-])recipes/({escaped})(?![\w-])"), "regex"),
        (re.compile(rf"""(recipe_file\(\s*)(["'])({names})\2"""), "reader"),
        (re.compile(rf"""((?:RECIPES|["']recipes["'])\s*/\s*)(["'])({names})\2"""), "join"),
        # a patched reader's test: `if name == "NAME"` (tests that stand in for recipe_file)
        (re.compile(rf"""(\bname\s*[!=]=\s*)(["'])({names})\2"""), "reader"),
        (re.compile(r"(?<![\w/.-])((?:\.\./)*)recipes/(\{[\w.]+\}|<stack>)\.yaml"), "profile"),
        (re.compile(r"""(recipe_file\(f["'])(\{name\}\.yaml)"""), "profile-reader"),
    ]


def rewrite_text(text: str, table: dict[str, str]) -> str:
    for pattern, kind in rules(table):
        if kind == "path":
            text = pattern.sub(lambda m: f"{m[1]}recipes/{table[m[2]]}/{m[2]}", text)
        elif kind == "regex":
            text = pattern.sub(lambda m: f"recipes/{table[m[1].replace(chr(92), '')]}/{m[1]}", text)
        elif kind == "reader":
            text = pattern.sub(lambda m: f"{m[1]}{m[2]}{table[m[3]]}/{m[3]}{m[2]}", text)
        elif kind == "join":
            text = pattern.sub(lambda m: f"{m[1]}{m[2]}{table[m[3]]}{m[2]} / {m[2]}{m[3]}{m[2]}", text)
        elif kind == "profile":
            text = pattern.sub(lambda m: f"{m[1]}recipes/profiles/{m[2]}.yaml", text)
        else:
            text = pattern.sub(lambda m: f"{m[1]}profiles/{m[2]}", text)
    return text


def tracked(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True, text=True).stdout
    return [f for f in out.split("\0") if f and f not in SKIP and not f.startswith(SKIP_UNDER)]


def rewrite(root: Path, table: dict[str, str], apply: bool = True) -> list[str]:
    changed = []
    for rel in tracked(root):
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # not text
        new = rewrite_text(text, table)
        if new != text:
            changed.append(rel)
            if apply:
                path.write_text(new)
    return changed


def move(root: Path, table: dict[str, str]) -> list[str]:
    done = []
    for name, kind in table.items():
        src, dst = root / "recipes" / name, root / "recipes" / kind / name
        if dst.exists():
            continue  # moved already
        if not src.exists():
            sys.exit(f"recipes_moves.txt names recipes/{name}, which is neither loose nor in recipes/{kind}/")
        dst.parent.mkdir(exist_ok=True)
        subprocess.run(["git", "mv", f"recipes/{name}", f"recipes/{kind}/{name}"], cwd=root, check=True)
        done.append(f"recipes/{name} -> recipes/{kind}/{name}")
    return done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rewrite-only", action="store_true", help="rewrite references; move nothing")
    g.add_argument("--check", action="store_true", help="change nothing; exit 1 if a reference is left")
    args = p.parse_args(argv)
    root = Path(
        subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    table = moves()
    if args.check:
        left = rewrite(root, table, apply=False)
        print("\n".join(f"old recipe path in {f}" for f in left) or "no old recipe path left")
        return 1 if left else 0
    if not args.rewrite_only:
        for line in move(root, table):
            print(f"moved {line}")
    changed = rewrite(root, table)
    print(f"rewrote references in {len(changed)} file(s)" + "".join(f"\n  {f}" for f in changed))
    py = [f for f in changed if f.endswith(".py")]
    ruff = root / ".venv" / "bin" / "ruff"
    if py and ruff.exists():  # a longer literal may move a call's line breaks; make lint checks the format
        subprocess.run([str(ruff), "format", "--quiet", *py], cwd=root, check=True)
    loose = sorted(p.name for p in (root / "recipes").glob("*.yaml"))
    if loose:
        print(f"loose in recipes/ (add them to {MOVES.name}): {', '.join(loose)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
