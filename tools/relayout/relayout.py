"""The layout step of issue 26 as a replayable, deterministic codemod.

Run on a checkout (`python tools/relayout/relayout.py --apply`), it performs the whole step from
tools/relayout/moves.txt:
  1. rewrites every reference to a module or a moved name in the ORIGINAL texts: `import`/`from` statements at any
     depth (relative ones become absolute), `module.name` attribute uses and `setattr(module, "name")`/
     `patch.object(...)` targets, dotted strings (`"kimi_k3.x.y"`, `python -m kimi_k3.x`, entry points) and file
     paths (`kimi_k3/x.py`, `tests/test_x.py`) in Python, Markdown, Makefile, YAML, TOML and shell files, and
     `Path(__file__)` arithmetic of files that change folder depth or lose a sibling;
  2. moves named top-level definitions (functions, classes, constants, with the comments right above them) from
     one module to another, with the imports they need, and imports them back where the rest still uses them;
  3. `git mv`s modules into their layer folders and tests into their lane folders (a test file the moves file
     does not name goes by LANE_RULES below, default unit), creating packages' `__init__.py`;
  4. `ruff format` + `ruff check --fix` over the project's Python files.
Names and modules it cannot place (listed in moves.txt but absent, new modules in a moved folder, ...) are
reported, never guessed. It refuses to run on a tree it has already laid out (tools/relayout/.applied exists or a
destination already exists). Without --apply it only reports what it would do (a dry run).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import time
import tokenize
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY_ROOTS = ("kimi_k3", "components", "policies", "tests", "tests_aiconfigurator", "tools", "bench")
TEXT_SUFFIXES = {".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg", ".ini", ".json", ""}
TEXT_NAMES = {"Makefile", "run"}
SKIP_DIRS = {".git", ".venv", ".venv-rehearse", "build", "__pycache__", ".pulumi-state", ".pulumi-user", "relayout"}
# A test file the moves file does not name: the first rule that matches places it (else tests/unit/).
LANE_RULES: tuple[tuple[str, str], ...] = (
    (r"pytest\.mark\.rehearse|_live\.py$", "live"),
    (r"\bsubprocess\b.*\bmake\b|Makefile|README", "repo"),
    (r"\brendered\b|render_stack\(", "stacks"),
    (r"commands\.main|\bmain\(\[", "cli"),
)


@dataclass
class Plan:
    module_moves: dict[str, str] = field(default_factory=dict)  # old path -> new path
    def_moves: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (old path, new path, names)
    expect_absent: list[tuple[str, str]] = field(default_factory=list)  # (new path, new path): "no longer imports"
    new_packages: set[str] = field(default_factory=set)
    replace: list[tuple[str, str, str]] = field(default_factory=list)  # (old path, old text, new text)
    optional: set[tuple[str, str]] = field(default_factory=set)  # (old path, name) moved only if it exists


def parse_moves(text: str) -> Plan:
    plan = Plan()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("PART"):
            continue
        if m := re.fullmatch(r"from (\S+\.py) to (\S+\.py): (.+)", line):
            names = [n.strip() for n in m.group(3).split(",") if n.strip()]
            plan.optional |= {(m.group(1), n[:-1]) for n in names if n.endswith("?")}  # "name?": moved if present
            plan.def_moves.append((m.group(1), m.group(2), [n.rstrip("?") for n in names]))
        elif m := re.fullmatch(r"(\S+\.py) moves to (\S+\.py)", line):
            plan.module_moves[m.group(1)] = m.group(2)
        elif m := re.fullmatch(r"(\S+\.py) no longer imports (\S+\.py)", line):
            plan.expect_absent.append((m.group(1), m.group(2)))
        elif m := re.fullmatch(r"in (\S+) replace (.+?) \|\|\| (.+)", line):
            plan.replace.append((m.group(1), m.group(2).replace("\\n", "\n"), m.group(3).replace("\\n", "\n")))
        elif m := re.fullmatch(r"package (\S+)", line):
            plan.new_packages.add(m.group(1))
        # other lines ("starts importing", prose) document intent only
    return plan


def mod_of(path: str) -> str:
    p = path[:-3] if path.endswith(".py") else path
    parts = p.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def path_of(mod: str, is_package: bool = False) -> str:
    return mod.replace(".", "/") + ("/__init__.py" if is_package else ".py")


def tracked_files(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.split()
    files = []
    for f in out:
        parts = f.split("/")
        if any(p in SKIP_DIRS for p in parts[:-1]) or not (root / f).is_file():
            continue
        files.append(f)
    return sorted(files)


# ------------------------------------------------------------------------------------------------ the old tree
class OldTree:
    """Every project module of the tree before the step: what each defines and imports (to follow re-exports)."""

    def __init__(self, root: Path, files: list[str], replaced: dict[str, str]):
        self.root = root
        self.texts: dict[str, str] = {}
        self.trees: dict[str, ast.Module] = {}
        self.path_by_mod: dict[str, str] = {}
        for f in files:
            if f.endswith(".py") and (f.split("/")[0] in PY_ROOTS or "/" not in f):
                text = replaced.get(f) or (root / f).read_text()
                try:
                    tree = ast.parse(text, f)
                except SyntaxError:
                    continue
                self.texts[f], self.trees[f] = text, tree
                if f.split("/")[0] in ("kimi_k3", "components", "policies"):
                    self.path_by_mod[mod_of(f)] = f
        self.defined: dict[str, set[str]] = {}
        self.reexports: dict[str, dict[str, tuple[str, str]]] = {}
        for mod, f in self.path_by_mod.items():
            self.defined[mod] = top_level_defs(self.trees[f])
            self.reexports[mod] = {}
            for node in self.trees[f].body:
                if isinstance(node, ast.ImportFrom):
                    base = absolute_base(node, mod, f.endswith("__init__.py"))
                    for a in node.names:
                        sub = f"{base}.{a.name}"
                        if sub in self.path_by_mod:
                            continue  # a submodule, not a name
                        if base in self.path_by_mod:
                            self.reexports[mod][a.asname or a.name] = (base, a.name)

    def is_module(self, name: str) -> bool:
        return name in self.path_by_mod

    def origin(self, mod: str, name: str, depth: int = 0) -> tuple[str, str]:
        """Where `mod.name` is really defined (following `from x import name` re-exports inside the project)."""
        if depth < 10 and name not in self.defined.get(mod, ()) and name in self.reexports.get(mod, {}):
            return self.origin(*self.reexports[mod][name], depth + 1)
        return mod, name


def project_imports(old: OldTree, path: str) -> set[str]:
    """The project modules a file imports (any depth)."""
    mod, out = mod_of(path), set()
    for node in ast.walk(old.trees[path]):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute_base(node, mod, path.endswith("__init__.py"))
            out.update(f"{base}.{a.name}" if old.is_module(f"{base}.{a.name}") else base for a in node.names)
    return {o for o in out if o.split(".")[0] in ("kimi_k3", "components", "policies") and o != "kimi_k3"}


def top_level_defs(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        names.update(stmt_defines(node))
    return names


def stmt_defines(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        out = []
        for t in node.targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.append(n.id)
        return out
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def absolute_base(node: ast.ImportFrom, mod: str, is_init: bool) -> str:
    if not node.level:
        return node.module or ""
    pkg = mod.split(".") if is_init else mod.split(".")[:-1]
    pkg = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
    return ".".join(pkg + ([node.module] if node.module else []))


# ------------------------------------------------------------------------------------------------ the mapping
class Mapping:
    """old module -> new module; (old module, name) -> new module for moved definitions."""

    def __init__(self, old: OldTree, plan: Plan, test_moves: dict[str, str]):
        self.old = old
        self.path_moves = dict(plan.module_moves) | test_moves
        self.mod_moves = {mod_of(a): mod_of(b) for a, b in plan.module_moves.items()}
        self.sym: dict[tuple[str, str], str] = {}
        for src, dst, names in plan.def_moves:
            for n in names:
                if n in old.defined.get(mod_of(src), ()):
                    self.sym[(mod_of(src), n)] = mod_of(dst)

        # (old module, moved name) still read by statements that stay in the old module
        self.read_by_rest: set[tuple[str, str]] = set()
        for src, _dst, names in plan.def_moves:
            tree = old.trees.get(src)
            if tree is None:
                continue
            moving = {n for s2, _, ns in plan.def_moves if s2 == src for n in ns}
            rest = [st for st in tree.body if not (set(stmt_defines(st)) & moving)]
            used = used_names(rest)
            self.read_by_rest |= {(mod_of(src), n) for n in names if n in used and (mod_of(src), n) in self.sym}

    def module(self, mod: str) -> str:
        return self.mod_moves.get(mod, mod)

    def name(self, mod: str, name: str) -> tuple[str, str]:
        """The new (module, name) of `from mod import name` (name may be a submodule)."""
        sub = f"{mod}.{name}"
        if self.old.is_module(sub):
            new = self.module(sub)
            return new.rpartition(".")[0], new.rpartition(".")[2]
        omod, oname = self.old.origin(mod, name)
        return self.sym.get((omod, oname), self.module(omod)), oname

    def dotted(self, text: str) -> str:
        """A dotted reference kimi_k3.a.b.c (module, maybe a name after it)."""
        parts = text.split(".")
        for i in range(len(parts), 0, -1):
            mod = ".".join(parts[:i])
            if self.old.is_module(mod):
                rest = parts[i:]
                if rest:
                    new_mod, name = self.name(mod, rest[0])
                    return ".".join([new_mod, name, *rest[1:]])
                return self.module(mod)
        return text

    def path(self, text: str) -> str:
        return self.path_moves.get(text, text)


# ------------------------------------------------------------------------------------------------ phase 1
DOTTED = re.compile(r"(?<![\w.])((?:kimi_k3|components|policies)(?:\.\w+)+)")
PATHREF = re.compile(r"(?<![\w/.-])((?:kimi_k3|components|policies|tests|tests_aiconfigurator)/[\w/]+\.py)")


def rewrite_text(text: str, m: Mapping) -> str:
    text = PATHREF.sub(lambda x: m.path(x.group(1)), text)
    return DOTTED.sub(lambda x: m.dotted(x.group(1)), text)


def line_offsets(text: str) -> list[int]:
    offs, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        offs.append(pos)
    return offs


class Edits:
    def __init__(self, text: str):
        self.text, self.offs, self.items = text, line_offsets(text), []

    def at(self, line: int, col: int) -> int:
        # ast columns are UTF-8 byte offsets
        start = self.offs[line - 1]
        line_text = self.text[start : self.offs[line] if line < len(self.offs) else len(self.text)]
        return start + len(line_text.encode()[:col].decode(errors="ignore"))

    def node_span(self, node: ast.AST) -> tuple[int, int]:
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)

    def replace(self, a: int, b: int, new: str) -> None:
        self.items.append((a, b, new))

    def apply(self) -> str:
        out, pos = [], 0
        for a, b, new in sorted(self.items, key=lambda e: (e[0], e[1])):
            if a < pos:
                continue  # overlapping (an inner edit of an already replaced span)
            out += [self.text[pos:a], new]
            pos = b
        out.append(self.text[pos:])
        return "".join(out)


def string_spans(text: str) -> list[tuple[int, int]]:
    """Spans of comments and string literals (where dotted names and paths are rewritten as text)."""
    spans = []
    offs = line_offsets(text)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT) or getattr(tokenize, "FSTRING_MIDDLE", -1) == tok.type:
                (l1, c1), (l2, c2) = tok.start, tok.end
                spans.append((offs[l1 - 1] + c1, offs[l2 - 1] + c2))
    except (tokenize.TokenError, IndentationError):
        pass
    return spans


def rewrite_python(path: str, text: str, tree: ast.Module, m: Mapping, new_path: str, report: list[str]) -> str:
    old_mod = mod_of(path)
    is_init = path.endswith("__init__.py")
    ed = Edits(text)
    aliases: dict[str, str] = {}  # local name -> old project module it is bound to
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        a.asname or a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    extra_alias: dict[str, str] = {}  # new module -> alias added for attribute uses
    import_nodes: list[tuple[ast.stmt, str]] = []  # (statement, indent)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if m.old.is_module(a.name) and a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = absolute_base(node, old_mod, is_init)
            for a in node.names:
                if m.old.is_module(f"{base}.{a.name}"):
                    aliases[a.asname or a.name] = f"{base}.{a.name}"

    def alias_for(new_mod: str) -> str:
        if new_mod in extra_alias:
            return extra_alias[new_mod]
        for local, om in aliases.items():
            if m.module(om) == new_mod:
                return local
        base = new_mod.rpartition(".")[2]
        cand = base if base not in taken else f"{new_mod.split('.')[-2]}_{base}"
        while cand in taken:
            cand += "_"
        taken.add(cand)
        extra_alias[new_mod] = cand
        return cand

    # module.attr and setattr(module, "attr") of a moved name
    attr_users: dict[str, list[ast.AST]] = defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            om = aliases[node.value.id]
            new_mod, _ = m.name(om, node.attr)
            if new_mod != m.module(om) and not m.old.is_module(f"{om}.{node.attr}"):
                ed.replace(*ed.node_span(node.value), alias_for(new_mod))
                attr_users[node.value.id].append(node)
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            target, attr = node.args[0], node.args[1]
            if (
                isinstance(target, ast.Name)
                and target.id in aliases
                and isinstance(attr, ast.Constant)
                and isinstance(attr.value, str)
            ):
                om = aliases[target.id]
                # a patch reaches the module whose code reads the name: follow a moved definition only when the
                # rest of its old module no longer reads it (else the rest's own binding is what gets patched)
                new_mod = m.sym.get((om, attr.value), m.module(om))
                if (om, attr.value) in m.read_by_rest:
                    new_mod = m.module(om)
                    report.append(
                        f"check: {path}:{node.lineno}: patches {attr.value!r} in {new_mod} (read there); "
                        f"code moved to {m.sym[(om, attr.value)]} reads its own binding"
                    )
                if new_mod != m.module(om):
                    ed.replace(*ed.node_span(target), alias_for(new_mod))
                    attr_users[target.id].append(new_mod)
                    report.append(f"note: {path}:{node.lineno}: patches {attr.value!r} now in {new_mod}")

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            indent = text.splitlines()[node.lineno - 1][: node.col_offset]
            import_nodes.append((node, indent))

    for node, indent in import_nodes:
        new_lines = rewrite_import(node, old_mod, is_init, m)
        a, b = ed.node_span(node)
        # an alias added for attribute uses goes right after each import that binds the module it comes from
        adds = []
        for bound in [(x.asname or x.name) for x in node.names]:
            for u in attr_users.get(bound, ()):
                new_mod = m.name(aliases[bound], u.attr)[0] if isinstance(u, ast.Attribute) else u
                pkg, _, leaf = new_mod.rpartition(".")
                line = f"from {pkg} import {leaf}" + (
                    f" as {extra_alias[new_mod]}" if extra_alias.get(new_mod, leaf) != leaf else ""
                )
                if new_mod in extra_alias and line not in adds:
                    adds.append(line)
        if new_lines is None and not adds:
            continue
        if new_lines is None:
            new_lines = [ed.text[a:b]]
        ed.replace(a, b, ("\n" + indent).join(new_lines + adds))

    # paths built by joining constants: ROOT / "kimi_k3" / "workload.py"
    inner_div = {id(n.left) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)) or id(node) in inner_div:
            continue
        parts, cur = [], node
        while isinstance(cur, ast.BinOp) and isinstance(cur.op, ast.Div):
            parts.insert(0, cur.right)
            cur = cur.left
        parts.insert(0, cur)
        for i in range(len(parts)):
            run = parts[i:]
            if all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in run):
                joined = "/".join(p.value for p in run)
                new = m.path(joined)
                if new != joined:
                    a_, _ = ed.node_span(run[0])
                    _, b_ = ed.node_span(run[-1])
                    ed.replace(a_, b_, " / ".join(f'"{x}"' for x in new.split("/")))
                break

    # dotted strings and paths in comments and string literals
    import_spans = [ed.node_span(n) for n, _ in import_nodes]
    for a, b in string_spans(text):
        if any(x <= a < y for x, y in import_spans):
            continue
        seg = text[a:b]
        new = rewrite_text(seg, m)
        if new != seg:
            ed.replace(a, b, new)

    needs: set[str] = set()
    fix_file_refs(path, new_path, text, tree, ed, m, aliases, report, needs)
    out = ed.apply()
    return insert_imports(out, sorted(needs)) if needs else out


def rewrite_import(node: ast.stmt, old_mod: str, is_init: bool, m: Mapping) -> list[str] | None:
    if isinstance(node, ast.Import):
        out, changed = [], False
        for a in node.names:
            if m.old.is_module(a.name) or any(m.old.is_module(p) for p in prefixes(a.name)):
                new = m.dotted(a.name)
                if new != a.name:
                    changed = True
                    if not a.asname:  # `import a.b` binds `a`; keep the binding and name the new module
                        out.append(f"import {new}")
                        continue
                out.append(f"import {new}" + (f" as {a.asname}" if a.asname else ""))
            else:
                out.append(f"import {a.name}" + (f" as {a.asname}" if a.asname else ""))
        return out if changed else None
    assert isinstance(node, ast.ImportFrom)
    base = absolute_base(node, old_mod, is_init)
    if not (
        m.old.is_module(base)
        or base in ("kimi_k3", "components", "policies")
        or any(m.old.is_module(f"{base}.{a.name}") for a in node.names)
    ):
        return None
    groups: dict[str, list[str]] = {}
    for a in node.names:
        if a.name == "*":
            groups.setdefault(m.module(base), []).append("*")
            continue
        new_mod, new_name = m.name(base, a.name)
        local = a.asname or a.name
        groups.setdefault(new_mod, []).append(new_name if local == new_name else f"{new_name} as {local}")
    if (
        not node.level
        and list(groups) == [base]
        and all(g == (a.asname and f"{a.name} as {a.asname}" or a.name) for g, a in zip(groups[base], node.names))
    ):
        return None
    lines = []
    for mod, names in groups.items():
        lines.append(f"from {mod} import {', '.join(names)}")
    return lines


def prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def fix_file_refs(
    path: str,
    new_path: str,
    text: str,
    tree: ast.Module,
    ed: Edits,
    m: Mapping,
    aliases: dict[str, str],
    report: list[str],
    needs: set[str],
) -> None:
    """`Path(__file__)` arithmetic: a changed folder depth, and siblings that now live elsewhere."""
    depth_delta = new_path.count("/") - path.count("/")
    for node in ast.walk(tree):
        # Path(__file__).with_name("x.py") / Path(mod.__file__).with_name("x.py")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "with_name"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            anchor = file_anchor(node.func.value, path, aliases, m)
            if anchor is None:
                continue
            old_anchor, new_anchor = anchor
            sibling = str(Path(old_anchor).with_name(node.args[0].value))
            new_sibling = m.path(sibling)
            if str(Path(new_anchor).parent) == str(Path(new_sibling).parent):
                if Path(new_sibling).name != node.args[0].value:
                    ed.replace(*ed.node_span(node.args[0]), repr(Path(new_sibling).name))
                continue
            if new_sibling.startswith("kimi_k3/pods/"):
                ed.replace(*ed.node_span(node), f"program_path({Path(new_sibling).name!r})")
                needs.add("from kimi_k3.pods import program_path")
            else:
                ups = ".parent" * (new_path.count("/") + 1)
                parts = " / ".join(repr(p) for p in Path(new_sibling).parts)
                ed.replace(*ed.node_span(node), f"Path(__file__).resolve(){ups} / {parts}")
        # Path(__file__).resolve().parent.parent (the repository root) from a file that changed depth
        if depth_delta and isinstance(node, ast.Attribute) and node.attr == "parent":
            chain, inner = 0, node
            while isinstance(inner, ast.Attribute) and inner.attr == "parent":
                chain, inner = chain + 1, inner.value
            if chain >= 2 and is_own_file(inner):
                ed.replace(
                    *ed.node_span(node), ed.text[slice(*ed.node_span(inner))] + ".parent" * (chain + depth_delta)
                )
        if (
            depth_delta
            and isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant)
            and is_own_file(node.value.value)
        ):
            ed.replace(*ed.node_span(node.slice), str(node.slice.value + depth_delta))
    if depth_delta and "__file__" in text and not any(x in text for x in (".parent", "parents[", "with_name")):
        report.append(f"check: {path}: uses __file__ and moves {depth_delta:+d} folder(s)")


def is_own_file(node: ast.AST) -> bool:
    """Path(__file__) or Path(__file__).resolve()"""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "resolve":
        node = node.func.value
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "Path"
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "__file__"
    )


def file_anchor(node: ast.AST, path: str, aliases: dict[str, str], m: Mapping) -> tuple[str, str] | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "resolve":
        node = node.func.value
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Path" and node.args):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Name) and arg.id == "__file__":
        return path, m.path(path)
    if (
        isinstance(arg, ast.Attribute)
        and arg.attr == "__file__"
        and isinstance(arg.value, ast.Name)
        and arg.value.id in aliases
    ):
        p = m.old.path_by_mod.get(aliases[arg.value.id])
        return (p, m.path(p)) if p else None
    return None


# ------------------------------------------------------------------------------------------------ phase 2
def stmt_span(lines: list[str], node: ast.stmt) -> tuple[int, int]:
    """0-based [start, end) line span of a top-level statement with its decorators and the comments right above."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#") and not lines[start - 1].startswith("# ---"):
        start -= 1
    return start, node.end_lineno


