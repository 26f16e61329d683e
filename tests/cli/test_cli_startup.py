"""The CLI's start-up floor: commands import only what they run, and only the console script turns the GC off."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
from conftest import ROOT

PULUMI_SDKS = ("pulumi", "pulumi_aws", "pulumi_kubernetes", "pulumi_policy", "grpc")


def _imported_after(argv: list[str]) -> set[str]:
    code = (
        "import contextlib, io, json, sys\n"
        "from kimi_k3.commands.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main({argv!r})\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.splitlines()[-1]))


@pytest.mark.slow  # three interpreters started from scratch (~12 s)
def test_help_and_plan_import_no_pulumi_sdk():
    for argv in (["--help"], ["plan", "gb300-disagg"], ["check", "--help"]):
        loaded = _imported_after(argv) & set(PULUMI_SDKS)
        assert not loaded, f"kimi-k3 {' '.join(argv)} imported {sorted(loaded)}"


def test_library_main_leaves_the_gc_alone():
    from kimi_k3.commands.main import main

    assert gc.isenabled()
    main(["plan", "gb300-disagg", "--json"])
    assert gc.isenabled(), "main() is what tests and library users call: it must not switch the GC off"


def test_console_script_runs_without_the_cyclic_gc():
    code = (
        "import gc, sys\n"
        "from kimi_k3.commands import main as m\n"
        "seen = []\n"
        "m.main = lambda argv=None: seen.append(gc.isenabled()) or 0\n"
        "m.console()\n"
        "print(seen, gc.isenabled(), gc.get_freeze_count() > 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["[False]", "False", "True"], proc.stdout + proc.stderr
