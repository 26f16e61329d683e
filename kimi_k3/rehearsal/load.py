"""rehearse.py -> load.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

from kimi_k3.errors import UserError
from kimi_k3.pods import workload
from kimi_k3.rehearsal import plan as rehearsal
from kimi_k3.rehearsal.options import RehearseOptions
from kimi_k3.rehearsal.processes import Processes, RehearsalFailed
from kimi_k3.sizing import trace_cache

# A replayed trace's bounds on a 2-core machine (every request is a real AIPerf request through the real frontend):
TRACE_MAX_REQUESTS = 2000


TRACE_MAX_SECONDS = 1800.0  # replay wall time: the selection's span / --trace-speedup


TRACE_MAX_BYTES = 64 << 20  # read whole before anything starts (the FAST'25 hour is 3 MB)


def aiperf_argv(
    python: Path, plan: rehearsal.Rehearsal, kind: str, w: workload.Workload, model_dir: Path, out: Path
) -> list[str]:
    """One bounded AIPerf run of the workload (kimi_k3/pods/workload.py) against the local frontend."""
    return [
        str(python),
        "-m",
        "aiperf",
        *workload.profile_args(
            kind, w, model=plan.served_model_name, url=plan.url, tokenizer=str(model_dir), artifact_dir=str(out)
        ),
    ]


def trace_argv(
    python: Path, plan: rehearsal.Rehearsal, trace_file: Path, speedup: float, tokenizer: str, out: Path
) -> list[str]:
    """AIPerf's replay of the selected trace lines against the local frontend (kimi_k3/pods/workload.py trace_args)."""
    return [
        str(python),
        "-m",
        "aiperf",
        *workload.trace_profile_args(
            str(trace_file),
            speedup,
            model=plan.served_model_name,
            url=plan.url,
            tokenizer=tokenizer,
            artifact_dir=str(out),
        ),
    ]


FIXTURE_REPO = "kimi-k3/rehearsal-fixture"  # the fixture tokenizer as a Hub-cache snapshot (trace replay only)


def hub_snapshot(model_dir: Path, cache: Path) -> dict[str, str]:
    """The fixture tokenizer as a Hub-cache snapshot, and the env that makes AIPerf load it offline. AIPerf's trace
    prompt synthesis decodes in a process pool that forces HF_HUB_OFFLINE and resolves the tokenizer with
    snapshot_download(local_files_only=True) (aiperf dataset/generator/parallel_decode.py _init_worker,
    common/tokenizer.py _resolve_local_snapshot): a directory path fails there, a cached repo id does not."""
    rev = "0" * 40
    repo = cache / ("models--" + FIXTURE_REPO.replace("/", "--"))
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    for f in model_dir.iterdir():
        if f.is_file() and not (snap / f.name).exists():
            (snap / f.name).symlink_to(f)
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}


