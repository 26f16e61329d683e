"""Bad flags and names, through the CLI as a user types them (issue 25, classes 5, 6 and 8): every one is refused
before anything starts or is written, with one line naming the flag (or stack) and the value and saying what is
allowed; exit non-zero; no traceback. For `rehearse`, "nothing started" is checked by making every way the command
starts a process (subprocess.Popen / subprocess.run, os.exec*) fail the test if it is reached."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, project_copy

from kimi_k3.commands.main import main

pytestmark = pytest.mark.slow  # beyond the `make test` budget: full-disk and signal cases as real processes


class Started(AssertionError):
    """The command started a process although its input was bad."""


@pytest.fixture
def no_processes(monkeypatch):
    """Any process start fails the test (rehearse starts everything through subprocess and os.execvp)."""
    started: list[list[str]] = []

    def refuse(*args, **kwargs):
        started.append([str(a) for a in (args[0] if args and isinstance(args[0], (list, tuple)) else args)])
        raise Started(f"a process was started: {started[-1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    for name in ("execvp", "execv", "execve", "execvpe"):
        monkeypatch.setattr(os, name, refuse)
    return started


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out + err


def _file(path: Path) -> Path:
    path.write_text("")
    return path


def tree(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def assert_refused(code, text: str, expect: list[str]) -> None:
    assert code not in (0, None), f"exit status {code}: {text}"
    assert "Traceback" not in text, text
    assert len([line for line in text.splitlines() if line.strip()]) == 1, f"not one line: {text!r}"
    for part in expect:
        assert part in text, f"{part!r} not in {text!r}"


# ----------------------------------------------------------------------------------------- rehearse (class 5)
REHEARSE_CASES = {
    "turns 0 (was ZeroDivisionError after start)": (["--turns", "0"], ["--turns", "0", "allowed: 1 or more"]),
    "turns negative": (["--turns", "-2"], ["--turns", "-2", "allowed: 1 or more"]),
    "concurrency 0": (["--concurrency", "0"], ["--concurrency", "0", "allowed: 1 or more"]),
    "concurrency negative": (["--concurrency", "-4"], ["--concurrency", "-4", "allowed: 1 or more"]),
    "requests 0": (["--requests", "0"], ["--requests", "0", "allowed: 1 or more"]),
    "requests negative": (["--requests", "-3"], ["--requests", "-3", "allowed: 1 or more"]),
    "requests not whole": (["--requests", "1.5"], ["--requests", "'1.5'", "not a whole number"]),
    "duration 0": (["--duration", "0"], ["--duration", "0", "allowed: a number > 0"]),
    "duration negative": (["--duration", "-10"], ["--duration", "-10", "allowed: a number > 0"]),
    "duration nan": (["--duration", "nan"], ["--duration", "'nan'", "not a finite number"]),
    "duration inf": (["--duration", "inf"], ["--duration", "'inf'", "not a finite number"]),
    "prompt tokens 0": (["--system-prompt-tokens", "0"], ["--system-prompt-tokens", "0", "allowed: 1 or more"]),
    "prompt tokens negative": (["--system-prompt-tokens", "-5"], ["--system-prompt-tokens", "-5", "1 or more"]),
    "speedup 0 (exited 0)": (["--speedup-ratio", "0"], ["--speedup-ratio", "0", "allowed: a number > 0"]),
    "speedup negative": (["--speedup-ratio", "-1"], ["--speedup-ratio", "-1", "allowed: a number > 0"]),
    "speedup nan": (["--speedup-ratio", "nan"], ["--speedup-ratio", "'nan'", "not a finite number"]),
    "ready timeout 0": (["--ready-timeout", "0"], ["--ready-timeout", "0", "allowed: a number > 0"]),
    "ready timeout inf": (["--ready-timeout", "inf"], ["--ready-timeout", "'inf'", "not a finite number"]),
    "runs empty": (["--runs", ""], ["--runs", "allowed: agentic, synthetic"]),
    "runs repeated": (["--runs", "agentic,agentic"], ["--runs", "'agentic,agentic'", "allowed: agentic, synthetic"]),
    "runs unknown": (["--runs", "agentic,soak"], ["--runs", "'soak'", "allowed: agentic, synthetic"]),
}


@pytest.mark.parametrize("flags, expect", REHEARSE_CASES.values(), ids=REHEARSE_CASES.keys())
def test_rehearse_bad_flag_refused_before_anything_starts(flags, expect, tmp_path, capsys, monkeypatch, no_processes):
    monkeypatch.chdir(ROOT)
    python = tmp_path / "python"
    python.write_text("")  # past the venv check: the flag itself must be what stops it
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    before = tree(tmp_path)
    code, text = run_cli(["rehearse", "gb200", "--out", str(tmp_path / "out"), *flags], capsys)
    assert_refused(code, text, expect)
    assert no_processes == [] and tree(tmp_path) == before


@pytest.mark.parametrize(
    "make_out, expect",
    [
        (lambda d: _file(d / "a-file"), ["--out", "a-file", "exists and is not a directory"]),
        (lambda d: _file(d / "a-file") / "out", ["--out", "a-file", "is a file"]),
        (lambda d: Path("/proc/kimi-k3-rehearse-out"), ["--out /proc/kimi-k3-rehearse-out", "cannot be written"]),
    ],
    ids=["out is a file", "out under a file", "out where nothing can be made"],
)
def test_rehearse_out_that_cannot_be_written(make_out, expect, tmp_path, capsys, monkeypatch, no_processes):
    """Was an OSError traceback once the graph was up."""
    monkeypatch.chdir(ROOT)
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    out = make_out(tmp_path)
    before = tree(tmp_path)
    code, text = run_cli(["rehearse", "gb200", "--out", str(out)], capsys)
    assert_refused(code, text, expect)
    assert no_processes == [] and tree(tmp_path) == before


# --------------------------------------------------------------------------------------------- plan (class 5)
PLAN_CASES = {
    "request rate inf (OverflowError)": (["gb300", "--request-rate", "inf"], ["--request-rate", "'inf'", "finite"]),
    "request rate nan": (["gb300", "--request-rate", "nan"], ["--request-rate", "'nan'", "finite"]),
    "request rate 0": (["gb300", "--request-rate", "0"], ["--request-rate", "0", "allowed: a number > 0"]),
    "request rate negative": (["gb300", "--request-rate", "-1"], ["--request-rate", "-1", "a number > 0"]),
    "top negative (sliced from the end)": (
        ["--sla", "ttft_ms=3000,tpot_ms=50", "--top", "-2"],
        ["--top", "-2", "allowed: 1 or more"],
    ),
    "top 0": (["--sla", "ttft_ms=3000,tpot_ms=50", "--top", "0"], ["--top", "0", "allowed: 1 or more"]),
    "isl 0": (["gb300", "--isl", "0"], ["--isl", "0", "allowed: 1 to 1,048,576"]),
    "isl past the context": (["gb300", "--isl", "2000000"], ["--isl", "2,000,000", "allowed: 1 to 1,048,576"]),
    "isl + osl past the context": (["gb300", "--isl", "1048576"], ["--isl 1,048,576", "--osl", "1,048,576"]),
    "osl 0": (["gb300", "--osl", "0"], ["--osl", "0", "allowed: 1 to 1,048,576"]),
    "osl negative": (["gb300", "--osl", "-1"], ["--osl", "-1", "allowed: 1 to 1,048,576"]),
    "concurrency 0": (["gb300", "--concurrency", "0"], ["--concurrency", "0", "allowed: 1 or more"]),
    "concurrency negative": (["gb300", "--concurrency", "-8"], ["--concurrency", "-8", "allowed: 1 or more"]),
    "sla nan ttft": (["--sla", "ttft_ms=nan,tpot_ms=50"], ["--sla", "ttft_ms", "'nan'", "finite number > 0"]),
    "sla inf ttft": (["--sla", "ttft_ms=inf,tpot_ms=50"], ["--sla", "ttft_ms", "'inf'", "finite number > 0"]),
    "sla nan tpot": (["--sla", "ttft_ms=3000,tpot_ms=nan"], ["--sla", "tpot_ms", "'nan'", "finite number > 0"]),
    "sla key twice": (["--sla", "ttft_ms=1,ttft_ms=2,tpot_ms=3"], ["--sla", "ttft_ms is given twice"]),
    "kv budget beyond the GPU (stack)": (
        ["gb300", "--kv-budget-gib", "100000"],
        ["--kv-budget-gib 100000", "GiB per GPU", "allowed: a number > 0 and <="],
    ),
    "kv budget beyond the GPU (ad hoc)": (
        ["--gpu", "gb300", "--tp", "8", "--kv-budget-gib", "500"],
        ["--kv-budget-gib 500", "GiB per GPU", "allowed"],
    ),
    "max model len past the context": (
        ["--gpu", "gb300", "--tp", "8", "--max-model-len", "2097152"],
        ["--max-model-len", "2,097,152", "allowed: 1 to 1,048,576"],
    ),
    "max model len 0": (["--gpu", "gb300", "--tp", "8", "--max-model-len", "0"], ["--max-model-len", "0", "1 to"]),
    "utilization nan": (
        ["--gpu", "gb300", "--tp", "8", "--gpu-memory-utilization", "nan"],
        ["--gpu-memory-utilization", "'nan'", "not a finite number"],
    ),
    "spec tokens negative": (
        ["--gpu", "gb300", "--tp", "8", "--spec-tokens", "-1"],
        ["--spec-tokens", "-1", "0 or more"],
    ),
    "dcp 0": (["--gpu", "gb300", "--tp", "8", "--dcp", "0"], ["--dcp", "0", "allowed: 1 or more"]),
    "ad hoc tp with a stack (ignored)": (["gb300", "--tp", "16"], ["--tp 16", "ad hoc role", "Pulumi.gb300.yaml"]),
    "ad hoc dcp with a stack (ignored)": (["gb300-disagg", "--dcp", "2"], ["--dcp 2", "ad hoc role"]),
    "price with a stack (ignored)": (["gb300", "--instance-hour-usd", "3"], ["--instance-hour-usd 3", "ad hoc role"]),
    "price date not a date": (
        [
            "--gpu",
            "gb300",
            "--tp",
            "8",
            "--instance-hour-usd",
            "3",
            "--price-source",
            "x",
            "--price-as-of",
            "yesterday",
        ],
        ["--price-as-of", "'yesterday'", "YYYY-MM"],
    ),
    "price date month 13": (
        ["--gpu", "gb300", "--tp", "8", "--instance-hour-usd", "3", "--price-source", "x", "--price-as-of", "2026-13"],
        ["--price-as-of", "'2026-13'", "YYYY-MM or YYYY-MM-DD"],
    ),
    "price source empty": (
        ["--gpu", "gb300", "--tp", "8", "--instance-hour-usd", "3", "--price-source", " ", "--price-as-of", "2026-10"],
        ["--price-source", "' '", "is empty"],
    ),
}


@pytest.mark.parametrize("flags, expect", PLAN_CASES.values(), ids=PLAN_CASES.keys())
def test_plan_bad_flag_refused_before_any_output(flags, expect, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, text = run_cli(["plan", *flags], capsys)
    assert_refused(code, text, expect)


@pytest.mark.parametrize(
    "name, expect",
    [
        ("profile.txt", ["--mocker-profile", "profile.txt", "allowed: a file name ending in .npz"]),
        ("missing/profile.npz", ["--mocker-profile", "does not exist"]),
    ],
)
def test_plan_mocker_profile_path_checked_before_anything(name, expect, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = tree(tmp_path)
    code, text = run_cli(["plan", "gb300", "--mocker-profile", str(tmp_path / name)], capsys)
    assert_refused(code, text, expect)
    assert tree(tmp_path) == before


# ------------------------------------------------------------------------------------- render names (class 6)
@pytest.mark.parametrize(
    "stacks, expect",
    [
        (["gb300", "gb30"], ["no stack 'gb30'", "did you mean"]),
        (["gb30", "gb300"], ["no stack 'gb30'"]),
        (["gb300", "gb300-disagg", "gb300;x"], ["'gb300;x'", "allowed: 1 to 100 letters, digits"]),
        (["gb200", "a b"], ["'a b'", "not one Pulumi accepts"]),
    ],
)
def test_render_checks_every_name_before_writing_any(stacks, expect, tmp_path, capsys, monkeypatch):
    """`render gb300 gb30` wrote build/gb300/ before refusing gb30."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "build"
    code, text = run_cli(["render", *stacks, "--out", str(out), "--no-critical-path"], capsys)
    assert_refused(code, text, expect)
    assert not out.exists(), tree(out)


