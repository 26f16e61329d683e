"""`kimi-k3 rehearse STACK`: bring the stack's serving graph up on this machine - the real Dynamo frontend and KV
router, one simulated engine (dynamo.mocker) per worker replica sized by the planner - on 127.0.0.1 only; prove it
serves (the smoke test the cluster Job runs too), load it with AIPerf, and write DIR/report.json, report.md, plots
and every process's log. Every process it starts ends with it: on success, on failure and on Ctrl-C."""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import unquote

from kimi_k3 import rehearsal, smoke, trace_cache, workload
from kimi_k3.config import ConfigError
from kimi_k3.atomic import write_text, write_with
from kimi_k3.errors import UserError, check_writable_dir
from kimi_k3.stacks import StackError, load_stack, project_root

from .argtypes import bounded, choice_list, positive, positive_int, seconds_window, stack_name_problem, whole

VENV_ENV = "KIMI_K3_REHEARSE_PYTHON"      # python of the rehearsal venv (default: .venv-rehearse/bin/python)
NETNS_ENV = "KIMI_K3_REHEARSE_NETNS"      # set once the command runs inside its own network namespace
MARKER_ENV = "KIMI_K3_REHEARSAL"          # set in every child: tests find leftovers by it in /proc/*/environ
FIXTURE = Path(rehearsal.__file__).with_name("rehearse_fixture.py")
BROKER = Path(rehearsal.__file__).with_name("rehearse_broker.py")   # the event plane's loopback-only broker
# A replayed trace's bounds on a 2-core machine (every request is a real AIPerf request through the real frontend):
TRACE_MAX_REQUESTS = 2000
TRACE_MAX_SECONDS = 1800.0              # replay wall time: the selection's span / --trace-speedup
TRACE_MAX_BYTES = 64 << 20              # read whole before anything starts (the FAST'25 hour is 3 MB)


class RehearsalFailed(Exception):
    """The graph did not come up, a process died, or a step failed: the message names what."""