def used_names(nodes: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                names.add(n.id)
            elif isinstance(n, ast.Attribute):
                pass
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
                names.add(n.value)  # string annotations ("Role") and getattr-style names
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):
                try:
                    expr = ast.parse(n.value, mode="eval")
                except SyntaxError:
                    continue
                names.update(x.id for x in ast.walk(expr) if isinstance(x, ast.Name))
    return names


def import_bindings(tree: ast.Module) -> dict[str, str]:
    """local name -> the import line (text) that binds it, for module-level imports."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                local = a.asname or a.name.split(".")[0]
                out[local] = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for a in node.names:
                mod = ("." * node.level) + (node.module or "")
                out[a.asname or a.name] = f"from {mod} import {a.name}" + (f" as {a.asname}" if a.asname else "")
    return out


def split_modules(new_texts: dict[str, str], plan: Plan, m: Mapping, report: list[str]) -> dict[str, str]:
    """Move the named definitions (in the already rewritten texts, keyed by NEW path)."""
    moved_into: dict[str, list[tuple[str, str]]] = defaultdict(list)  # dst -> [(src new path, text)]
    dst_needs: dict[str, dict[str, str]] = defaultdict(dict)  # dst -> {local: import line}
    src_of_dst: dict[str, str] = {}
    by_src: dict[str, list[tuple[str, list[str]]]] = defaultdict(list)
    for src, dst, names in plan.def_moves:
        by_src[m.path(src)].append((dst, names))
    moved_name_home: dict[tuple[str, str], str] = {}  # (src new path, name) -> dst
    for src, groups in by_src.items():
        for dst, names in groups:
            for n in names:
                moved_name_home[(src, n)] = dst

    # a helper nobody named that only moved code reads follows it (new helpers other engineers add to a split file)
    named = {(src, n) for src, groups in by_src.items() for _, names in groups for n in names}
    words: dict[str, set[str]] = defaultdict(set)  # identifier -> the (new) files that mention it
    for path, text in m.old.texts.items():
        for w in set(re.findall(r"[A-Za-z_]\w*", text)):
            words[w].add(m.path(path))
    for src, groups in sorted(by_src.items()):
        if src not in new_texts:
            continue
        tree = ast.parse(new_texts[src], src)
        for _ in range(20):
            moving = {n for _, names in groups for n in names}
            stmts = {n: st for st in tree.body for n in stmt_defines(st)}
            rest = [st for st in tree.body if not set(stmt_defines(st)) & moving]
            grew = False
            for dst, names in groups:
                own = [stmts[n] for n in names if n in stmts]
                for n in sorted(used_names(own) - set(names)):
                    if n not in stmts or (src, n) in named or n in moving or words[n] - {src}:
                        continue  # named, or mentioned by another file (its API): it stays
                    if n in used_names([st for st in rest if n not in stmt_defines(st)]):
                        continue  # the rest reads it too: it stays (dst imports it)
                    readers = [d for d, ns in groups if n in used_names([stmts[x] for x in ns if x in stmts])]
                    if len(readers) == 1:
                        names.append(n)
                        moved_name_home[(src, n)] = dst
                        report.append(f"follows: {src}: {n} (read only by what moves) goes to {dst}")
                        grew = True
            if not grew:
                break

    old_of = {m.path(o): o for o in m.old.texts}
    optional = {(m.path(a), n) for a, n in plan.optional}
    for src, groups in sorted(by_src.items()):
        if src not in new_texts:
            if not all((src, n) in optional for _, names in groups for n in names):
                report.append(f"UNPLACED: {src} (source of a definition move) does not exist")
            continue
        text = new_texts[src]
        tree = ast.parse(text, src)
        lines = text.splitlines(keepends=True)
        defined = {}
        for node in tree.body:
            for n in stmt_defines(node):
                defined.setdefault(n, node)
        bindings = import_bindings(tree)
        future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body)
        remove: set[int] = set()
        src_mod = mod_of(src)
        stay_defined = set(defined)
        for dst, names in groups:
            stmts, seen = [], set()
            for n in names:
                node = defined.get(n)
                if node is None:
                    if (src, n) not in optional:
                        report.append(f"UNPLACED: {n} is not defined at the top of {src} (wanted in {dst})")
                    continue
                if id(node) in seen:
                    continue
                seen.add(id(node))
                extra = set(stmt_defines(node)) - set(names)
                if extra:
                    report.append(f"note: {src}: {', '.join(sorted(extra))} go(es) with {n} to {dst}")
                stmts.append(node)
            stmts.sort(key=lambda s: s.lineno)
            for node in stmts:
                a, b = stmt_span(lines, node)
                remove.update(range(a, b))
                moved_into[dst].append((src, "".join(lines[a:b])))
                stay_defined -= set(stmt_defines(node))
            if future:
                dst_needs[dst]["__future__"] = "from __future__ import annotations"
            src_of_dst[dst] = src
            own = set().union(*(stmt_defines(s) for s in stmts)) if stmts else set()
            for name in sorted(used_names(stmts) - own):
                if name in bindings:
                    line = absolutize(bindings[name], src_mod, src.endswith("__init__.py"))
                    if not line.startswith(f"from {mod_of(dst)} import "):  # dst defines it already
                        dst_needs[dst][name] = line
                elif name in defined:
                    home = moved_name_home.get((src, name))
                    target = mod_of(home) if home else src_mod
                    if target != mod_of(dst):
                        dst_needs[dst][name] = f"from {target} import {name}"
        # the rest of src: imports of moved names it still uses
        keep = [ln for i, ln in enumerate(lines) if i not in remove]
        rest_text = "".join(keep)
        rest_tree = ast.parse(rest_text, src)
        rest_used = used_names(list(rest_tree.body))
        back = defaultdict(list)
        for dst, names in groups:
            for n in names:
                if n in defined and n in rest_used and n not in stay_defined:
                    back[mod_of(dst)].append(n)
        if back:
            rest_text = insert_imports(
                rest_text, [f"from {mod} import {', '.join(ns)}" for mod, ns in sorted(back.items())]
            )
        new_texts[src] = rest_text

    for dst, chunks in sorted(moved_into.items()):
        needs = dst_needs[dst]
        head = []
        if "__future__" in needs:
            head.append(needs.pop("__future__"))
        srcs = sorted({s for s, _ in chunks})
        doc = f'"""{", ".join(Path(s).name for s in srcs)} -> {Path(dst).name}: moved by tools/relayout (issue 26)."""'
        import_lines = sorted(set(needs.values()))
        body = "\n\n".join(c.rstrip("\n") + "\n" for _, c in chunks)
        if dst in new_texts:
            new_texts[dst] = insert_imports(new_texts[dst], import_lines) + "\n\n" + body
        else:
            new_texts[dst] = "\n".join([doc, *head, "", *import_lines, "", ""]) + body
    # circles made by a split: dst imports from src while src imports from dst
    for dst, src in src_of_dst.items():
        pass
    return new_texts


def absolutize(line: str, mod: str, is_init: bool) -> str:
    m_ = re.match(r"from (\.+)(\S*) import (.+)", line)
    if not m_:
        return line
    level = len(m_.group(1))
    pkg = mod.split(".") if is_init else mod.split(".")[:-1]
    pkg = pkg[: len(pkg) - (level - 1)] if level > 1 else pkg
    base = ".".join(pkg + ([m_.group(2)] if m_.group(2) else []))
    return f"from {base} import {m_.group(3)}"


def insert_imports(text: str, lines: list[str]) -> str:
    tree = ast.parse(text)
    last = 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and node is tree.body[0]
        ):
            last = node.end_lineno
        else:
            break
    src = text.splitlines(keepends=True)
    return "".join(src[:last]) + "".join(ln + "\n" for ln in lines) + "".join(src[last:])


# ------------------------------------------------------------------------------------------------ tests by lane
def lane_moves(files: list[str], plan: Plan, root: Path, report: list[str]) -> dict[str, str]:
    moves = {}
    for f in files:
        if not re.fullmatch(r"tests/test_\w+\.py", f) or f in plan.module_moves:
            continue
        text = (root / f).read_text()
        lane = next((lane for pat, lane in LANE_RULES if re.search(pat, text) or re.search(pat, f)), "unit")
        moves[f] = f"tests/{lane}/{Path(f).name}"
        report.append(f"lane rule: {f} -> tests/{lane}/ (not named in moves.txt)")
    return moves


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path.cwd())
    ap.add_argument("--moves", type=Path, default=HERE / "moves.txt")
    ap.add_argument("--apply", action="store_true", help="change the tree (default: report only)")
    ap.add_argument("--no-format", action="store_true", help="skip ruff format / ruff check --fix")
    ap.add_argument(
        "--allow-unplaced",
        action="store_true",
        help="apply although some items are unplaced (they stay where they are, listed)",
    )
    args = ap.parse_args(argv)
    started = time.monotonic()
    root = args.root.resolve()
    marker = root / "tools" / "relayout" / ".applied"
    if marker.exists():
        print(f"relayout: {marker} exists: this tree is laid out already; refusing to run twice", file=sys.stderr)
        return 2
    plan = parse_moves(args.moves.read_text())
    files = tracked_files(root)
    present = set(files)
    clash = sorted(d for d in plan.module_moves.values() if d in present)
    if clash:
        print(
            f"relayout: destinations exist already ({', '.join(clash[:5])}): laid out already? refusing to run twice",
            file=sys.stderr,
        )
        return 2
    report: list[str] = []
    for src in sorted(plan.module_moves):
        if src not in present:
            report.append(f"UNPLACED: {src} (named in moves.txt) does not exist")
    plan.module_moves = {a: b for a, b in plan.module_moves.items() if a in present}
    plan.module_moves |= lane_moves(files, plan, root, report)
    # modules in folders the step empties that the moves file does not name: they stay (listed)
    replaced: dict[str, str] = {}  # texts the moves cannot see (a test editing a moved constant's line, ...)
    for f, a, b in plan.replace:
        text = replaced.get(f) or ((root / f).read_text() if f in present else "")
        if a not in text:
            report.append(f"UNPLACED: {f}: the text {a!r} to replace is not there")
        else:
            replaced[f] = text.replace(a, b)
    old = OldTree(root, files, replaced)
    # a root module nobody named: one that imports only the foundation is a foundation file and stays (the import
    # contract's foundation line gains it); any other is unplaced
    foundation = set(FOUNDATION)
    unnamed = [
        f
        for f in files
        if re.fullmatch(r"kimi_k3/\w+\.py", f)
        and f not in plan.module_moves
        and Path(f).stem not in FOUNDATION
        and not any(src == f for src, _, _ in plan.def_moves)
    ]
    for _ in range(len(unnamed) + 1):  # foundation files may import each other
        for f in unnamed:
            deps = {d.split(".")[1] for d in project_imports(old, f) if d.startswith("kimi_k3.")}
            if deps <= foundation:
                foundation.add(Path(f).stem)
    new_foundation = sorted(foundation - FOUNDATION)
    for f in unnamed:
        if Path(f).stem in new_foundation:
            report.append(f"foundation: {f} imports only the foundation: it stays at the root (contract updated)")
        else:
            report.append(f"UNPLACED: {f} is not named in moves.txt: it stays where it is")
    mapping = Mapping(old, plan, {})
    mapping.path_moves = dict(plan.module_moves)
    mapping.mod_moves = {mod_of(a): mod_of(b) for a, b in plan.module_moves.items() if not a.startswith("tests/")}

    # phase 1: rewrite references in every text file (keyed by new path)
    new_texts: dict[str, str] = {}
    changed: set[str] = set()
    for f in files:
        new_path = mapping.path(f)
        if new_path.startswith(SHIPPED):  # its text is shipped into a ConfigMap: a changed byte is a rollout
            if new_path != f:
                new_texts[new_path] = (root / f).read_text()
            continue
        if f in old.texts:
            text = rewrite_python(f, old.texts[f], old.trees[f], mapping, new_path, report)
        elif (Path(f).suffix in TEXT_SUFFIXES or Path(f).name in TEXT_NAMES) and not f.startswith("recipes/"):
            try:
                orig = replaced.get(f) or (root / f).read_text()
            except UnicodeDecodeError:
                continue
            text = rewrite_text(orig, mapping)
            if text == orig and new_path == f and f not in replaced:
                continue
        else:
            continue
        new_texts[new_path] = text
        changed.add(f)
    # phase 2: move definitions
    new_texts = split_modules(new_texts, plan, mapping, report)
    creates = sorted(p for p in new_texts if p not in present and p not in plan.module_moves.values())
    packages = sorted(
        {str(Path(p).parent) for p in list(plan.module_moves.values()) + creates if p.startswith("kimi_k3/")}
        | plan.new_packages
    )
    for pkg in packages:
        init = f"{pkg}/__init__.py"
        if init not in new_texts and init not in present and init not in plan.module_moves.values():
            new_texts[init] = PACKAGE_DOCS.get(pkg, f'"""{pkg}: see docs/architecture.md."""\n')
            creates.append(init)

    if new_foundation:
        pyproject = new_texts.get("pyproject.toml") or (root / "pyproject.toml").read_text()
        line = '"kimi_k3.errors : kimi_k3.data : kimi_k3.flags : (kimi_k3.names)"'
        if line in pyproject:
            extra = "".join(f" : kimi_k3.{n}" for n in new_foundation)
            new_texts["pyproject.toml"] = pyproject.replace(line, line[:-1] + extra + '"')
    readme = new_texts.get("README.md") or (root / "README.md").read_text()
    if "## Where to go next" not in readme:  # the front door's last section: a newcomer's map of the folders
        new_texts["README.md"] = readme.rstrip("\n") + "\n" + (HERE / "where-to-go-next.md").read_text()
    print(
        f"relayout: {len(plan.module_moves)} files move, {sum(len(n) for _, _, n in plan.def_moves)} "
        f"definitions move, {len(creates)} new files, {len(new_texts)} files rewritten"
    )
    for line in report:
        print("  " + line)
    unplaced = [r for r in report if r.startswith("UNPLACED")]
    if not args.apply:
        print(f"relayout: dry run (nothing changed); {len(unplaced)} unplaced item(s); --apply to change the tree")
        return 1 if unplaced else 0
    if unplaced and not args.allow_unplaced:
        print(
            f"relayout: {len(unplaced)} unplaced item(s) (above): nothing changed. Name them in moves.txt, or rerun "
            "with --allow-unplaced to leave them where they are",
            file=sys.stderr,
        )
        return 1
    for src, dst in sorted(plan.module_moves.items()):  # renames; `git add -A` below records them as moves
        (root / dst).parent.mkdir(parents=True, exist_ok=True)
        (root / src).rename(root / dst)
    for path, text in sorted(new_texts.items()):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    subprocess.run(
        [
            "git",
            "add",
            "-A",
            "--",
            *sorted({p.split("/")[0] for p in new_texts} | {p.split("/")[0] for p in plan.module_moves}),
        ],
        cwd=root,
        check=True,
    )
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("laid out by tools/relayout/relayout.py; delete this file only with the step undone\n")
    if not args.no_format:
        ruff = shutil.which("ruff", path=str(root / ".venv" / "bin")) or shutil.which("ruff")
        if ruff is None:
            print("relayout: ruff not found (make venv installs it): format skipped", file=sys.stderr)
        else:
            targets = [
                p
                for p in (
                    "__main__.py",
                    "kimi_k3",
                    "components",
                    "policies",
                    "tests",
                    "tests_aiconfigurator",
                    "tools",
                    "bench",
                )
                if (root / p).exists()
            ]
            # imports sorted and unused ones dropped, formatted, then sorted again (format can regroup a block)
            subprocess.run([ruff, "check", "--fix", "--quiet", *targets], cwd=root)
            subprocess.run([ruff, "format", "--quiet", *targets], cwd=root, check=True)
            subprocess.run([ruff, "check", "--fix", "--quiet", *targets], cwd=root)
    problems = check_expectations(root, plan)
    sys.path.insert(0, str(HERE))
    import imports  # tools/relayout/imports.py

    result = imports.analyse(root)
    for cycle in result["cycles_with_local"]:
        problems.append("import circle: " + " <-> ".join(cycle) + " (name the shared helper in moves.txt)")
    for a, b in result["upward"]:
        problems.append(f"upward import: {a} -> {b}")
    for p in problems:
        print("  EXPECTATION: " + p)
    print(
        f"relayout: done in {time.monotonic() - started:.1f} s; {len(unplaced)} unplaced item(s) left where they "
        f"are, {len(problems)} unmet expectation(s)"
    )
    return 1 if problems else 0


SHIPPED = (
    "kimi_k3/pods/",
)  # kept byte for byte (no rewrite, no format: pyproject.toml excludes them from ruff format)
FOUNDATION = {"__init__", "__main__", "errors", "data", "flags", "names"}
PACKAGE_DOCS = {
    "kimi_k3/pods": '"""Programs that run inside pods or on instances: standard library only (an import contract).\n\n'
    'Each module is shipped as its source (program_path) into a ConfigMap or user data."""\n'
    "from pathlib import Path\n\n\ndef program_path(name: str) -> Path:\n"
    '    """The file of the in-pod program `name` (e.g. "smoke.py"), whose text is shipped."""\n'
    "    return Path(__file__).with_name(name)\n",
}


def check_expectations(root: Path, plan: Plan) -> list[str]:
    sys.path.insert(0, str(HERE))
    import imports  # tools/relayout/imports.py

    problems = []
    mods = imports.project_files(root)
    for a, b in plan.expect_absent:
        ma, mb = mod_of(a), mod_of(b)
        if ma in mods and mb in [t for t, _, _ in imports.imports_of(ma, mods[ma], mods)]:
            problems.append(f"{a} still imports {b}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
