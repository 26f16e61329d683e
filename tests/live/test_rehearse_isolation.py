"""Rehearsal runs are isolated, and a failed or interrupted run never reports a previous run's results (issue 25,
class 7): one run per output directory (a second is refused, naming the holder, before it starts anything), each
run's own discovery directory, a previous run's report, plots and AIPerf exports removed at start, the report
written whole, and an interrupted run (also under a pipe whose reader is gone) reports what it measured.

The live tests (`-m rehearse`) run the real frontend, mockers and AIPerf (.venv-rehearse), as
tests/live/test_rehearse_live.py does."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, ReferencePath

from kimi_k3.commands.main import main

PYTHON = Path(os.environ.get("KIMI_K3_REHEARSE_PYTHON", ROOT / ".venv-rehearse" / "bin" / "python"))
live = pytest.mark.rehearse
STALE_PNG = b"\x89PNG a previous run's plot"


STALE_EXPORT = (
    json.dumps({"metrics": {"input_sequence_length": {"value": 100}, "time_to_first_token": {"value": 5}}}) + "\n"
)


def seed_previous_run(out: Path) -> None:
    """What a previous, passing run left in OUT."""
    (out / "aiperf" / "agentic").mkdir(parents=True)
    (out / "aiperf" / "agentic" / "profile_export.jsonl").write_text(STALE_EXPORT)
    (out / "discovery" / "v1").mkdir(parents=True)
    (out / "discovery" / "v1" / "old-worker").write_text("{}")
    (out / "report.json").write_text(json.dumps({"failure": None, "smoke": {"passed": True}, "stale": True}))
    (out / "report.md").write_text("# Rehearsal of `gb200`: passed\n")
    for png in ("latency.png", "workers.png", "agentic_ttft.png"):
        (out / png).write_bytes(STALE_PNG)


def assert_no_previous_results(out: Path) -> None:
    assert "stale" not in json.loads((out / "report.json").read_text())
    assert not (out / "discovery/v1/old-worker").exists(), (
        "discovery/v1/old-worker: a previous run's result is still there"
    )
    export = out / "aiperf/agentic/profile_export.jsonl"  # gone, or written by this run's AIPerf (it exports on SIGINT)
    assert not export.exists() or export.read_text() != STALE_EXPORT, (
        f"{export}: a previous run's result is still there"
    )
    for png in ("latency.png", "workers.png", "agentic_ttft.png"):  # gone, or drawn by this run
        assert not (out / png).exists() or (out / png).read_bytes() != STALE_PNG, f"{png} is the previous run's"
        assert ((out / png).exists()) == (f"![{png}]({png})" in (out / "report.md").read_text()), png


def cli(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out + err


# --------------------------------------------------------------------------------------------- offline
def test_second_rehearsal_into_the_same_directory_is_refused_naming_the_holder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    out = tmp_path / "out"
    out.mkdir()
    holder = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)  # a run in progress holds the lock
    fcntl.flock(holder, fcntl.LOCK_EX)
    os.write(holder, b"pid 4242, started 2026-12-01 20:00:00")
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or pytest.fail("started"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: started.append(a) or pytest.fail("started"))
    monkeypatch.setattr(os, "execvp", lambda *a: started.append(a) or pytest.fail("exec"))
    try:
        code, text = cli(["rehearse", "gb200", "--out", str(out)], capsys)
    finally:
        os.close(holder)
    assert code == 2 and "Traceback" not in text, text
    assert f"--out {out}: another rehearsal is running there (pid 4242" in text, text
    assert started == [] and sorted(p.name for p in out.iterdir()) == [".lock"]


def test_run_that_fails_to_start_reports_itself_not_the_previous_run(tmp_path, capsys, monkeypatch):
    """A broken rehearsal venv (its python cannot be executed): a FAILED report of this run, with nothing of the
    previous one left (before: a PermissionError traceback, and the previous 'passed' report and plots stayed)."""
    monkeypatch.chdir(ROOT)
    python = tmp_path / "python"
    python.write_text("")  # exists, is not executable
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    out = tmp_path / "out"
    seed_previous_run(out)
    code, text = cli(["rehearse", "gb200", "--out", str(out), "--host-network"], capsys)
    assert code == 1 and "Traceback" not in text, text
    report = json.loads((out / "report.json").read_text())
    assert report["failure"].startswith("could not start a process") and str(python) in report["failure"]
    assert_no_previous_results(out)
    assert (out / "report.md").read_text().startswith("# Rehearsal of `gb200`: FAILED")
    assert not [p for p in out.rglob(".*.tmp*")], "a temporary file of an atomic write was left"


def test_each_run_has_its_own_discovery_directory(tmp_path, capsys, monkeypatch):
    """Two runs of one stack never share the directory their workers register in (they did: OUT/discovery, and
    the second run counted "3/2 workers registered")."""
    monkeypatch.chdir(ROOT)
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    dirs = []
    for name in ("a", "b"):
        cli(["rehearse", "gb200", "--out", str(tmp_path / name), "--host-network"], capsys)
        report = json.loads((tmp_path / name / "report.json").read_text())
        dirs.append(Path(report["discovery_dir"]))
        assert dirs[-1].parent == Path(report["scratch_dir"])  # made per run, removed with it
    assert dirs[0] != dirs[1]


def test_incomplete_shared_reference_skips_naming_the_missing_file(tmp_path):
    """A test reading a file an incomplete ../shared lacks is skipped with the path, not failed."""
    ref = ReferencePath(tmp_path)
    with pytest.raises(pytest.skip.Exception, match="incomplete: .*aws/values.yaml is missing"):
        (ref / "aws" / "values.yaml").read_text()
    with pytest.raises(pytest.skip.Exception, match="dynamo/crds is missing"):
        list((ref / "dynamo" / "crds").glob("*.yaml"))
    (tmp_path / "present.yaml").write_text("a: 1\n")
    assert (ref / "present.yaml").read_text() == "a: 1\n"


# ------------------------------------------------------------------------------------------------ live
def rehearse_argv(out: Path, stack: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "kimi_k3", "rehearse", stack, "--out", str(out), *args]


@pytest.fixture
def rehearsal_venv():
    if not PYTHON.is_file():
        pytest.fail(f"{PYTHON} missing: run `make test-rehearse` (it builds .venv-rehearse first)")


@live
def test_two_rehearsals_of_one_stack_at_once(tmp_path, rehearsal_venv):
    """Two concurrent runs of the same stack (two --out): each sees exactly its own workers and passes; a third
    into a directory in use is refused before it starts anything."""
    outs = [tmp_path / "one", tmp_path / "two"]
    procs = [
        subprocess.Popen(
            rehearse_argv(o, "gb200-disagg", "--no-load"),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for o in outs
    ]
    try:
        deadline = time.monotonic() + 120
        while not (outs[0] / ".lock").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        third = subprocess.run(
            rehearse_argv(outs[0], "gb200-disagg", "--no-load"), cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        results = [p.communicate(timeout=500)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert third.returncode == 2, third.stdout + third.stderr
    assert "another rehearsal is running there (pid" in third.stdout and "Traceback" not in third.stdout
    for out, proc, text in zip(outs, procs, results):
        assert proc.returncode == 0, text[-3000:]
        report = json.loads((out / "report.json").read_text())
        assert report["failure"] is None
        assert [w["registered"] for w in report["workers"]] == [w["replicas"] for w in report["workers"]]


@live
@pytest.mark.parametrize("reader", ["terminal", "pipe closed"])
def test_interrupted_run_reports_what_it_measured(reader, tmp_path, rehearsal_venv):
    """Ctrl-C during the load: an 'interrupted' report with the requests the workers served (it said 0 prefill
    requests), none of the previous run's plots; also when stdout is a pipe whose reader has gone (`| tee` killed
    by the same Ctrl-C: the previous 'passed' report.json stayed)."""
    out = tmp_path / "out"
    seed_previous_run(out)
    proc = subprocess.Popen(
        rehearse_argv(out, "gb300-disagg", "--requests", "400", "--duration", "300", "--runs", "agentic"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "AIPerf agentic" in line:
                break
        time.sleep(15)  # requests served through both roles
        if reader == "pipe closed":
            proc.stdout.close()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, "".join(seen)
    report = json.loads((out / "report.json").read_text())
    assert report["failure"] == "interrupted"
    assert report["prefill_decode_requests"]["prefill"] > 0 and report["prefill_decode_requests"]["decode"] > 0, report[
        "worker_requests"
    ]
    assert_no_previous_results(out)
    assert (out / "report.md").read_text().startswith("# Rehearsal of `gb300-disagg`: FAILED")
