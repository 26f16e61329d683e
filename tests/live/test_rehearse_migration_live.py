"""Request migration against the real runtime: a stack's graph started as `kimi-k3 rehearse` starts it (Dynamo
1.6.1's frontend + KV router, one dynamo.mocker per worker replica, on loopback), one streaming chat completion
with a long output, and the worker streaming it SIGKILLed mid-stream (what a crash, a lost node, or the kubelet
after a pod's terminationGracePeriodSeconds does). With the frontend flags the graph renders (--migration-limit
from recipes/defaults/request-migration.yaml) the client still receives every token; with the old form (limit 0) the
stream ends with Dynamo's 503 error event after the tokens already sent. And a disaggregated graph's prefill worker
SIGKILLed mid-prefill: the request moves to another prefill worker where there is one, else the client gets 503.

Marked `rehearse` (deselected in `make test`); `make test-rehearse` runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import ROOT
from test_rehearse_live import MARKER, PYTHON, assert_no_leftovers

from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.graph import role_plans
from kimi_k3.graph.build import build_graph, default_migration_limit
from kimi_k3.rehearsal import metrics, processes, ready
from kimi_k3.rehearsal import plan as rehearsal

pytestmark = pytest.mark.rehearse

# ~5.7 ms per token at the mocker's own pace here: ~6 s of output; the kill comes after KILL_AFTER tokens
MAX_TOKENS = 1000
KILL_AFTER = 100
STREAM_TIMEOUT = 90


@pytest.fixture(scope="module", autouse=True)
def rehearsal_venv():
    if not PYTHON.is_file():
        pytest.fail(f"{PYTHON} missing: run `make test-rehearse` (it builds .venv-rehearse first)")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The rehearsal's tokenizer fixture, built once for every case (max length: the stacks' 1M context)."""
    out = tmp_path_factory.mktemp("migration-model")
    subprocess.run(
        [str(PYTHON), str(processes.FIXTURE), str(out), "1048576"],
        check=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    return out


def graph_of(stack: str, limit: int | None, prefill_replicas: int | None = None):
    """The stack's serving graph through the same config path `kimi-k3 render` takes; `limit` set as a user would
    (kimi-k3:serving.frontend.migrationLimit), None = the default from recipes/defaults/request-migration.yaml."""
    stack_file = read_stack_config(stack, ROOT)
    config = dict(stack_file.config)
    serving = json.loads(config.get("kimi-k3:serving", "{}"))
    if limit is not None:
        serving.setdefault("frontend", {})["migrationLimit"] = limit
    if prefill_replicas is not None:
        serving.setdefault("roles", {}).setdefault("prefill", {})["replicas"] = prefill_replicas
    config["kimi-k3:serving"] = json.dumps(serving)
    graph = build_graph(stack, parse_stack_config(config, stack_file.secrets))
    rendered = rehearsal.parse_flags(graph.frontend.args)["--migration-limit"]
    assert rendered == str(default_migration_limit() if limit is None else limit)
    return graph


@contextmanager
def running(graph, model_dir: Path, out: Path, speedup_ratio: float = 1.0):
    """The graph's processes as `kimi-k3 rehearse` starts them, until ready; all of them stopped on the way out."""
    logs, discovery = out / "logs", out / "discovery"
    logs.mkdir(parents=True)
    http_port, xsub, xpub, *metrics_ports = processes.free_ports(3 + sum(r.replicas for r in graph.roles))
    plan = rehearsal.plan_rehearsal(
        graph,
        role_plans.role_kv_plans(graph),
        http_port=http_port,
        metrics_ports=metrics_ports,
        model_path=str(model_dir),
        speedup_ratio=speedup_ratio,
    )
    assert (
        rehearsal.parse_flags(plan.processes[0].args)["--migration-limit"]
        == rehearsal.parse_flags(graph.frontend.args)["--migration-limit"]
    )  # what the frontend runs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "HF_"))}
    env.update(rehearsal.loopback_env(str(discovery), (xsub, xpub)))
    env[MARKER] = str(out)
    procs = processes.Processes(logs, env, print)
    try:
        procs.start("zmq-broker", [str(PYTHON), str(processes.BROKER), str(xsub), str(xpub)])
        for p in plan.processes:
            procs.start(p.name, [str(PYTHON), "-m", p.module, *p.args], dict(p.env))
        ready.wait_ready(plan, procs, discovery, 120, print, time.monotonic())
        yield plan, procs
    finally:
        procs.stop_all()
    assert_no_leftovers(out)


def requests_per_worker(plan) -> dict[str, float]:
    return {p.name: metrics.worker_requests(processes._metrics(p.metrics_port)) for p in plan.workers}


class Stream:
    """One streaming chat completion read line by line in a thread (SSE `data:` events, with arrival times)."""

    def __init__(
        self, url: str, model: str, prompt: str = "Write a long story about a GPU rack.", max_tokens: int = MAX_TOKENS
    ):
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": True,
        }
        self.request = urllib.request.Request(
            url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        self.events: list[str] = []
        self.error: str | None = None
        self.status: int | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        try:
            with urllib.request.urlopen(self.request, timeout=STREAM_TIMEOUT) as resp:  # noqa: S310 (loopback)
                self.status = resp.status
                for raw in resp:
                    line = raw.decode(errors="replace").strip()
                    if line.startswith("data:"):
                        self.events.append(line[len("data:") :].strip())
        except urllib.error.HTTPError as err:
            self.status = err.code
        except OSError as err:
            self.error = repr(err)

    def tokens(self) -> list[str]:
        out = []
        for event in self.events:
            if event.startswith("{"):
                for choice in json.loads(event).get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        out.append(choice["delta"]["content"])
        return out

    def finish_reasons(self) -> list[str]:
        return [
            c["finish_reason"]
            for e in self.events
            if e.startswith("{")
            for c in json.loads(e).get("choices") or []
            if c.get("finish_reason")
        ]

    def errors(self) -> list[dict]:
        return [json.loads(e)["error"] for e in self.events if e.startswith("{") and "error" in json.loads(e)]


@pytest.mark.parametrize("limit", [None, 0], ids=["rendered-limit", "limit-0"])
@pytest.mark.parametrize("stack", ["gb300", "gb300-disagg"])
def test_worker_killed_mid_stream(stack, limit, model_dir, tmp_path):
    graph = graph_of(stack, limit)
    out = tmp_path / "run"
    with running(graph, model_dir, out) as (plan, procs):
        before = requests_per_worker(plan)
        stream = Stream(plan.url, plan.served_model_name)
        stream.thread.start()
        deadline = time.monotonic() + 60
        while len(stream.tokens()) < KILL_AFTER and stream.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(stream.tokens()) >= KILL_AFTER, (stream.status, stream.error, stream.events[-3:])
        # the worker streaming it: the one (not a prefill worker: its part ended at the KV handoff) whose request
        # count went up, by its own metrics
        after = requests_per_worker(plan)
        serving = [p.name for p in plan.workers if after[p.name] > before[p.name] and p.role != "prefill"]
        assert len(serving) == 1, (before, after)
        victim = procs.procs[serving[0]]
        os.killpg(victim.pid, signal.SIGKILL)
        sent_before_kill = len(stream.tokens())
        assert victim.wait(timeout=10) == -signal.SIGKILL
        stream.thread.join(STREAM_TIMEOUT)
        assert not stream.thread.is_alive(), "the stream neither ended nor failed"
    frontend_log = (out / "logs" / "frontend.log").read_text(errors="replace")
    assert stream.error is None and stream.status == 200, (stream.status, stream.error)
    assert sent_before_kill < MAX_TOKENS, "the response ended before the worker was killed: nothing was tested"
    if limit is None:  # migrated: every token, one finished response, no error, the frontend moved it
        assert stream.errors() == [] and stream.events[-1] == "[DONE]"
        assert len(stream.tokens()) == MAX_TOKENS and stream.finish_reasons() == ["length"]
        assert "Stream disconnected, recreating stream" in frontend_log
        assert "migration retry scheduled" in frontend_log
    else:  # the old form: the client gets the tokens sent so far, then Dynamo's error event
        assert [e.get("code") for e in stream.errors()] == [503], stream.events[-3:]
        assert sent_before_kill <= len(stream.tokens()) < MAX_TOKENS and stream.finish_reasons() == []
        assert "migration retries exhausted" in frontend_log


# A prefill the mocker stretches to ~5 s (20k fixture tokens at a tenth of its pace): killed ~1 s in.
PREFILL_PROMPT = " ".join(["rack gpu cache tool"] * 5000)
PREFILL_SPEEDUP = 0.1


@pytest.mark.parametrize(
    ("prefill_replicas", "limit", "served"),
    [(2, None, True), (2, 0, False), (1, None, False)],
    ids=["2-prefill-rendered-limit", "2-prefill-limit-0", "1-prefill-rendered-limit"],
)
def test_prefill_worker_killed_mid_prefill(prefill_replicas, limit, served, model_dir, tmp_path):
    """Disaggregated: the prefill worker computing a request's prompt dies before the first token. Migration sends
    it to another prefill worker, where there is one; with one prefill replica (every shipped disaggregated stack)
    there is none and the client gets 503 whatever the limit (what docs/operating.md says)."""
    graph = graph_of("gb300-disagg", limit, prefill_replicas)
    out = tmp_path / "run"
    with running(graph, model_dir, out, PREFILL_SPEEDUP) as (plan, procs):
        before = requests_per_worker(plan)
        stream = Stream(plan.url, plan.served_model_name, PREFILL_PROMPT, max_tokens=20)
        stream.thread.start()
        deadline, prefilling = time.monotonic() + 30, []
        while not prefilling and stream.thread.is_alive() and time.monotonic() < deadline:
            now = requests_per_worker(plan)
            prefilling = [p.name for p in plan.workers if p.role == "prefill" and now[p.name] > before[p.name]]
            time.sleep(0.05)
        assert len(prefilling) == 1, (before, stream.status, stream.error)
        time.sleep(1.0)
        assert stream.events == [] and stream.thread.is_alive(), "prefill ended before the kill: nothing was tested"
        victim = procs.procs[prefilling[0]]
        os.killpg(victim.pid, signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        stream.thread.join(STREAM_TIMEOUT)
        assert not stream.thread.is_alive(), "the request neither ended nor failed"
    frontend_log = (out / "logs" / "frontend.log").read_text(errors="replace")
    assert stream.error is None, stream.error
    assert "Remote prefill failed" in frontend_log
    if served:
        assert stream.status == 200 and stream.errors() == [] and stream.events[-1] == "[DONE]"
        assert len(stream.tokens()) == 20 and stream.finish_reasons() == ["length"]
        assert "migration retry scheduled" in frontend_log
    else:
        assert stream.status == 503 and stream.tokens() == [], (stream.status, stream.events[-3:])
