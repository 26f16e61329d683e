"""When `kimi-k3 rehearse` calls the graph ready: only once the frontend can route a request through every role.

Dynamo 1.6.1 lists a disaggregated model (GET /v1/models) and reports it ready (GET /v1/models/{model}/ready) as
soon as a prefill and a decode worker have registered, but builds the decode set's prefill router afterwards;
a request in between gets 503 "Service temporarily unavailable" (dynamo-llm 1.6.1 src/kv_router/prefill_router/
mod.rs, ActivationSnapshot::Pending). The old criterion (workers registered + model listed) declared the graph
ready in that window and the smoke test's first chat completion got the 503 (seen in CI-like load).

These tests run `wait_ready` against a scripted frontend that answers like Dynamo 1.6.1 did on this machine
(bodies copied from its responses; tests/live/test_rehearse_live.py checks the real frontend's readiness route).
Marked `rehearse`: `make test-rehearse` runs them with the live lane."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import ROOT

from kimi_k3.blueprint import load_stack
from kimi_k3.graph import role_plans
from kimi_k3.pods import smoke
from kimi_k3.rehearsal import plan as rehearsal
from kimi_k3.rehearsal import processes
from kimi_k3.rehearsal import ready as rehearsal_ready

pytestmark = pytest.mark.rehearse

MODEL = "moonshotai/Kimi-K3"
# What Dynamo 1.6.1's frontend answered on this machine (frontend log: "migration retries exhausted ...
# migration.reason=worker_unavailable" while the prefill router was still activating).
ACTIVATING_503 = {"message": "Service temporarily unavailable", "type": "Service Unavailable", "code": 503}
NOT_READY_503 = {
    "message": f"Model `{MODEL}` is not ready to serve requests yet. The deployment may still be "
    "starting up or is not fully provisioned. Please retry shortly.",
    "type": "Service Unavailable",
    "code": 503,
}


def ready_body(decode: int, prefill: int) -> dict[str, Any]:
    """GET /v1/models/{model}/ready as Dynamo 1.6.1 shapes it (ModelReadiness / NamespaceReadiness)."""
    types = {}
    if decode:
        types["decode"] = {"workers": decode, "needs": [["prefill"]]}
    if prefill:
        types["prefill"] = {"workers": prefill, "needs": [["decode"]]}
    missing = [t for t, n in (("decode", decode), ("prefill", prefill)) if not n]
    ready = not missing
    return {
        "model": MODEL,
        "ready": ready,
        "namespaces": {
            "dynamo": {"ready": ready, "worker_types": types, "present": sorted(types), "missing_worker_types": missing}
        },
    }


class FakeFrontend:
    """A frontend whose state the test moves through Dynamo's phases: decode/prefill workers it sees, and
    whether the prefill router has been built (until then chat completions get the activation 503)."""

    def __init__(self) -> None:
        self.decode, self.prefill, self.activated = 0, 0, False
        self.chats: list[int] = []
        self.served_by_prefill = True
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def send(self, status: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                listed = fake.decode > 0 and fake.prefill > 0
                if self.path == "/v1/models":
                    self.send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}] if listed else []})
                elif self.path == "/v1/models/" + quote(MODEL, safe="/") + "/ready":
                    if not (fake.decode or fake.prefill):
                        self.send(404, {"message": "Model not found", "type": "Not Found", "code": 404})
                    else:
                        body = ready_body(fake.decode, fake.prefill)
                        self.send(200 if body["ready"] else 503, body)
                else:
                    self.send(404, {"message": "Route not found", "code": 404})

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not (fake.decode and fake.prefill):
                    status, body = 503, NOT_READY_503
                elif not fake.activated:
                    status, body = 503, ACTIVATING_503
                else:
                    n = len(request["messages"][0]["content"])
                    status, body = (
                        200,
                        {
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": "ok"},
                                    "finish_reason": "length",
                                }
                            ],
                            "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1},
                        },
                    )
                    if "worker_id" in (request.get("nvext") or {}).get("extra_fields", []):
                        body["nvext"] = {
                            "worker_id": {
                                "decode_worker_id": 7,
                                **({"prefill_worker_id": 3} if fake.served_by_prefill else {}),
                            }
                        }
                fake.chats.append(status)
                self.send(status, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def frontend():
    fake = FakeFrontend()
    yield fake
    fake.close()


def disagg_plan(port: int, tmp_path: Path) -> rehearsal.Rehearsal:
    _, graph = load_stack("gb300-disagg", ROOT)
    return rehearsal.plan_rehearsal(
        graph,
        role_plans.role_kv_plans(graph),
        http_port=port,
        metrics_ports=range(21000, 21100),
        model_path=str(tmp_path / "model"),
    )


def register(discovery: Path, component: str, n: int) -> None:
    """The file discovery keys a worker writes (v1/instances/<ns>/<component>/generate/<id>)."""
    for i in range(n):
        key = discovery / "v1" / "instances" / "dynamo" / component / "generate" / f"{component}{i}"
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_text("{}")


def no_processes(tmp_path: Path) -> processes.Processes:
    (tmp_path / "logs").mkdir(exist_ok=True)
    return processes.Processes(tmp_path / "logs", {}, print)


def in_background(*steps: tuple[float, Any]) -> threading.Thread:
    """Run each (delay, action) in turn on a thread: the graph coming up while wait_ready watches."""

    def run() -> None:
        for delay, action in steps:
            time.sleep(delay)
            action()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_not_ready_while_the_prefill_router_is_activating(frontend, tmp_path):
    """Every worker registered and the model listed and reported ready, but Dynamo still refuses requests (its
    prefill router is being built): the graph is not ready until a request is served, and the smoke test's first
    chat completion then succeeds. The old criterion (registered + listed) returned at once; the chat got 503."""
    plan = disagg_plan(frontend.port, tmp_path)
    discovery = tmp_path / "discovery"
    register(discovery, "backend", 2)
    register(discovery, "prefill", 1)
    frontend.decode, frontend.prefill = 2, 1
    said: list[str] = []
    t = in_background((0.6, lambda: setattr(frontend, "activated", True)))
    state = rehearsal_ready.wait_ready(plan, no_processes(tmp_path), discovery, 30, said.append, time.monotonic())
    assert smoke.check_chat(smoke.Client(plan.url, 10), MODEL, plan.max_model_len) is None, frontend.chats
    t.join()
    assert frontend.chats[-2:] == [200, 200]  # the probe, then the smoke test's request
    # the refused probes were logged with Dynamo's answer, and counted in the report's readiness
    assert state.probes == len(frontend.chats) - 1 >= 2
    assert len(state.probe_failures) == state.probes - 1
    assert all("503" in f and "Service temporarily unavailable" in f for f in state.probe_failures)
    assert any("routing probe 1 refused" in line for line in said)
    assert state.frontend_workers == {"decode": 2, "prefill": 1}


def test_not_ready_until_the_frontend_sees_every_replica(frontend, tmp_path):
    """Registered in discovery is not seen by the frontend: wait for the frontend's own count of every role."""
    plan = disagg_plan(frontend.port, tmp_path)
    discovery = tmp_path / "discovery"
    register(discovery, "backend", 2)
    register(discovery, "prefill", 1)
    frontend.decode, frontend.prefill, frontend.activated = 1, 1, True  # listed, routable, one decode missing
    said: list[str] = []
    t = in_background((0.6, lambda: setattr(frontend, "decode", 2)))
    started = time.monotonic()
    state = rehearsal_ready.wait_ready(plan, no_processes(tmp_path), discovery, 30, said.append, started)
    assert time.monotonic() - started >= 0.5
    t.join()
    assert state.frontend_workers == {"decode": 2, "prefill": 1}
    assert "live workers the frontend sees: decode 1/2" in "\n".join(said)


