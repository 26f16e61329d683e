"""`kimi-k3 rehearse STACK`: bring the stack's serving graph up on this machine - the real Dynamo frontend and KV
router, one simulated engine (dynamo.mocker) per worker replica sized by the planner - on 127.0.0.1 only; prove it
serves (the smoke test the cluster Job runs too), load it with AIPerf, and write DIR/report.json, report.md, plots
and every process's log. Every process it starts ends with it: on success, on failure and on Ctrl-C."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from typing import Any

from kimi_k3.commands.argtypes import bounded, choice_list, positive, positive_int, seconds_window, whole
from kimi_k3.pods import workload
from kimi_k3.rehearsal.load import TRACE_MAX_REQUESTS, TRACE_MAX_SECONDS
from kimi_k3.rehearsal.options import RehearseOptions
from kimi_k3.rehearsal.processes import Interrupted
from kimi_k3.rehearsal.run import execute


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "rehearse",
        help="run the stack's serving graph locally (Dynamo frontend + mocker "
        "engines), smoke test it, load it with AIPerf, report",
        description=__doc__,
    )
    p.add_argument("stack", metavar="STACK")
    p.add_argument("--out", help="output directory (default build/rehearse/STACK)")
    p.add_argument("--ready-timeout", type=positive, default=240, help="seconds for every worker to register (240)")
    # The workload (kimi_k3/pods/workload.py) is the stack's kimi-k3:serving.benchmark, the in-cluster Job's too.
    w = workload.DEFAULT
    p.add_argument(
        "--requests", type=positive_int, help=f"requests per AIPerf run (stack's benchmark.requests; {w.requests})"
    )
    p.add_argument(
        "--duration",
        type=positive,
        help=f"time cap in seconds per AIPerf run (benchmark.durationSeconds; {w.duration_seconds:g})",
    )
    p.add_argument(
        "--concurrency", type=positive_int, help=f"concurrent AIPerf requests (benchmark.concurrency; {w.concurrency})"
    )
    p.add_argument(
        "--system-prompt-tokens",
        type=positive_int,
        help=f"shared system prompt of the agentic run, in fixture tokens (benchmark.systemPromptTokens; "
        f"{w.system_prompt_tokens})",
    )
    p.add_argument("--turns", type=positive_int, help=f"turns per agentic conversation (benchmark.turns; {w.turns})")
    p.add_argument("--speedup-ratio", type=positive, default=1.0, help="mocker timing speedup (1.0 = its model's pace)")
    p.add_argument(
        "--perf-profile",
        help="mocker --planner-profile-data (default: one written from the calibrated "
        "performance model of the stack, `kimi-k3 plan STACK --mocker-profile`)",
    )
    p.add_argument(
        "--mocker-timing",
        dest="perf_model",
        action="store_false",
        help="use the mocker's own timing model instead of the stack's performance model",
    )
    p.add_argument(
        "--runs",
        type=choice_list(workload.RUNS),
        help="AIPerf runs, comma-separated from agentic,synthetic (benchmark.runs; both)",
    )
    p.add_argument("--no-load", dest="load", action="store_false", help="skip AIPerf (ready + smoke test only)")
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="replay this mooncake_trace JSONL file (timestamp ms, input_length, "
        "output_length, hash_ids of 512-token blocks) at its arrival times instead of the built-in runs, "
        f"through AIPerf's own trace replay; at most {TRACE_MAX_REQUESTS:,} requests and "
        f"{TRACE_MAX_SECONDS:,.0f} s",
    )
    p.add_argument(
        "--trace-first",
        type=whole(1, TRACE_MAX_REQUESTS),
        metavar="N",
        help="replay only the first N requests (of the window, if given)",
    )
    p.add_argument(
        "--trace-window",
        type=seconds_window,
        metavar="START:END",
        help="replay only the requests whose timestamp is in [START, END] seconds",
    )
    p.add_argument(
        "--trace-speedup",
        type=bounded(0.01, 1000),
        default=1.0,
        metavar="X",
        help="replay X times faster than recorded (0.5 = twice as slow; 1)",
    )
    p.add_argument(
        "--kv-budget-gib",
        type=positive,
        metavar="G",
        help="size every mocker's KV cache from this KV pool per GPU (as `kimi-k3 plan STACK --kv-budget-gib G`) "
        "instead of what the GPU has left after weights: a smaller cache to see what capacity costs in hit rate",
    )
    p.add_argument(
        "--plan-config",
        action="store_true",
        help="with --trace on a disaggregated stack: deploy the prefill and decode replicas `kimi-k3 plan STACK "
        "--trace` computes for the selection (at the replay's timing) and report whether queues stayed bounded and "
        "the SLA (the stack's TTFT/ITL alert thresholds) held; the mockers run at the performance model's speed",
    )
    p.add_argument(
        "--host-network",
        action="store_true",
        help="run on the host's loopback instead of a private network namespace (the default where "
        "`unshare` works); every listener binds 127.0.0.1 either way",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    gc.enable()  # the console script turns the collector off for short commands; this one runs for minutes

    def say(line: str) -> None:
        try:
            print(line, flush=True)
        except BrokenPipeError:  # the reader (`| tee`, `| head`) is gone: still clean up and write the report
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())

    def interrupted(signum, frame):  # SIGTERM/SIGHUP: clean up exactly as on Ctrl-C
        raise Interrupted()

    previous = {s: signal.signal(s, interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return execute(RehearseOptions.from_values(args), say)  # the core never sees argparse
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
