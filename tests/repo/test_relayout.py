"""tools/relayout/relayout.py on a small git tree: modules move, a constant moves between modules, every kind of
reference follows (from/import/function-local/relative imports, module.attr, setattr patches, `python -m`, paths),
the result runs, and a second run is refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
while not (ROOT / "pyproject.toml").exists() and ROOT != ROOT.parent:  # the same file from a lane folder
    ROOT = ROOT.parent
RELAYOUT = ROOT / "tools" / "relayout" / "relayout.py"

FILES = {
    "README.md": "# demo\n",
    "Makefile": "run:\n\tpython -m kimi_k3.big\n",
    "kimi_k3/__init__.py": "",
    "kimi_k3/big.py": '''
        """Big."""
        from pathlib import Path

        LIMIT = 256  # the recipes' max sequences
        SCRIPT = Path(__file__).with_name("prog.py")


        def helper() -> int:
            return LIMIT + 1


        def answer() -> int:
            return helper() * 2
        ''',
    "kimi_k3/prog.py": "print('shipped')\n",
    "kimi_k3/user.py": """
        from kimi_k3 import big
        from kimi_k3.big import LIMIT, answer


        def run():
            from .big import helper  # kimi_k3/big.py
            return big.LIMIT, LIMIT, helper(), answer(), big.SCRIPT.read_text(), "kimi_k3.big.helper"
        """,
    "tests/test_x.py": """
        from kimi_k3 import big


        def test_patch(monkeypatch):
            monkeypatch.setattr(big, "LIMIT", 1)
        """,
}
MOVES = """\
kimi_k3/big.py moves to kimi_k3/core/big.py
kimi_k3/prog.py moves to kimi_k3/pods/prog.py
from kimi_k3/big.py to kimi_k3/names.py: LIMIT
kimi_k3/absent.py moves to kimi_k3/core/absent.py
"""


def tree(tmp_path: Path) -> Path:
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    (tmp_path / "moves.txt").write_text(MOVES)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "t"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    return tmp_path


def relayout(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RELAYOUT), "--root", str(root), "--moves", str(root / "moves.txt"), "--no-format", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_step_moves_rewrites_runs_and_refuses_a_second_run(tmp_path):
    root = tree(tmp_path)
    dry = relayout(root)
    assert dry.returncode == 1 and "dry run (nothing changed); 2 unplaced item(s)" in dry.stdout
    assert "UNPLACED: kimi_k3/user.py is not named in moves.txt: it stays where it is" in dry.stdout
    assert not (root / "kimi_k3" / "core").exists()
    refused = relayout(root, "--apply")  # an unplaced item stops the step before it changes anything
    assert (
        refused.returncode == 1 and "UNPLACED: kimi_k3/absent.py (named in moves.txt) does not exist" in refused.stdout
    )
    assert "nothing changed" in refused.stderr and (root / "kimi_k3" / "big.py").exists()
    out = relayout(root, "--apply", "--allow-unplaced")
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (root / "kimi_k3" / "big.py").exists() and (root / "kimi_k3" / "core" / "big.py").exists()
    assert "LIMIT = 256" in (root / "kimi_k3" / "names.py").read_text()
    assert "LIMIT =" not in (root / "kimi_k3" / "core" / "big.py").read_text()
    assert (root / "Makefile").read_text() == "run:\n\tpython -m kimi_k3.core.big\n"
    user = (root / "kimi_k3" / "user.py").read_text()
    assert "kimi_k3/core/big.py" in user and '"kimi_k3.core.big.helper"' in user
    run = subprocess.run(
        [sys.executable, "-c", "import kimi_k3.user as u; print(u.run())"],
        cwd=root,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "(256, 256, 257, 514, \"print('shipped')\\n\", 'kimi_k3.core.big.helper')"
    # the rest of big.py (helper) reads LIMIT through its own import: the patch stays on that binding, and says so
    test = (root / "tests" / "unit" / "test_x.py").read_text()
    assert "from kimi_k3.core import big\n" in test and 'monkeypatch.setattr(big, "LIMIT", 1)' in test
    assert "check: tests/test_x.py:5: patches 'LIMIT' in kimi_k3.core.big (read there)" in out.stdout
    assert "from kimi_k3.names import LIMIT" in (root / "kimi_k3" / "core" / "big.py").read_text()
    again = relayout(root, "--apply")
    assert again.returncode == 2 and "refusing to run twice" in again.stderr