class Interrupted(BaseException):
    """SIGTERM/SIGHUP, handled like Ctrl-C."""


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("rehearse", help="run the stack's serving graph locally (Dynamo frontend + mocker "
                              "engines), smoke test it, load it with AIPerf, report", description=__doc__)
    p.add_argument("stack", metavar="STACK")
    p.add_argument("--out", help="output directory (default build/rehearse/STACK)")
    p.add_argument("--ready-timeout", type=positive, default=240, help="seconds for every worker to register (240)")
    # The workload (kimi_k3/workload.py) is the stack's kimi-k3:serving.benchmark, the in-cluster Job's too.
    w = workload.DEFAULT
    p.add_argument("--requests", type=positive_int, help=f"requests per AIPerf run (stack's benchmark.requests; {w.requests})")
    p.add_argument("--duration", type=positive,
                   help=f"time cap in seconds per AIPerf run (benchmark.durationSeconds; {w.duration_seconds:g})")
    p.add_argument("--concurrency", type=positive_int, help=f"concurrent AIPerf requests (benchmark.concurrency; {w.concurrency})")
    p.add_argument("--system-prompt-tokens", type=positive_int,
                   help=f"shared system prompt of the agentic run, in fixture tokens (benchmark.systemPromptTokens; "
                        f"{w.system_prompt_tokens})")
    p.add_argument("--turns", type=positive_int, help=f"turns per agentic conversation (benchmark.turns; {w.turns})")
    p.add_argument("--speedup-ratio", type=positive, default=1.0, help="mocker timing speedup (1.0 = its model's pace)")
    p.add_argument("--perf-profile", help="mocker --planner-profile-data (default: one written from the calibrated "
                   "performance model of the stack, `kimi-k3 plan STACK --mocker-profile`)")
    p.add_argument("--mocker-timing", dest="perf_model", action="store_false",
                   help="use the mocker's own timing model instead of the stack's performance model")
    p.add_argument("--runs", type=choice_list(workload.RUNS), help="AIPerf runs, comma-separated from agentic,synthetic (benchmark.runs; both)")
    p.add_argument("--no-load", dest="load", action="store_false", help="skip AIPerf (ready + smoke test only)")
    p.add_argument("--trace", metavar="FILE", help="replay this mooncake_trace JSONL file (timestamp ms, input_length, "
                   "output_length, hash_ids of 512-token blocks) at its arrival times instead of the built-in runs, "
                   f"through AIPerf's own trace replay; at most {TRACE_MAX_REQUESTS:,} requests and "
                   f"{TRACE_MAX_SECONDS:,.0f} s")
    p.add_argument("--trace-first", type=whole(1, TRACE_MAX_REQUESTS), metavar="N",
                   help="replay only the first N requests (of the window, if given)")
    p.add_argument("--trace-window", type=seconds_window, metavar="START:END",
                   help="replay only the requests whose timestamp is in [START, END] seconds")
    p.add_argument("--trace-speedup", type=bounded(0.01, 1000), default=1.0, metavar="X",
                   help="replay X times faster than recorded (0.5 = twice as slow; 1)")
    p.add_argument("--host-network", action="store_true",
                   help="run on the host's loopback instead of a private network namespace (the default where "
                        "`unshare` works); every listener binds 127.0.0.1 either way")
    p.set_defaults(func=run)
    return p


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports below the kernel's ephemeral range (<= 32767, also fit for DYN_SYSTEM_PORT,
    which the runtime parses as an i16): the processes that will listen on them start later, and meanwhile every
    outgoing connection and every bind to port 0 takes its port from the ephemeral range, so none can take ours."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    top = min(low, 32768)
    candidates = list(range(20000 if top - 20000 >= 1000 else 1024, top))
    random.shuffle(candidates)
    held: list[socket.socket] = []
    try:   # held open until all are chosen, so the n are distinct
        for port in candidates:
            if len(held) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((rehearsal.LOOPBACK, port))
            except OSError:
                s.close()
                continue
            held.append(s)
        if len(held) < n:
            raise RehearsalFailed(f"only {len(held)} of {n} free loopback ports below {top}")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def rehearse_python() -> Path:
    explicit = os.environ.get(VENV_ENV)
    path = Path(explicit) if explicit else project_root() / ".venv-rehearse" / "bin" / "python"
    if not path.is_file():
        raise RehearsalFailed(f"no rehearsal environment at {path}: run `make rehearse STACK=...` (it builds "
                              f".venv-rehearse with ai-dynamo, ai-dynamo-runtime and aiperf pinned in "
                              f"requirements-rehearse.txt), or set {VENV_ENV}")
    return path


