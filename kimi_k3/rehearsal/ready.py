"""rehearse.py -> ready.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable, Optional

from kimi_k3.pods import smoke
from kimi_k3.rehearsal import metrics
from kimi_k3.rehearsal import plan as rehearsal
from kimi_k3.rehearsal.processes import Processes, RehearsalFailed, _discovery_keys


@dataclasses.dataclass
class Readiness:
    """What the graph showed on its way to ready (report.json's `readiness`)."""

    registered: dict[str, int]  # worker instances per component (discovery)
    frontend_workers: dict[str, int] = dataclasses.field(default_factory=dict)  # live workers per type, frontend's view
    probes: int = 0  # routing probes sent (the last one served)
    probe_failures: list[str] = dataclasses.field(default_factory=list)  # why each earlier probe was not


FIXTURE_SECONDS = 300  # the tokenizer fixture: ~1 s warm; a cold venv on a slow disk imports for much longer


POLL_SECONDS = 0.25  # discovery and the frontend's readiness route


PROBE_RETRY_SECONDS = 0.1  # after a probe the frontend refused (Dynamo's prefill-activation window is ~5-20 ms)


def wait_ready(
    plan: rehearsal.Rehearsal,
    procs: Processes,
    discovery: Path,
    timeout: float,
    say: Callable[[str], None],
    started: float,
) -> Readiness:
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
        comp = metrics.endpoint_component(r.mode)
        want_registered[comp] = want_registered.get(comp, 0) + r.replicas
    want_frontend = metrics.frontend_workers_wanted(plan)
    needs_prefill = "prefill" in want_frontend
    client = smoke.Client(plan.url, 10.0)
    state = Readiness(registered={})
    shown: dict[str, int] = {}
    topology: Optional[str] = "frontend not asked yet"
    last_said = ""
    while True:
        elapsed = time.monotonic() - started
        if elapsed > timeout:
            missing = {
                c: f"{state.registered.get(c, 0)}/{n}"
                for c, n in want_registered.items()
                if state.registered.get(c, 0) < n
            }
            why = (
                (f"registered {missing}" if missing else f"registered {state.registered}")
                + "; "
                + (topology or f"routing probe: {state.probe_failures[-1] if state.probe_failures else 'not sent'}")
            )
            raise RehearsalFailed(f"graph not ready after {timeout:g} s: {why}; logs in {procs.logs}")
        dead = procs.dead()
        if dead:
            name, code = dead[0]
            raise RehearsalFailed(
                f"{name} exited with code {code} before the graph was ready; last lines of "
                f"{procs.logs / (name + '.log')}:\n{procs.tail(name)}"
            )
        state.registered = metrics.registered_workers(_discovery_keys(discovery))
        for comp, n in sorted(state.registered.items()):
            if shown.get(comp) != n:
                say(f"[{elapsed:5.1f}s] {comp} workers registered: {n}/{want_registered.get(comp, 0)}")
                shown[comp] = n
        pause = POLL_SECONDS
        try:
            status, body = client.json("GET", smoke.ready_path(plan.served_model_name))
            topology = smoke.topology_verdict(status, body, want_frontend)
            if status != 404:  # 404: the frontend has not committed the model yet
                state.frontend_workers = smoke.frontend_workers(body)
            if topology is None:
                # the frontend may see a worker this loop's discovery read (just before) missed: read again
                state.registered = metrics.registered_workers(_discovery_keys(discovery))
                if any(state.registered.get(c, 0) < n for c, n in want_registered.items()):
                    topology = f"registered {state.registered}, want {want_registered}"
            if topology is None:
                status, body = client.json(
                    "POST", "/v1/chat/completions", smoke.probe_request(plan.served_model_name, which_workers=True)
                )
                state.probes += 1
                refused = smoke.probe_verdict(status, body, needs_prefill)
                if refused is None:
                    if time.monotonic() - started > timeout:  # ready when seen, within the budget
                        continue
                    seen = ", ".join(f"{k} {n}" for k, n in sorted(state.frontend_workers.items()))
                    say(
                        f"[{time.monotonic() - started:5.1f}s] frontend routes to every role ({seen} live); "
                        f"probe served" + (f" after {state.probes - 1} refused" if state.probes > 1 else "")
                    )
                    return state
                state.probe_failures.append(f"[{time.monotonic() - started:.2f}s] {refused}")
                say(
                    f"[{time.monotonic() - started:5.1f}s] routing probe {state.probes} refused ({refused}); "
                    f"sending it again"
                )
                pause = PROBE_RETRY_SECONDS
            elif topology != last_said and status != 404:
                say(f"[{elapsed:5.1f}s] frontend: {topology}")
                last_said = topology
        except OSError as err:  # the frontend is not listening yet
            topology = f"frontend {plan.url}: {err}"
        time.sleep(pause)