@pytest.mark.parametrize("name", ["has space", "semi;colon", "x" * 101, "at@sign"])
def test_render_refuses_a_stack_file_pulumi_would_refuse(name, tmp_path, capsys, monkeypatch):
    """A stack file whose name Pulumi refuses (pulumi/pulumi validateStackName) is not rendered either."""
    proj = project_copy(tmp_path / "proj")
    (proj / f"Pulumi.{name}.yaml").write_text((ROOT / "Pulumi.gb300.yaml").read_text())
    monkeypatch.chdir(proj)
    code, text = run_cli(["render", name, "--out", str(tmp_path / "out"), "--no-critical-path"], capsys)
    assert_refused(code, text, [repr(name[:120]), "not one Pulumi accepts", "allowed: 1 to 100 letters"])
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------- a full disk leaves nothing (class 6)
def _small_tmpfs_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k none /mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


def on_full_disk(
    tmp_path: Path, size: str, argv: list[str], seed: str = ""
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `kimi-k3 ARGV` with DISK (in argv) on a tmpfs of `size` in a private mount namespace (after the shell
    command `seed` there); what it left, with each file's first line."""
    disk = tmp_path / "disk"
    disk.mkdir()
    args = " ".join(f"'{a}'" for a in argv)
    script = (
        f"mount -t tmpfs -o size={size} none '{disk}' && {seed or 'true'} && cd '{ROOT}' && "
        f"'{sys.executable}' -m kimi_k3 {args}; code=$?; "
        f'for f in $(find \'{disk}\' -mindepth 1 | sort); do echo "$f $(head -c 40 "$f" 2>/dev/null)"; done; '
        "exit $code"
    )
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script.replace("DISK", str(disk))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    left = [line for line in proc.stdout.splitlines() if line.startswith(str(disk))]
    return proc, left


needs_tmpfs = pytest.mark.skipif(
    not _small_tmpfs_works(),
    reason="cannot mount a small tmpfs in a user+mount namespace here (unshare --user --map-root-user --mount)",
)


@needs_tmpfs
def test_render_on_a_full_disk_leaves_no_partial_manifests(tmp_path):
    proc, left = on_full_disk(tmp_path, "32k", ["render", "gb300", "--out", "DISK/out", "--no-critical-path"])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "--out" in proc.stderr and "No space left" in proc.stderr, proc.stderr
    assert left == [], f"left behind on the full disk: {left}"


@needs_tmpfs
def test_plot_on_a_full_disk_keeps_the_previous_png(tmp_path):
    """The previous plot stays whole until a new one is complete (it was truncated, then the write failed)."""
    disk = tmp_path / "disk"
    proc, left = on_full_disk(
        tmp_path,
        "16k",
        ["plan", "gb300", "--plot", "DISK/plan.png"],
        seed=f"printf 'previous plot' > '{disk}/plan.png'",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "--plot" in proc.stderr and "No space left" in proc.stderr, proc.stderr
    assert left == [f"{disk}/plan.png previous plot"], f"on the full disk: {left}"


# ------------------------------------------------------------------------------ make variables (class 6)
@pytest.mark.parametrize(
    "value",
    ["gb300;touch INJECTED", "gb300 gb200", "$(shell touch INJECTED)", "gb300' ; touch INJECTED ; '", "", "gb999"],
)
@pytest.mark.parametrize("target", ["plan", "render", "rehearse", "stack"])
def test_make_refuses_a_stack_that_is_not_one(value, target, tmp_path):
    """`make plan 'STACK=gb300;touch x'` ran `touch x`: STACK must name a stack file, checked before any recipe."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for f in ROOT.glob("Pulumi.*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    proc = subprocess.run(
        ["make", "-n", target, f"STACK={value}"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0, proc.stdout
    assert (
        "is not a stack of this project" in proc.stderr
        and "allowed: " + " ".join(sorted(f.name[7:-5] for f in ROOT.glob("Pulumi.*.yaml"))) in proc.stderr
    ), proc.stderr
    assert "INJECTED" not in proc.stdout and not (tmp_path / "INJECTED").exists()


def test_make_quotes_stack_where_a_shell_sees_it():
    """Belt and braces beside the check: every recipe line that hands $(STACK) to a command quotes it."""
    lines = [
        line
        for line in (ROOT / "Makefile").read_text().splitlines()
        if line.startswith("\t") and "$(STACK)" in line and "echo" not in line
    ]
    assert lines, "no recipe uses $(STACK)?"
    assert [line for line in lines if "$(STACK)" in line.replace("'$(STACK)'", "")] == []


# ------------------------------------------------------------------------------------ the first hour (class 8)
@pytest.mark.parametrize(
    "flag, name", [("--plot", "plan.png"), ("--pareto", "pareto.png"), ("--mocker-profile", "profile.npz")]
)
def test_plan_says_where_it_wrote(flag, name, tmp_path, capsys, monkeypatch):
    """--plot and --pareto (and `make pareto`, which sends stdout to /dev/null) never said where the file went."""
    monkeypatch.chdir(ROOT)
    code = main(["plan", "gb300", flag, str(tmp_path / name), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"wrote {tmp_path / name}" in err and (tmp_path / name).stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "a temporary file of the atomic write was left"


@pytest.mark.parametrize("stack", ["gb200", "gb200-disagg", "gb300", "gb300-disagg"])
def test_plan_table_has_one_memory_unit_and_no_contradicting_context_row(stack, capsys, monkeypatch):
    """`plan` printed weights in GB beside pools in GiB, and its 1,024k row (ISL 1,048,576 + OSL 1,024, a request
    over the context) said OOM while the `fits 1,048,576 tokens` row said yes."""
    import re

    monkeypatch.chdir(ROOT)
    assert main(["plan", stack]) == 0
    text = capsys.readouterr().out
    table = text.split("\nterms:")[0]
    assert not re.search(r"\d GB\b", table), [line for line in table.splitlines() if re.search(r"\d GB\b", line)]
    assert re.search(r"weights per GPU +[\d.]+ GiB", table)
    row = next(line for line in table.splitlines() if line.strip().startswith("1,024k"))
    assert "over the model's 1,048,576-token context" in row and "OOM" not in row, row


def test_sla_table_numbering_says_what_it_leaves_out(capsys, monkeypatch):
    import re

    monkeypatch.chdir(ROOT)
    main(["plan", "--sla", "ttft_ms=5000,tpot_ms=60", "--top", "3"])
    lines = capsys.readouterr().out.splitlines()
    ranked = [
        (i, int(m.group(1)), m.group(2).strip())
        for i, line in enumerate(lines)
        if (m := re.match(r"\s+(\d+)  (.{38})", line))
    ]
    assert [r for _, r, _ in ranked][:3] == [1, 2, 3]
    for (i, a, _), (j, b, _) in zip(ranked, ranked[1:]):
        if b != a + 1:  # a gap in the ranks is announced before it
            assert any("not listed" in line for line in lines[:j]), lines[i : j + 1]
    marked = [line.rsplit("<- ", 1)[1] for line in lines if "<- " in line and re.match(r"\s+\d+  ", line)]
    assert len(marked) == len(set(marked)), f"a stack's layout listed twice: {marked}"


def test_rehearsal_console_says_what_the_report_says():
    """The console printed TTFT to a thousandth of a ms and the hit rate as a fraction; report.md: 0.1 ms, %."""
    from kimi_k3.rehearsal import report as rehearsal_report

    report = {
        "stack": "gb300",
        "ready_seconds": 12.345,
        "smoke": {"passed": True, "checks": {}},
        "failure": None,
        "kv_hit_rate": 0.92345,
        "load": {
            "requests": 32,
            "ttft_ms": {"p50": 440.123, "p90": 612.987, "p99": 700.5},
            "itl_ms": {"p50": 9.876},
            "output_tokens_per_second": 321.456,
        },
    }
    said = []
    rehearsal_report.summary(report, Path("/x"), said.append)
    assert "TTFT p50/p90/p99 440.1/613.0/700.5 ms" in said[0] and "ITL p50 9.9 ms" in said[0], said
    assert "KV hit rate 92.3%" in said[0] and "0.92" not in said[0], said
    md = rehearsal_report.render_markdown(
        {
            **report,
            "runs": {},
            "workers": [],
            "roles": {},
            "worker_requests": {},
            "block_size": 16,
            "max_model_len": 1024,
            "smoke_failures": {},
        }
    )
    assert "92.3%" in md


def fake_python(d: Path, pip_lines: int, pip_fails: bool = False) -> Path:
    """A `python` whose `-m venv DIR` makes a DIR/bin/pip printing `pip_lines` lines as pip does, and whose
    python answers the import check."""
    script = d / "fake-python"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/pip" <<'PIP'
#!/bin/sh
i=0; while [ $i -lt {pip_lines} ]; do echo "Collecting pkg$i"; echo "  Downloading pkg$i.whl (1 MB)"; echo "Requirement already satisfied: x$i"; i=$((i+1)); done
touch "$(dirname "$0")/aiperf"
{'echo "ERROR: No matching distribution found for ai-dynamo" >&2; exit 1' if pip_fails else 'echo "Successfully installed pkg0"'}
PIP
  chmod +x "$3/bin/pip"
  cp "$0" "$3/bin/python"
  exit 0
fi
[ -x "$(dirname "$0")/pip" ] && [ -e "$(dirname "$0")/aiperf" ] && {"exit 1" if pip_fails else "exit 0"}
exit 1
""")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("fails", [False, True], ids=["pip succeeds", "pip fails"])
def test_rehearse_venv_output_is_filtered_with_an_estimate(fails, tmp_path):
    """`.venv-rehearse` printed ~310 lines of raw pip output with no time estimate; now as .venv's: one line per
    package, an estimate first, the whole log kept, and the venv removed if pip fails."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in (
        "Makefile",
        "requirements-rehearse.txt",
        "constraints-rehearse.txt",
        *[f.name for f in ROOT.glob("Pulumi.*.yaml")],
    ):
        shutil.copy(ROOT / name, tmp_path / name)
    python = fake_python(tmp_path, 100, pip_fails=fails)
    proc = subprocess.run(
        ["make", "--no-print-directory", "rehearse-venv", f"PYTHON={python}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = (proc.stdout + proc.stderr).splitlines()
    assert "minutes" in lines[0] and "~1.5 GB" in lines[0], lines[0]
    assert len(lines) <= 2 * 100 + 5, f"{len(lines)} lines: the raw pip output is not filtered"
    assert not any(line.startswith(("  Downloading", "Requirement already")) for line in lines)
    if fails:
        assert proc.returncode != 0 and "pip failed" in proc.stdout and not (tmp_path / ".venv-rehearse").exists()
        assert (tmp_path / ".venv-rehearse.pip.log").read_text().count("Collecting") == 100
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (tmp_path / ".venv-rehearse" / "pip.log").read_text().count("Collecting") == 200  # both installs


@pytest.mark.parametrize("command", ["rehearse", "plan"])
@pytest.mark.parametrize("name", ["gb300;touch x", "a b"])
def test_stack_name_pulumi_refuses_is_refused_by_every_command(command, name, tmp_path, capsys, monkeypatch, request):
    proj = project_copy(tmp_path / "proj")
    no_processes = request.getfixturevalue("no_processes")  # from here on (the copy itself runs git)
    (proj / f"Pulumi.{name}.yaml").write_text((ROOT / "Pulumi.gb300.yaml").read_text())
    monkeypatch.chdir(proj)
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    before = tree(tmp_path)
    code, text = run_cli([command, name] + (["--out", str(tmp_path / "out")] if command == "rehearse" else []), capsys)
    assert_refused(code, text, [repr(name), "not one Pulumi accepts"])
    assert no_processes == [] and tree(tmp_path) == before