def test_prefill_worker_registering_late(frontend, tmp_path):
    """Decode workers first, the prefill worker seconds later, then the activation window: ready after all."""
    plan = disagg_plan(frontend.port, tmp_path)
    discovery = tmp_path / "discovery"
    register(discovery, "backend", 2)
    frontend.decode = 2
    said: list[str] = []
    t = in_background(
        (0.8, lambda: register(discovery, "prefill", 1)),
        (0.2, lambda: setattr(frontend, "prefill", 1)),
        (0.5, lambda: setattr(frontend, "activated", True)),
    )
    state = rehearsal_ready.wait_ready(plan, no_processes(tmp_path), discovery, 30, said.append, time.monotonic())
    t.join()
    assert smoke.check_chat(smoke.Client(plan.url, 10), MODEL, plan.max_model_len) is None
    assert state.registered == {"backend": 2, "prefill": 1}
    text = "\n".join(said)
    assert "missing worker types ['prefill']" in text  # what the frontend said while prefill was absent
    assert "prefill workers registered: 1/1" in text


def test_graph_the_frontend_never_routes_fails_in_time_naming_the_refusal(frontend, tmp_path):
    """Listed and reported ready, but every request refused: not ready within --ready-timeout, and the failure
    says what the frontend answered (the old criterion called this graph ready)."""
    plan = disagg_plan(frontend.port, tmp_path)
    discovery = tmp_path / "discovery"
    register(discovery, "backend", 2)
    register(discovery, "prefill", 1)
    frontend.decode, frontend.prefill = 2, 1
    started = time.monotonic()
    with pytest.raises(processes.RehearsalFailed) as err:
        rehearsal_ready.wait_ready(plan, no_processes(tmp_path), discovery, 1.5, lambda s: None, started)
    assert time.monotonic() - started < 5
    assert "graph not ready after 1.5 s" in str(err.value)
    assert "routing probe" in str(err.value) and "Service temporarily unavailable" in str(err.value)


