"""Request migration against the real runtime: a stack's graph started as `kimi-k3 rehearse` starts it (Dynamo
1.6.1's frontend + KV router, one dynamo.mocker per worker replica, on loopback), one streaming chat completion
with a long output, and the worker streaming it SIGKILLed mid-stream (what a crash, a lost node, or the kubelet
after a pod's terminationGracePeriodSeconds does). With the frontend flags the graph renders (--migration-limit
from recipes/request-migration.yaml) the client still receives every token; with the old form (limit 0) the
stream ends with Dynamo's 503 error event after the tokens already sent.

Marked `rehearse` (deselected in `make test`); `make test-rehearse` runs it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT
from test_rehearse_live import MARKER, PYTHON, leftovers
from kimi_k3 import rehearsal
from kimi_k3.commands import rehearse as cmd
from kimi_k3.config import parse_stack_config
from kimi_k3.graph import build_graph, default_migration_limit
from kimi_k3.stacks import read_stack_config

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
    subprocess.run([str(PYTHON), str(cmd.FIXTURE), str(out), "1048576"], check=True, timeout=300,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out


def graph_of(stack: str, limit: int | None):
    """The stack's serving graph through the same config path `kimi-k3 render` takes; `limit` set as a user would
    (kimi-k3:serving.frontend.migrationLimit), None = the default from recipes/request-migration.yaml."""
    stack_file = read_stack_config(stack, ROOT)
    config = dict(stack_file.config)
    if limit is not None:
        serving = json.loads(config.get("kimi-k3:serving", "{}"))
        serving.setdefault("frontend", {})["migrationLimit"] = limit
        config["kimi-k3:serving"] = json.dumps(serving)
    return build_graph(stack, parse_stack_config(config, stack_file.secrets))


class Stream:
    """One streaming chat completion read line by line in a thread (SSE `data:` events, with arrival times)."""

    def __init__(self, url: str, model: str):
        body = {"model": model, "messages": [{"role": "user", "content": "Write a long story about a GPU rack."}],
                "max_tokens": MAX_TOKENS, "stream": True}
        self.request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                              headers={"Content-Type": "application/json"}, method="POST")
        self.events: list[str] = []
        self.error: str | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        try:
            with urllib.request.urlopen(self.request, timeout=STREAM_TIMEOUT) as resp:  # noqa: S310 (loopback)
                for raw in resp:
                    line = raw.decode(errors="replace").strip()
                    if line.startswith("data:"):
                        self.events.append(line[len("data:"):].strip())
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
        return [c["finish_reason"] for e in self.events if e.startswith("{")
                for c in json.loads(e).get("choices") or [] if c.get("finish_reason")]

    def errors(self) -> list[dict]:
        return [json.loads(e)["error"] for e in self.events if e.startswith("{") and "error" in json.loads(e)]


@pytest.mark.parametrize("limit", [None, 0], ids=["rendered-limit", "limit-0"])
@pytest.mark.parametrize("stack", ["gb300", "gb300-disagg"])
def test_killed_worker_mid_stream(stack, limit, model_dir, tmp_path):
    graph = graph_of(stack, limit)
    rendered = rehearsal.parse_flags(graph.frontend.args)["--migration-limit"]
    assert rendered == str(default_migration_limit() if limit is None else limit) and (limit is not None or
                                                                                       int(rendered) > 0)
    out = tmp_path / "run"
    logs, discovery = out / "logs", out / "discovery"
    logs.mkdir(parents=True)
    http_port, xsub, xpub, *metrics_ports = cmd.free_ports(3 + sum(r.replicas for r in graph.roles))
    plan = rehearsal.plan_rehearsal(graph, rehearsal.role_kv_plans(graph), http_port=http_port,
                                    metrics_ports=metrics_ports, model_path=str(model_dir))
    assert rehearsal.parse_flags(plan.processes[0].args)["--migration-limit"] == rendered   # what the frontend runs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "HF_"))}
    env.update(rehearsal.loopback_env(str(discovery), (xsub, xpub)))
    env[MARKER] = str(out)
    procs = cmd.Processes(logs, env, print)
    stream = None
    try:
        procs.start("zmq-broker", [str(PYTHON), str(cmd.BROKER), str(xsub), str(xpub)])
        for p in plan.processes:
            procs.start(p.name, [str(PYTHON), "-m", p.module, *p.args], dict(p.env))
        cmd.wait_ready(plan, procs, discovery, 120, print, time.monotonic())
        before = {p.name: rehearsal.worker_requests(cmd._metrics(p.metrics_port)) for p in plan.workers}
        stream = Stream(plan.url, plan.served_model_name)
        stream.thread.start()
        deadline = time.monotonic() + 60
        while len(stream.tokens()) < KILL_AFTER and stream.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(stream.tokens()) >= KILL_AFTER, (stream.error, stream.events[-3:])
        # the worker streaming it: the one (not a prefill worker: its part ended at the KV handoff) whose request
        # count went up, by its own metrics
        after = {p.name: rehearsal.worker_requests(cmd._metrics(p.metrics_port)) for p in plan.workers}
        serving = [p.name for p in plan.workers if after[p.name] > before[p.name] and p.role != "prefill"]
        assert len(serving) == 1, (before, after)
        victim = procs.procs[serving[0]]
        os.killpg(victim.pid, signal.SIGKILL)
        sent_before_kill = len(stream.tokens())
        assert victim.wait(timeout=10) == -signal.SIGKILL
        stream.thread.join(STREAM_TIMEOUT)
        assert not stream.thread.is_alive(), "the stream neither ended nor failed"
    finally:
        procs.stop_all()
    frontend_log = (logs / "frontend.log").read_text(errors="replace")
    assert stream.error is None, stream.error
    assert sent_before_kill < MAX_TOKENS, "the response ended before the worker was killed: nothing was tested"
    if limit is None:   # migrated: every token, one finished response, no error, the frontend moved it
        assert stream.errors() == [] and stream.events[-1] == "[DONE]"
        assert len(stream.tokens()) == MAX_TOKENS and stream.finish_reasons() == ["length"]
        assert "Stream disconnected, recreating stream" in frontend_log
        assert "migration retry scheduled" in frontend_log
    else:               # the old form: the client gets the tokens sent so far, then Dynamo's error event
        assert [e.get("code") for e in stream.errors()] == [503], stream.events[-3:]
        assert sent_before_kill <= len(stream.tokens()) < MAX_TOKENS and stream.finish_reasons() == []
        assert "migration retries exhausted" in frontend_log
    deadline = time.monotonic() + 5
    while leftovers(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(out) == []