class Processes:
    """Children in their own process groups, so one signal reaches everything each of them started."""

    def __init__(self, logs: Path, env: dict[str, str], say: Callable[[str], None]):
        self.logs, self.env, self.say = logs, env, say
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None,
              cwd: Optional[Path] = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        try:
            proc = subprocess.Popen(argv, env={**self.env, **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def dead(self) -> list[tuple[str, int]]:
        return [(n, p.returncode) for n, p in self.procs.items() if p.poll() is not None]

    def stop(self, name: str, grace: float = 10.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # the group may outlive its leader (a child that ignored SIGTERM)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop_all(self) -> int:
        names = list(self.procs)
        for name in reversed(names):  # workers before the frontend
            self.stop(name)
        return len(names)

    def tail(self, name: str, lines: int = 15) -> str:
        path = self.logs / f"{name}.log"
        if not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback URLs we built)
        return resp.read().decode(errors="replace")


def _metrics(port: int) -> list[tuple[str, dict[str, str], float]]:
    try:
        return rehearsal.parse_prometheus(_get(f"http://{rehearsal.LOOPBACK}:{port}/metrics"))
    except OSError:
        return []


def _discovery_keys(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return [unquote(str(p.relative_to(root))) for p in root.rglob("*") if p.is_file()]


@dataclasses.dataclass
class Readiness:
    """What the graph showed on its way to ready (report.json's `readiness`)."""

    registered: dict[str, int]                                        # worker instances per component (discovery)
    frontend_workers: dict[str, int] = dataclasses.field(default_factory=dict)  # live workers per type, frontend's view
    probes: int = 0                     # routing probes sent (the last one served)
    probe_failures: list[str] = dataclasses.field(default_factory=list)          # why each earlier probe was not


FIXTURE_SECONDS = 300      # the tokenizer fixture: ~1 s warm; a cold venv on a slow disk imports for much longer
POLL_SECONDS = 0.25        # discovery and the frontend's readiness route
PROBE_RETRY_SECONDS = 0.1  # after a probe the frontend refused (Dynamo's prefill-activation window is ~5-20 ms)


def wait_ready(plan: rehearsal.Rehearsal, procs: Processes, discovery: Path, timeout: float,
               say: Callable[[str], None], started: float) -> Readiness:
    """Ready = the frontend can route a request through every role, seen within `timeout` of `started`:
    1. every worker process registered (file discovery: progress only, the frontend's view is what counts);
    2. the frontend's GET /v1/models/{model}/ready is 200 (every worker type live, engine and HTTP routes up) and
       it counts every replica of every role among its live workers;
    3. one probe request is served (through a prefill worker on a disaggregated graph). Dynamo 1.6.1 lists and
       reports a model ready as soon as its prefill worker registers, but builds the decode set's prefill router
       after that; requests in between get 503 (dynamo-llm 1.6.1 src/kv_router/prefill_router/mod.rs,
       `PrefillRouter::generate`, ActivationSnapshot::Pending -> prefill_activation_pending_error; no route,
       metric or status exposes that state), so a refused probe is logged and sent again."""
    want_registered: dict[str, int] = {}
    for r in plan.roles:
        comp = rehearsal.endpoint_component(r.mode)
        want_registered[comp] = want_registered.get(comp, 0) + r.replicas
    want_frontend = rehearsal.frontend_workers_wanted(plan)
    needs_prefill = "prefill" in want_frontend
    client = smoke.Client(plan.url, 10.0)
    state = Readiness(registered={})
    shown: dict[str, int] = {}
    topology: Optional[str] = "frontend not asked yet"
    last_said = ""
    while True:
        elapsed = time.monotonic() - started
        if elapsed > timeout:
            missing = {c: f"{state.registered.get(c, 0)}/{n}" for c, n in want_registered.items()
                       if state.registered.get(c, 0) < n}
            why = (f"registered {missing}" if missing else f"registered {state.registered}") + "; " + (
                topology or f"routing probe: {state.probe_failures[-1] if state.probe_failures else 'not sent'}")
            raise RehearsalFailed(f"graph not ready after {timeout:g} s: {why}; logs in {procs.logs}")
        dead = procs.dead()
        if dead:
            name, code = dead[0]
            raise RehearsalFailed(f"{name} exited with code {code} before the graph was ready; last lines of "
                                  f"{procs.logs / (name + '.log')}:\n{procs.tail(name)}")
        state.registered = rehearsal.registered_workers(_discovery_keys(discovery))
        for comp, n in sorted(state.registered.items()):
            if shown.get(comp) != n:
                say(f"[{elapsed:5.1f}s] {comp} workers registered: {n}/{want_registered.get(comp, 0)}")
                shown[comp] = n
        pause = POLL_SECONDS
        try:
            status, body = client.json("GET", smoke.ready_path(plan.served_model_name))
            topology = smoke.topology_verdict(status, body, want_frontend)
            if status != 404:   # 404: the frontend has not committed the model yet
                state.frontend_workers = smoke.frontend_workers(body)
            if topology is None:
                # the frontend may see a worker this loop's discovery read (just before) missed: read again
                state.registered = rehearsal.registered_workers(_discovery_keys(discovery))
                if any(state.registered.get(c, 0) < n for c, n in want_registered.items()):
                    topology = f"registered {state.registered}, want {want_registered}"
            if topology is None:
                status, body = client.json("POST", "/v1/chat/completions",
                                           smoke.probe_request(plan.served_model_name, which_workers=True))
                state.probes += 1
                refused = smoke.probe_verdict(status, body, needs_prefill)
                if refused is None:
                    if time.monotonic() - started > timeout:   # ready when seen, within the budget
                        continue
                    seen = ", ".join(f"{k} {n}" for k, n in sorted(state.frontend_workers.items()))
                    say(f"[{time.monotonic() - started:5.1f}s] frontend routes to every role ({seen} live); "
                        f"probe served" + (f" after {state.probes - 1} refused" if state.probes > 1 else ""))
                    return state
                state.probe_failures.append(f"[{time.monotonic() - started:.2f}s] {refused}")
                say(f"[{time.monotonic() - started:5.1f}s] routing probe {state.probes} refused ({refused}); "
                    f"sending it again")
                pause = PROBE_RETRY_SECONDS
            elif topology != last_said and status != 404:
                say(f"[{elapsed:5.1f}s] frontend: {topology}")
                last_said = topology
        except OSError as err:   # the frontend is not listening yet
            topology = f"frontend {plan.url}: {err}"
        time.sleep(pause)


def aiperf_argv(python: Path, plan: rehearsal.Rehearsal, kind: str, w: workload.Workload, model_dir: Path,
                out: Path) -> list[str]:
    """One bounded AIPerf run of the workload (kimi_k3/workload.py) against the local frontend."""
    return [str(python), "-m", "aiperf", *workload.profile_args(
        kind, w, model=plan.served_model_name, url=plan.url, tokenizer=str(model_dir), artifact_dir=str(out))]


def trace_argv(python: Path, plan: rehearsal.Rehearsal, trace_file: Path, speedup: float, tokenizer: str,
               out: Path) -> list[str]:
    """AIPerf's replay of the selected trace lines against the local frontend (kimi_k3/workload.py trace_args)."""
    return [str(python), "-m", "aiperf", "profile", "--model", plan.served_model_name, "--url", plan.url,
            "--tokenizer", tokenizer, "--artifact-dir", str(out), *workload.trace_args(str(trace_file), speedup)]


FIXTURE_REPO = "kimi-k3/rehearsal-fixture"   # the fixture tokenizer as a Hub-cache snapshot (trace replay only)


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

    def report(self, achieved: Optional[float]) -> dict[str, Any]:
        """report.json's `trace`: what was replayed, the best hit rate any cache could reach on it at the stack's
        block size, and the rate the frontend measured beside it."""
        return {"file": str(self.path), "first": self.first, "window_s": None if self.window is None else
                list(self.window), "speedup": self.speedup, "replay_seconds": round(self.replay_seconds, 3),
                **trace_cache.summary(self.requests, self.block_size), "achieved_hit_rate": achieved}


def load_trace(args: argparse.Namespace, max_model_len: int, block_size: int) -> Optional[Trace]:
    """--trace FILE's selection, checked against the bounds before anything starts (None without --trace)."""
    if args.trace is None:
        given = [f for f, v in (("--trace-first", args.trace_first), ("--trace-window", args.trace_window),
                                ("--trace-speedup", None if args.trace_speedup == 1 else args.trace_speedup)) if v]
        if given:
            raise UserError(f"{', '.join(given)}: select from a trace; give it with --trace FILE")
        return None
    if args.runs:
        raise UserError(f"--runs {','.join(args.runs)} with --trace {args.trace}: a trace replaces the built-in runs; "
                        "give one or the other")
    path = Path(args.trace)
    text = trace_cache.read_lines(path, "--trace", TRACE_MAX_BYTES)
    lines, requests = trace_cache.select(text, f"--trace {path}", first=args.trace_first,
                                         window=args.trace_window, limit=TRACE_MAX_REQUESTS)
    for r in requests:
        if r.input_length + r.output_length > max_model_len:
            raise UserError(f"--trace {path}: the request at {r.timestamp_ms / 1000:g} s has {r.input_length:,} input "
                            f"+ {r.output_length:,} output tokens; the rehearsal's context is {max_model_len:,} "
                            "tokens: select a window without it")
    t = Trace(path.resolve(), lines, requests, args.trace_first, args.trace_window, args.trace_speedup, block_size)
    if t.replay_seconds > TRACE_MAX_SECONDS:
        raise UserError(f"--trace {path}: the {len(requests):,} selected requests span {t.replay_seconds:,.0f} s at "
                        f"--trace-speedup {args.trace_speedup:g}; the limit is {TRACE_MAX_SECONDS:,.0f} s: select "
                        "a shorter --trace-window, fewer with --trace-first N, or raise --trace-speedup")
    return t


def resolve_workload(cfg: Any, args: argparse.Namespace) -> workload.Workload:
    """The stack's benchmark workload (kimi-k3:serving.benchmark) with this command's flags on top."""
    w = cfg.serving.benchmark.to_workload()
    given = {"requests": args.requests, "duration_seconds": args.duration, "concurrency": args.concurrency,
             "system_prompt_tokens": args.system_prompt_tokens, "turns": args.turns,
             "runs": args.runs}
    return dataclasses.replace(w, **{k: v for k, v in given.items() if v is not None})


def run_aiperf(procs: Processes, name: str, argv: list[str], out: Path, deadline: float, say: Callable[[str], None],
               env: dict[str, str], hub_env: Optional[dict[str, str]] = None) -> dict[str, Any]:
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
        time.sleep(0.5)
    procs.procs.pop(name, None)
    summary = out / "profile_export_aiperf.json"
    if proc.returncode != 0 or not summary.is_file():
        raise RehearsalFailed(f"{name} exited with code {proc.returncode}; last lines of its log:\n{procs.tail(name)}")
    return json.loads(summary.read_text())


def execute(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    try:
        problem = stack_name_problem(args.stack)
        if problem:
            raise StackError(problem)
        cfg, graph = load_stack(args.stack)
    except (StackError, ConfigError) as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    out = Path(args.out) if args.out else Path("build") / "rehearse" / args.stack
    out = out.resolve()
    logs, model_dir = out / "logs", out / "model"
    try:
        check_writable_dir(out, "--out")  # without creating anything
        python = rehearse_python()
    except (RehearsalFailed, UserError) as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    w = resolve_workload(cfg, args)
    runs_wanted = list(w.runs)
    if not runs_wanted or set(runs_wanted) - set(workload.RUNS):
        say(f"kimi-k3 rehearse {args.stack}: --runs {args.runs}: allowed: agentic, synthetic (comma-separated)")
        return 2
    if args.perf_profile and not Path(args.perf_profile).exists():
        say(f"kimi-k3 rehearse {args.stack}: --perf-profile {args.perf_profile}: no such file or directory "
            "(a mocker-format .npz or a profiler results directory)")
        return 2
    trace = None
    try:
        trace = load_trace(args, max(r.max_model_len for r in graph.roles), graph.block_size)
    except (UserError, trace_cache.TraceError) as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    if trace is not None:
        runs_wanted = ["trace"]
    # Input checked. One rehearsal per output directory at a time (a second one is refused before it starts).
    try:
        lock = lock_out(out)
    except UserError as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    # From here on, run inside a private network namespace where possible.
    if not args.host_network:
        if os.environ.get(NETNS_ENV) != "1":
            os.set_inheritable(lock, True)   # the lock stays held across the exec (unshare execs, no fork)
            os.environ[LOCK_FD_ENV] = str(lock)
            enter_private_network(["rehearse", *command_line(args)], say)  # execs; returns only if unavailable
        else:
            loopback_up()
    os.environ.pop(LOCK_FD_ENV, None)
    clear_previous(out)
    for d in (logs, out / "aiperf"):
        d.mkdir(parents=True, exist_ok=True)
    if trace is not None:   # the selected lines, unchanged: what AIPerf replays and the report describes
        write_text(out / TRACE_COPY, "".join(trace.lines))
    args.network = "private network namespace (loopback only)" if os.environ.get(NETNS_ENV) == "1" else "host loopback"

    # Step timing from the stack's performance model unless a profile (or the mocker's own timing) is asked for.
    args.timing = "perf profile " + args.perf_profile if args.perf_profile else "mocker"
    if args.perf_profile is None and args.perf_model:
        from kimi_k3 import perf
        try:
            profile = rehearsal.perf_profile(graph)
            args.perf_profile = str(write_with(out / "perf_profile.npz",
                                               lambda tmp: perf.write_mocker_profile(profile, tmp)))
            args.timing = "perf model"
        except perf.PerfError as err:
            say(f"rehearse {args.stack}: the mocker's own timing (no performance model for this layout: {err})")
    # The same KV plan `kimi-k3 plan STACK` prints for each role.
    role_plans = rehearsal.role_kv_plans(graph)
    try:   # frontend HTTP, the broker's XSUB and XPUB, one system (metrics) port per worker: all distinct
        http_port, xsub_port, xpub_port, *metrics_ports = free_ports(3 + sum(r.replicas for r in graph.roles))
    except RehearsalFailed as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 1
    plan = rehearsal.plan_rehearsal(graph, role_plans, http_port=http_port, metrics_ports=metrics_ports,
                                    model_path=str(model_dir), speedup_ratio=args.speedup_ratio,
                                    perf_profile=args.perf_profile)
    # TMPDIR of every child (AIPerf's memory-mapped datasets and IPC sockets: a short path, sun_path holds 107
    # bytes) and this run's own discovery directory (another run's registrations never count as its workers);
    # removed at exit.
    scratch = Path(tempfile.mkdtemp(prefix="kimi-k3-rehearse-"))
    discovery = scratch / "discovery"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "HF_", "AIPERF_"))}
    broker_ports = (xsub_port, xpub_port)
    env.update(rehearsal.loopback_env(str(discovery), broker_ports))
    env[MARKER_ENV] = str(out)
    env["TMPDIR"] = str(scratch)
    write_text(out / "processes.json", json.dumps(
        [{"name": p.name, "role": p.role, "argv": ["python", "-m", p.module, *p.args], "env": dict(p.env),
          "metrics_port": p.metrics_port} for p in plan.processes], indent=1))
    say(f"rehearse {args.stack}: {len(plan.workers)} mocker workers "
        + ", ".join(f"{r.key} x{r.replicas} ({r.mode}, {r.capacity.tokens:,} KV tokens = {r.capacity.num_blocks:,} "
                    f"blocks of {plan.block_size})" for r in plan.roles)
        + f"; frontend {plan.url} ({args.network}); logs {logs}")

    procs = Processes(logs, env, say)
    started = time.monotonic()
    ready_seconds: Optional[float] = None
    registered: dict[str, int] = {}
    readiness: Optional[Readiness] = None
    smoke_result: dict[str, Any] = {"passed": False, "checks": {}, "failures": {}}
    runs: dict[str, Any] = {}
    kv_hit, worker_load, failure = None, {}, None
    before: Optional[list] = None
    code = 0

    def measure() -> None:
        """What the graph served so far (per worker, and the KV hit rate since the load began): a failed or
        interrupted run reports what it measured, not zeros."""
        nonlocal worker_load, kv_hit
        worker_load = {p.name: rehearsal.worker_requests(_metrics(p.metrics_port)) for p in plan.workers}
        if before is not None:
            kv_hit = rehearsal.kv_hit_rate(_delta(before, _metrics(plan.http_port), HIT_METRICS))

    try:
        try:
            fixture = subprocess.run([str(python), str(FIXTURE), str(model_dir), str(plan.max_model_len)], env=env,
                                     capture_output=True, text=True, timeout=FIXTURE_SECONDS)
        except subprocess.TimeoutExpired:
            raise RehearsalFailed(f"building the tokenizer fixture took over {FIXTURE_SECONDS} s ({FIXTURE})") from None
        if fixture.returncode != 0:
            raise RehearsalFailed(f"building the tokenizer fixture failed: {fixture.stderr[-2000:]}")
        say(f"[{time.monotonic() - started:5.1f}s] tokenizer fixture in {model_dir}")
        # The event plane's broker first: publishers and subscribers connect to it (ZMQ reconnects if they win).
        procs.start("zmq-broker", [str(python), str(BROKER), *map(str, broker_ports)])
        for p in plan.processes:
            procs.start(p.name, [str(python), "-m", p.module, *p.args], dict(p.env))
        say(f"[{time.monotonic() - started:5.1f}s] started {len(plan.processes)} processes and the event-plane broker")
        readiness = wait_ready(plan, procs, discovery, args.ready_timeout, say, started)
        registered = readiness.registered
        ready_seconds = time.monotonic() - started
        say(f"[{ready_seconds:5.1f}s] graph ready")

        smoke_result = smoke.run(plan.url, plan.served_model_name, plan.max_model_len,
                                 kv_block_size=plan.smoke_block_size, log=say)  # as the Job runs it
        if not smoke_result["passed"]:
            raise RehearsalFailed("smoke test failed: " + "; ".join(
                f"{k}: {v}" for k, v in smoke_result["failures"].items()))
        if args.load:
            before = _metrics(plan.http_port)
            for kind in runs_wanted:
                if kind == "trace":
                    say(f"[{time.monotonic() - started:5.1f}s] AIPerf trace replay: {len(trace.requests)} requests "
                        f"over {trace.replay_seconds:.0f}s")
                    hub_env = hub_snapshot(model_dir, scratch / "hub")
                    argv = trace_argv(python, plan, out / TRACE_COPY, args.trace_speedup, FIXTURE_REPO,
                                      out / "aiperf" / kind)
                    deadline = trace.replay_seconds + workload.RUN_GRACE_SECONDS
                else:
                    say(f"[{time.monotonic() - started:5.1f}s] AIPerf {kind}: {w.requests} requests, "
                        f"cap {w.duration_seconds:.0f}s")
                    argv = aiperf_argv(python, plan, kind, w, model_dir, out / "aiperf" / kind)
                    deadline = w.run_deadline_seconds()
                runs[kind] = run_aiperf(procs, f"aiperf-{kind}", argv, out / "aiperf" / kind, deadline, say, env,
                                        hub_env if kind == "trace" else None)
        measure()
        dead = procs.dead()
        if dead:
            raise RehearsalFailed(f"{dead[0][0]} exited with code {dead[0][1]} during the run")
    except RehearsalFailed as err:
        failure, code = str(err), 1
        say(f"FAILED: {err}")
    except OSError as err:   # a process could not be started (a broken venv): a failed run, reported as one
        failure, code = f"could not start a process: {err}", 1
        say(f"FAILED: {failure}")
    except (KeyboardInterrupt, Interrupted):
        failure, code = "interrupted", 130
        say("interrupted")
    finally:
        if code and not worker_load and readiness is not None:
            try:   # the workers still run: what they served goes into the report
                measure()
            except (Exception, KeyboardInterrupt, Interrupted):
                pass
        stopped = procs.stop_all()
        shutil.rmtree(scratch, ignore_errors=True)
        say(f"stopped {stopped} processes")
    report = rehearsal.build_report(plan, ready_seconds=ready_seconds, registered=registered, smoke=smoke_result,
                                    runs=runs, kv_hit=kv_hit, worker_load=worker_load, failure=failure,
                                    extra={"total_seconds": round(time.monotonic() - started, 2),
                                           "network": args.network, "scratch_dir": str(scratch),
                                           "discovery_dir": str(discovery),
                                           "readiness": None if readiness is None else dataclasses.asdict(readiness),
                                           "speedup_ratio": args.speedup_ratio, "timing": args.timing,
                                           "aiperf": {"requests": w.requests, "duration_cap_s": w.duration_seconds,
                                                      "concurrency": w.concurrency,
                                                      "system_prompt_tokens": w.system_prompt_tokens,
                                                      "turns": w.turns},
                                           **({} if trace is None else {"trace": trace.report(kv_hit)})})
    write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    plots: list[str] = []
    try:
        from kimi_k3.commands import rehearse_plots
        plots = rehearse_plots.draw(report, out)
    except Exception as err:  # a plot must never hide the result
        say(f"plots skipped: {type(err).__name__}: {err}")
    write_text(out / "report.md", rehearsal.render_markdown(report, plots))
    _summary(report, out, say)
    return code


HIT_METRICS = ("dynamo_frontend_input_sequence_tokens_sum", "dynamo_frontend_cached_tokens_sum")
LOCK_FD_ENV = "KIMI_K3_REHEARSE_LOCK_FD"  # the run's lock, held across the exec into the network namespace
PLOTS = ("latency.png", "workers.png", "agentic_ttft.png")
# A previous run's results: removed before this run starts, so a failed or interrupted run never shows them.
TRACE_COPY = "trace.jsonl"   # the replayed selection of --trace, in the run directory
PREVIOUS = ("report.json", "report.md", "processes.json", "perf_profile.npz", TRACE_COPY, *PLOTS)
PREVIOUS_DIRS = ("aiperf", "logs", "discovery")


def lock_out(out: Path) -> int:
    """An exclusive lock on OUT/.lock for this run (released when the process ends, however it ends); a second
    rehearsal into the same directory is refused, naming the holder."""
    import fcntl
    inherited = os.environ.get(LOCK_FD_ENV)
    if inherited:   # taken by this same process before it entered the network namespace
        return int(inherited)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:   # what os.access cannot tell (root on /proc, a read-only mount)
        raise UserError(f"--out {out}: cannot be written ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 500).decode(errors="replace").strip() or "pid unknown"
        os.close(fd)
        raise UserError(f"--out {out}: another rehearsal is running there ({holder}); wait for it to end, stop it, "
                        "or give another --out") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
    return fd


def clear_previous(out: Path) -> None:
    for name in PREVIOUS:
        (out / name).unlink(missing_ok=True)
    for name in PREVIOUS_DIRS:
        shutil.rmtree(out / name, ignore_errors=True)


def _delta(before, after, names) -> list[tuple[str, dict[str, str], float]]:
    b = {n: rehearsal.metric_sum(before, n) for n in names}
    return [(n, {}, rehearsal.metric_sum(after, n) - b[n]) for n in names]


def _summary(report: dict[str, Any], out: Path, say: Callable[[str], None]) -> None:
    load, fmt = report["load"], rehearsal._fmt   # the console says what report.md says, in the same units
    t, hit = load["ttft_ms"], report["kv_hit_rate"]
    say(f"{report['stack']}: ready {fmt(report['ready_seconds'], ' s')}, smoke "
        f"{'passed' if report['smoke']['passed'] else 'FAILED'}"
        + (f", TTFT p50/p90/p99 {fmt(t['p50'])}/{fmt(t['p90'])}/{fmt(t['p99'])} ms, "
           f"ITL p50 {fmt(load['itl_ms']['p50'])} ms, {fmt(load['output_tokens_per_second'])} output tok/s, "
           f"KV hit rate {'-' if hit is None else f'{100 * hit:.1f}%'}" if load["requests"] else "")
        + (f", FAILED: {report['failure']}" if report["failure"] else "")
        + f" -> {out}/report.md")


def command_line(args: argparse.Namespace) -> list[str]:
    """The same command's arguments again (to re-run it inside the network namespace)."""
    out = [args.stack]
    for name in ("out", "ready_timeout", "requests", "duration", "concurrency", "system_prompt_tokens", "turns",
                 "speedup_ratio", "perf_profile", "runs", "trace", "trace_first", "trace_window", "trace_speedup"):
        value = getattr(args, name, None)
        if value is not None:
            text = (",".join(value) if name == "runs" else f"{value[0]!r}:{value[1]!r}" if name == "trace_window"
                    else repr(value) if isinstance(value, float) else str(value))
            out += ["--" + name.replace("_", "-"), text]
    return (out + ([] if args.load else ["--no-load"]) + (["--host-network"] if args.host_network else [])
            + ([] if args.perf_model else ["--mocker-timing"]))


def loopback_up() -> None:
    """Bring `lo` up in a fresh network namespace (it starts down): SIOCGIFFLAGS/SIOCSIFFLAGS, no iproute2 needed."""
    import fcntl
    import struct
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, siocgifflags, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def enter_private_network(argv: list[str], say: Callable[[str], None]) -> None:
    """Re-run this command inside a new user + network namespace whose only interface is loopback, so nothing can
    reach another address, whatever a process binds (every listener of the graph binds 127.0.0.1: the event plane
    goes through the loopback broker). Returns (and the run stays on the host's loopback) where that is impossible."""
    probe = ["unshare", "--user", "--map-root-user", "--net", "true"]
    try:
        ok = subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        say("no private network namespace here (`unshare --user --net` failed): running on the host's loopback")
        return
    os.environ[NETNS_ENV] = "1"
    sys.stdout.flush()
    os.execvp("unshare", ["unshare", "--user", "--map-root-user", "--net", sys.executable, "-m", "kimi_k3", *argv])


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
        return execute(args, say)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
