"""`kimi-k3 rehearse` hands the rehearsal one frozen RehearseOptions built from its command line: every flag the
parser defines is a field of it (a flag missing there would be dropped silently before the run) and survives the
re-exec into the private network namespace."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from kimi_k3.commands import rehearse as cmd
from kimi_k3.rehearsal import reexec
from kimi_k3.rehearsal.options import RehearseOptions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    cmd.register(parser.add_subparsers())
    return parser


def test_every_flag_of_the_command_is_an_option_and_back():
    args = _parser().parse_args(["rehearse", "gb300"])
    dests = set(vars(args)) - {"func"}
    assert dests == {f.name for f in dataclasses.fields(RehearseOptions)}


def test_defaults_are_the_parsers():
    assert RehearseOptions.from_values(_parser().parse_args(["rehearse", "gb300"])) == RehearseOptions("gb300")


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RehearseOptions("gb300").perf_profile = "x"  # the run keeps its own timing, never writes into its input


def test_every_option_survives_the_reexec():
    argv = ["rehearse", "gb300", "--out", "o", "--ready-timeout", "30", "--requests", "3", "--duration", "9.5"]
    argv += ["--concurrency", "2", "--system-prompt-tokens", "64", "--turns", "2", "--speedup-ratio", "2.5"]
    argv += ["--perf-profile", "p.npz", "--mocker-timing", "--no-load", "--trace", "t.jsonl", "--trace-first", "4"]
    argv += ["--trace-window", "1:9", "--trace-speedup", "3", "--kv-budget-gib", "0.5", "--plan-config"]
    argv += ["--host-network", "--runs", "synthetic,agentic"]
    opts = RehearseOptions.from_values(_parser().parse_args(argv))
    again = RehearseOptions.from_values(_parser().parse_args(["rehearse", *reexec.command_line(opts)]))
    assert again == opts
    defaults = RehearseOptions("gb300")
    same = [f.name for f in dataclasses.fields(opts) if getattr(opts, f.name) == getattr(defaults, f.name)]
    assert same == ["stack"]  # every other option was given a non-default value above