def test_disaggregated_probe_must_go_through_a_prefill_worker(frontend, tmp_path):
    """A 200 that Dynamo says no prefill worker served (decode-only fallback) is not a disaggregated graph up."""
    plan = disagg_plan(frontend.port, tmp_path)
    discovery = tmp_path / "discovery"
    register(discovery, "backend", 2)
    register(discovery, "prefill", 1)
    frontend.decode, frontend.prefill, frontend.activated, frontend.served_by_prefill = 2, 1, True, False
    with pytest.raises(processes.RehearsalFailed) as err:
        rehearsal_ready.wait_ready(plan, no_processes(tmp_path), discovery, 1.0, lambda s: None, time.monotonic())
    assert "served without a prefill worker" in str(err.value)


def test_topology_verdict_reads_dynamos_readiness_body():
    assert smoke.topology_verdict(200, ready_body(2, 1), {"decode": 2, "prefill": 1}) is None
    assert (
        smoke.topology_verdict(200, ready_body(1, 1), {"decode": 2, "prefill": 1})
        == "live workers the frontend sees: decode 1/2"
    )
    assert "missing worker types ['prefill']" in smoke.topology_verdict(503, ready_body(2, 0), None)
    assert smoke.topology_verdict(404, {"message": "Model not found"}, None).startswith(
        "GET /v1/models/<model>/ready -> 404"
    )
    assert smoke.frontend_workers(ready_body(2, 1)) == {"decode": 2, "prefill": 1}
    assert smoke.frontend_workers("not json") == {}


def test_cluster_smoke_job_waits_for_the_same(frontend, tmp_path):
    """The in-cluster smoke Job's --wait-seconds uses the same readiness: listed, /ready, one probe served."""
    frontend.decode, frontend.prefill = 2, 1
    said: list[str] = []
    t = in_background((0.3, lambda: setattr(frontend, "activated", True)))
    assert smoke.wait_until_served(f"http://127.0.0.1:{frontend.port}", MODEL, 20, said.append)
    t.join()
    assert frontend.chats[-1] == 200 and 503 in frontend.chats
    assert any("Service temporarily unavailable" in line for line in said)


def test_ports_are_distinct_and_below_the_ephemeral_range():
    """The frontend, broker and worker ports are chosen before those processes bind them: outside the range the
    kernel hands out for outgoing connections and port-0 binds, so no other socket of the run can take one."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = processes.free_ports(40)
    assert len(set(ports)) == 40 and all(p < min(low, 32768) for p in ports)


def test_ready_reports_every_registration_the_frontend_saw(frontend, tmp_path):
    """The frontend can see a worker whose discovery key appeared after the loop's own read (seen in the live
    lane: report.json said 1 of 2 decode workers registered): ready also needs every key, read again."""
    plan = disagg_plan(frontend.port, tmp_path)
    discovery = tmp_path / "discovery"
    register(discovery, "backend", 1)
    register(discovery, "prefill", 1)
    frontend.decode, frontend.prefill, frontend.activated = 2, 1, True
    t = in_background((0.5, lambda: register(discovery, "backend", 2)))
    state = rehearsal_ready.wait_ready(plan, no_processes(tmp_path), discovery, 30, lambda s: None, time.monotonic())
    t.join()
    assert state.registered == {"backend": 2, "prefill": 1}
