"""`kimi-k3 rehearse STACK --trace FILE` (issue 21): the trace flags are checked while parsed, a trace that is bad,
too large or too long is refused naming the file and the limit before anything starts or is written, and the
flags survive the re-exec into the private network namespace. The replay itself: tests/live/test_trace_rehearse_live.py."""

from __future__ import annotations

import json
import sys

import pytest

from kimi_k3.commands import rehearse as cmd
from kimi_k3.commands.main import main
from kimi_k3.rehearsal import load, processes, reexec


def cli(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out + err


def write_trace(path, n, step_ms=100, isl=600):
    path.write_text(
        "".join(
            json.dumps({"timestamp": i * step_ms, "input_length": isl, "output_length": 4, "hash_ids": [0, i + 1]})
            + "\n"
            for i in range(n)
        )
    )
    return path


@pytest.fixture(autouse=True)
def any_rehearsal_python(monkeypatch):
    # the refusals come before any rehearsal process; the venv's presence is not what is tested
    monkeypatch.setenv(processes.VENV_ENV, sys.executable)


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--trace-window", "5:2", "not a window; allowed: START:END seconds with 0 <= START <= END"),
        ("--trace-window", "abc", "not a window"),
        ("--trace-window", "-1:4", "not a window"),
        ("--trace-window", "1:nan", "not a window"),
        ("--trace-first", "0", "0 is too small; allowed: 1 to 2,000"),
        ("--trace-first", "2001", "2,001 is too large; allowed: 1 to 2,000"),
        ("--trace-speedup", "0", "out of range; allowed: 0.01 to 1000"),
        ("--trace-speedup", "inf", "not a finite number"),
    ],
)
def test_bad_trace_flags_are_refused_while_parsed(flag, value, says, tmp_path, capsys):
    code, text = cli(
        ["rehearse", "gb300", "--out", str(tmp_path / "o"), "--trace", "t.jsonl", f"{flag}={value}"], capsys
    )
    assert code == 2 and says in text and "Traceback" not in text, text
    assert not (tmp_path / "o").exists()


def refused(argv, tmp_path, capsys) -> str:
    out = tmp_path / "out"
    code, text = cli(["rehearse", "gb300", "--out", str(out), "--host-network", *argv], capsys)
    assert code == 2, text
    assert "Traceback" not in text
    assert not out.exists(), "a refused trace created the output directory"
    return text


def test_missing_trace_file_is_named(tmp_path, capsys):
    text = refused(["--trace", str(tmp_path / "nope.jsonl")], tmp_path, capsys)
    assert f"--trace {tmp_path / 'nope.jsonl'}: No such file or directory" in text


def test_trace_over_the_request_limit_is_refused_naming_file_and_limit(tmp_path, capsys):
    big = write_trace(tmp_path / "big.jsonl", load.TRACE_MAX_REQUESTS + 1)
    text = refused(["--trace", str(big)], tmp_path, capsys)
    assert f"--trace {big}: more than 2,000 requests selected; the limit is 2,000" in text
    assert "--trace-first" in text  # says how to take fewer


def test_trace_longer_than_the_time_bound_is_refused(tmp_path, capsys):
    long = write_trace(tmp_path / "long.jsonl", 3, step_ms=1_000_000)  # spans 2,000 s
    text = refused(["--trace", str(long)], tmp_path, capsys)
    assert f"--trace {long}: the 3 selected requests span 2,000 s at --trace-speedup 1; the limit is 1,800 s" in text


def test_bad_trace_line_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": "x", '
        '"output_length": 1}\n'
    )
    text = refused(["--trace", str(bad)], tmp_path, capsys)
    assert f"--trace {bad} line 2: input_length 'x'; allowed: a whole number of tokens >= 1" in text


def test_request_over_the_context_is_refused(tmp_path, capsys):
    huge = write_trace(tmp_path / "huge.jsonl", 2, isl=50_000_000)
    text = refused(["--trace", str(huge)], tmp_path, capsys)
    assert "the request at 0 s has 50,000,000 input + 4 output tokens; the rehearsal's context is" in text


def test_trace_options_without_a_trace_and_trace_with_runs_are_refused(tmp_path, capsys):
    assert "--trace-first: select from a trace; give it with --trace FILE" in refused(
        ["--trace-first", "5"], tmp_path, capsys
    )
    t = write_trace(tmp_path / "t.jsonl", 3)
    assert "a trace replaces the built-in runs" in refused(["--trace", str(t), "--runs", "agentic"], tmp_path, capsys)


def test_window_speedup_and_bounds_of_an_accepted_trace(tmp_path):
    t = write_trace(tmp_path / "t.jsonl", 50, step_ms=1000)  # arrivals 0..49 s
    args = parse(["--trace", str(t), "--trace-window", "10:30", "--trace-first", "5", "--trace-speedup", "4"])
    trace = load.load_trace(args, 10_000, 1536)
    assert [r.timestamp_ms for r in trace.requests] == [10_000, 11_000, 12_000, 13_000, 14_000]
    assert trace.replay_seconds == 1.0  # 4 s of trace at 4x
    assert trace.lines == t.read_text().splitlines(keepends=True)[10:15]


def parse(extra):
    import argparse

    parser = argparse.ArgumentParser()
    cmd.register(parser.add_subparsers())
    return cmd.RehearseOptions.from_values(parser.parse_args(["rehearse", "gb300", *extra]))


def test_trace_flags_survive_the_reexec_into_the_network_namespace(tmp_path):
    args = parse(["--trace", "x.jsonl", "--trace-window", "0.5:90", "--trace-first", "7", "--trace-speedup", "2.5"])
    again = parse(reexec.command_line(args)[1:])
    for name in ("trace", "trace_window", "trace_first", "trace_speedup"):
        assert getattr(again, name) == getattr(args, name), name


def test_trace_argv_is_aiperfs_own_replay():
    argv = cmd.workload.trace_args("/r/trace.jsonl", 2.0)
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["--input-file"] == "/r/trace.jsonl" and pairs["--custom-dataset-type"] == "mooncake_trace"
    assert "--fixed-schedule" in argv and "--fixed-schedule-auto-offset" in argv
    assert pairs["--synthesis-speedup-ratio"] == "2"
    assert "--synthesis-speedup-ratio" not in cmd.workload.trace_args("/r/t.jsonl", 1.0)  # no synthesis at all