@dataclasses.dataclass(frozen=True)
class Trace:
    path: Path
    lines: list[str]
    requests: list[trace_cache.Request]
    first: Optional[int]
    window: Optional[tuple[float, float]]
    speedup: float
    block_size: int

    @property
    def replay_seconds(self) -> float:
        return trace_cache.span_seconds(self.requests) / self.speedup

    def report(self, achieved: Optional[float], measured: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """report.json's `trace`: what was replayed, the best hit rate any cache could reach on it at the stack's
        block size, and the rate the frontend measured beside it."""
        return {
            "file": str(self.path),
            "first": self.first,
            "window_s": None if self.window is None else list(self.window),
            "speedup": self.speedup,
            "replay_seconds": round(self.replay_seconds, 3),
            **trace_cache.summary(self.requests, self.block_size),
            "achieved_hit_rate": achieved,
            **(measured or {}),
        }


def load_trace(args: RehearseOptions, max_model_len: int, block_size: int) -> Optional[Trace]:
    """--trace FILE's selection, checked against the bounds before anything starts (None without --trace)."""
    if args.trace is None:
        given = [
            f
            for f, v in (
                ("--trace-first", args.trace_first),
                ("--trace-window", args.trace_window),
                ("--trace-speedup", None if args.trace_speedup == 1 else args.trace_speedup),
            )
            if v
        ]
        if given:
            raise UserError(f"{', '.join(given)}: select from a trace; give it with --trace FILE")
        return None
    if args.runs:
        raise UserError(
            f"--runs {','.join(args.runs)} with --trace {args.trace}: a trace replaces the built-in runs; "
            "give one or the other"
        )
    path = Path(args.trace)
    text = trace_cache.read_lines(path, "--trace", TRACE_MAX_BYTES)
    lines, requests = trace_cache.select(
        text, f"--trace {path}", first=args.trace_first, window=args.trace_window, limit=TRACE_MAX_REQUESTS
    )
    for r in requests:
        if r.input_length + r.output_length > max_model_len:
            raise UserError(
                f"--trace {path}: the request at {r.timestamp_ms / 1000:g} s has {r.input_length:,} input "
                f"+ {r.output_length:,} output tokens; the rehearsal's context is {max_model_len:,} "
                "tokens: select a window without it"
            )
    t = Trace(path.resolve(), lines, requests, args.trace_first, args.trace_window, args.trace_speedup, block_size)
    if t.replay_seconds > TRACE_MAX_SECONDS:
        raise UserError(
            f"--trace {path}: the {len(requests):,} selected requests span {t.replay_seconds:,.0f} s at "
            f"--trace-speedup {args.trace_speedup:g}; the limit is {TRACE_MAX_SECONDS:,.0f} s: select "
            "a shorter --trace-window, fewer with --trace-first N, or raise --trace-speedup"
        )
    return t


def resolve_workload(cfg: Any, args: RehearseOptions) -> workload.Workload:
    """The stack's benchmark workload (kimi-k3:serving.benchmark) with this command's flags on top."""
    w = cfg.serving.benchmark.to_workload()
    given = {
        "requests": args.requests,
        "duration_seconds": args.duration,
        "concurrency": args.concurrency,
        "system_prompt_tokens": args.system_prompt_tokens,
        "turns": args.turns,
        "runs": args.runs,
    }
    return dataclasses.replace(w, **{k: v for k, v in given.items() if v is not None})


def run_aiperf(
    procs: Processes,
    name: str,
    argv: list[str],
    out: Path,
    deadline: float,
    say: Callable[[str], None],
    env: dict[str, str],
    hub_env: Optional[dict[str, str]] = None,
    on_tick: Optional[Callable[[], None]] = None,
) -> dict[str, Any]:
    started = time.monotonic()
    # AIPerf's offline mode cannot load a tokenizer from a local directory (it resolves a Hub snapshot): leave it
    # online-capable, with the Hub pointed at a closed loopback port (rehearsal.NO_HUB) so nothing leaves the machine.
    proc = procs.start(name, argv, hub_env or {"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": ""}, cwd=out.parent)
    last = 0.0
    while proc.poll() is None:
        elapsed = time.monotonic() - started
        if elapsed > deadline:
            procs.stop(name)
            raise RehearsalFailed(f"{name} still running after {deadline:.0f}s; log {procs.logs / (name + '.log')}")
        if elapsed - last >= 10:
            say(f"  {name}: {elapsed:.0f}s")
            last = elapsed
        if on_tick is not None:
            on_tick()  # the trace replay's metric samples (kimi_k3/rehearsal/trace_report.py)
        time.sleep(0.5)
    procs.procs.pop(name, None)
    summary = out / "profile_export_aiperf.json"
    if proc.returncode != 0 or not summary.is_file():
        raise RehearsalFailed(f"{name} exited with code {proc.returncode}; last lines of its log:\n{procs.tail(name)}")
    return json.loads(summary.read_text())
