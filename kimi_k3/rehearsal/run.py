"""rehearse.py -> run.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from kimi_k3.atomic import write_text, write_with
from kimi_k3.blueprint import Blueprint
from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack_files import StackError, stack_name_problem
from kimi_k3.errors import UserError, check_writable_dir
from kimi_k3.graph import role_plans as graph_role_plans
from kimi_k3.pods import smoke, workload
from kimi_k3.rehearsal import metrics, trace_confirm, trace_report
from kimi_k3.rehearsal import plan as rehearsal
from kimi_k3.rehearsal import report as rehearsal_report
from kimi_k3.rehearsal.load import (
    FIXTURE_REPO,
    aiperf_argv,
    hub_snapshot,
    load_trace,
    resolve_workload,
    run_aiperf,
    trace_argv,
)
from kimi_k3.rehearsal.options import RehearseOptions
from kimi_k3.rehearsal.processes import (
    BROKER,
    FIXTURE,
    MARKER_ENV,
    NETNS_ENV,
    Interrupted,
    Processes,
    RehearsalFailed,
    _metrics,
    enter_private_network,
    free_ports,
    loopback_up,
    rehearse_python,
)
from kimi_k3.rehearsal.ready import FIXTURE_SECONDS, Readiness, wait_ready
from kimi_k3.rehearsal.reexec import command_line
from kimi_k3.rehearsal.run_dir import LOCK_FD_ENV, TRACE_COPY, clear_previous, lock_out
from kimi_k3.sizing import trace_cache
from kimi_k3.sizing.layout import PerfError


def execute(args: RehearseOptions, say: Callable[[str], None]) -> int:
    """Run the rehearsal `args` asks for; the exit code (2: bad input, refused before anything starts)."""
    try:
        problem = stack_name_problem(args.stack)
        if problem:
            raise StackError(problem)
        bp = Blueprint.for_stack(args.stack)  # the stack resolved once; the rehearsal reads only this
        cfg, graph = bp.config, bp.graph
    except (StackError, ConfigError) as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    out = Path(args.out) if args.out else Path("build") / "rehearse" / args.stack
    out = out.resolve()
    logs, model_dir = out / "logs", out / "model"
    try:
        check_writable_dir(out, "--out")  # without creating anything
    except (RehearsalFailed, UserError) as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    w = resolve_workload(cfg, args)
    runs_wanted = list(w.runs)
    if not runs_wanted or set(runs_wanted) - set(workload.RUNS):
        say(f"kimi-k3 rehearse {args.stack}: --runs {args.runs}: allowed: agentic, synthetic (comma-separated)")
        return 2
    if args.perf_profile and not Path(args.perf_profile).exists():
        say(
            f"kimi-k3 rehearse {args.stack}: --perf-profile {args.perf_profile}: no such file or directory "
            "(a mocker-format .npz or a profiler results directory)"
        )
        return 2
    trace = None
    try:
        trace = load_trace(args, max(r.max_model_len for r in graph.roles), graph.block_size)
    except (UserError, trace_cache.TraceError) as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    if trace is not None:
        runs_wanted = ["trace"]
    plan_cfg = None
    if args.plan_config:  # plan --trace's P:D config for this selection, deployed instead
        try:
            graph, plan_cfg = trace_confirm.for_trace(args, graph, trace)
        except (UserError, PerfError) as err:
            say(f"kimi-k3 rehearse {args.stack}: {err}")
            return 2
        say(f"--plan-config: {plan_cfg['prefill']} prefill + {plan_cfg['decode']} decode (plan --trace)")
    if args.kv_budget_gib is not None:  # checked before anything is created or removed
        room = min(p.to_json()["kv_pool_gib_per_gpu"] for p in graph_role_plans.role_kv_plans(graph).values())
        if args.kv_budget_gib > room:
            say(
                f"kimi-k3 rehearse {args.stack}: --kv-budget-gib {args.kv_budget_gib:g}: more than the {room:.2f} GiB "
                f"per GPU the stack's roles have left after weights; allowed: a number > 0 and <= {room:.2f}"
            )
            return 2
    try:  # the environment after every argument: a bad flag is named first, whatever the machine has
        python = rehearse_python()
    except (RehearsalFailed, UserError) as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    # Input checked. One rehearsal per output directory at a time (a second one is refused before it starts).
    try:
        lock = lock_out(out)
    except UserError as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 2
    # From here on, run inside a private network namespace where possible.
    if not args.host_network:
        if os.environ.get(NETNS_ENV) != "1":
            os.set_inheritable(lock, True)  # the lock stays held across the exec (unshare execs, no fork)
            os.environ[LOCK_FD_ENV] = str(lock)
            enter_private_network(["rehearse", *command_line(args)], say)  # execs; returns only if unavailable
        else:
            loopback_up()
    os.environ.pop(LOCK_FD_ENV, None)
    clear_previous(out)
    for d in (logs, out / "aiperf"):
        d.mkdir(parents=True, exist_ok=True)
    if trace is not None:  # the selected lines, unchanged: what AIPerf replays and the report describes
        write_text(out / TRACE_COPY, "".join(trace.lines))
    network = "private network namespace (loopback only)" if os.environ.get(NETNS_ENV) == "1" else "host loopback"

    # Step timing from the stack's performance model unless a profile (or the mocker's own timing) is asked for.
    perf_profile = args.perf_profile
    timing = "perf profile " + perf_profile if perf_profile else "mocker"
    if perf_profile is None and args.perf_model:
        from kimi_k3.sizing import mocker, perf

        try:
            profile = rehearsal.perf_profile(graph)
            perf_profile = str(
                write_with(out / "perf_profile.npz", lambda tmp: mocker.write_mocker_profile(profile, tmp))
            )
            timing = "perf model"
        except perf.PerfError as err:
            say(f"rehearse {args.stack}: the mocker's own timing (no performance model for this layout: {err})")
    # The same KV plan `kimi-k3 plan STACK` prints for each role.
    role_plans = graph_role_plans.role_kv_plans(graph, args.kv_budget_gib)
    try:  # frontend HTTP, the broker's XSUB and XPUB, one system (metrics) port per worker: all distinct
        http_port, xsub_port, xpub_port, *metrics_ports = free_ports(3 + sum(r.replicas for r in graph.roles))
    except RehearsalFailed as err:
        say(f"kimi-k3 rehearse {args.stack}: {err}")
        return 1
    plan = rehearsal.plan_rehearsal(
        graph,
        role_plans,
        http_port=http_port,
        metrics_ports=metrics_ports,
        model_path=str(model_dir),
        speedup_ratio=args.speedup_ratio,
        perf_profile=perf_profile,
    )
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
    write_text(
        out / "processes.json",
        json.dumps(
            [
                {
                    "name": p.name,
                    "role": p.role,
                    "argv": ["python", "-m", p.module, *p.args],
                    "env": dict(p.env),
                    "metrics_port": p.metrics_port,
                }
                for p in plan.processes
            ],
            indent=1,
        ),
    )
    say(
        f"rehearse {args.stack}: {len(plan.workers)} mocker workers "
        + ", ".join(
            f"{r.key} x{r.replicas} ({r.mode}, {r.capacity.tokens:,} KV tokens = {r.capacity.num_blocks:,} "
            f"blocks of {plan.block_size})"
            for r in plan.roles
        )
        + f"; frontend {plan.url} ({network}); logs {logs}"
    )

    procs = Processes(logs, env, say)
    started = time.monotonic()
    ready_seconds: Optional[float] = None
    registered: dict[str, int] = {}
    readiness: Optional[Readiness] = None
    smoke_result: dict[str, Any] = {"passed": False, "checks": {}, "failures": {}}
    runs: dict[str, Any] = {}
    kv_hit, worker_load, failure = None, {}, None
    before: Optional[list] = None
    sampler: Optional[trace_report.Sampler] = None
    code = 0

    def measure() -> None:
        """What the graph served so far (per worker, and the KV hit rate since the load began): a failed or
        interrupted run reports what it measured, not zeros."""
        nonlocal worker_load, kv_hit
        worker_load = {p.name: metrics.worker_requests(_metrics(p.metrics_port)) for p in plan.workers}
        if before is not None:
            kv_hit = metrics.kv_hit_rate(metrics.delta(before, _metrics(plan.http_port)), plan.cache_evidence)

    try:
        try:
            fixture = subprocess.run(
                [str(python), str(FIXTURE), str(model_dir), str(plan.max_model_len)],
                env=env,
                capture_output=True,
                text=True,
                timeout=FIXTURE_SECONDS,
            )
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

        smoke_result = smoke.run(
            plan.url, plan.served_model_name, plan.max_model_len, log=say, **plan.smoke_options
        )  # as the Job runs it
        if not smoke_result["passed"]:
            raise RehearsalFailed(
                "smoke test failed: " + "; ".join(f"{k}: {v}" for k, v in smoke_result["failures"].items())
            )
        if args.load:
            before = _metrics(plan.http_port)
            for kind in runs_wanted:
                if kind == "trace":
                    say(
                        f"[{time.monotonic() - started:5.1f}s] AIPerf trace replay: {len(trace.requests)} requests "
                        f"over {trace.replay_seconds:.0f}s"
                    )
                    hub_env = hub_snapshot(model_dir, scratch / "hub")
                    argv = trace_argv(
                        python, plan, out / TRACE_COPY, args.trace_speedup, FIXTURE_REPO, out / "aiperf" / kind
                    )
                    deadline = trace.replay_seconds + workload.RUN_GRACE_SECONDS
                    sampler = trace_report.Sampler(plan, _metrics)
                else:
                    say(
                        f"[{time.monotonic() - started:5.1f}s] AIPerf {kind}: {w.requests} requests, "
                        f"cap {w.duration_seconds:.0f}s"
                    )
                    argv = aiperf_argv(python, plan, kind, w, model_dir, out / "aiperf" / kind)
                    deadline = w.run_deadline_seconds()
                runs[kind] = run_aiperf(
                    procs,
                    f"aiperf-{kind}",
                    argv,
                    out / "aiperf" / kind,
                    deadline,
                    say,
                    env,
                    hub_env if kind == "trace" else None,
                    sampler.tick if kind == "trace" and sampler else None,
                )
                if kind == "trace" and sampler:
                    sampler.tick(force=True)
        measure()
        dead = procs.dead()
        if dead:
            raise RehearsalFailed(f"{dead[0][0]} exited with code {dead[0][1]} during the run")
    except RehearsalFailed as err:
        failure, code = str(err), 1
        say(f"FAILED: {err}")
    except OSError as err:  # a process could not be started (a broken venv): a failed run, reported as one
        failure, code = f"could not start a process: {err}", 1
        say(f"FAILED: {failure}")
    except (KeyboardInterrupt, Interrupted):
        failure, code = "interrupted", 130
        say("interrupted")
    finally:
        if code and not worker_load and readiness is not None:
            try:  # the workers still run: what they served goes into the report
                measure()
            except (Exception, KeyboardInterrupt, Interrupted):
                pass
        stopped = procs.stop_all()
        shutil.rmtree(scratch, ignore_errors=True)
        say(f"stopped {stopped} processes")
    report = rehearsal_report.build_report(
        plan,
        ready_seconds=ready_seconds,
        registered=registered,
        smoke=smoke_result,
        runs=runs,
        kv_hit=kv_hit,
        worker_load=worker_load,
        failure=failure,
        extra={
            "total_seconds": round(time.monotonic() - started, 2),
            "network": network,
            "scratch_dir": str(scratch),
            "discovery_dir": str(discovery),
            "readiness": None if readiness is None else dataclasses.asdict(readiness),
            "speedup_ratio": args.speedup_ratio,
            "timing": timing,
            "aiperf": {
                "requests": w.requests,
                "duration_cap_s": w.duration_seconds,
                "concurrency": w.concurrency,
                "system_prompt_tokens": w.system_prompt_tokens,
                "turns": w.turns,
            },
            **(
                {}
                if trace is None
                else {
                    "trace": {
                        **trace.report(
                            kv_hit,
                            trace_report.measured_or_error(
                                plan, graph, trace, sampler, kv_hit, say, out, args.speedup_ratio
                            ),
                        ),
                        **(
                            {}
                            if plan_cfg is None
                            else {"plan_config": trace_confirm.run_verdict(plan_cfg, cfg, sampler, runs, trace, args)}
                        ),
                    }
                }
            ),
        },
    )
    write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    plots: list[str] = []
    try:
        from kimi_k3.rehearsal import plots as rehearse_plots

        plots = rehearse_plots.draw(report, out)
    except Exception as err:  # a plot must never hide the result
        say(f"plots skipped: {type(err).__name__}: {err}")
    write_text(out / "report.md", rehearsal_report.render_markdown(report, plots))
    rehearsal_report.summary(report, out, say)
    return code
