"""`kimi-k3 rehearse` with real processes: the Dynamo frontend + KV router, dynamo.mocker workers and AIPerf, for
every stack; and that nothing it started outlives it, on success, on failure and on interrupt.

Marked `rehearse` (deselected in `make test`); `make test-rehearse` builds .venv-rehearse and runs this file."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, STACKS

pytestmark = pytest.mark.rehearse

PYTHON = Path(os.environ.get("KIMI_K3_REHEARSE_PYTHON", ROOT / ".venv-rehearse" / "bin" / "python"))
MARKER = "KIMI_K3_REHEARSAL"


@pytest.fixture(scope="module", autouse=True)
def rehearsal_venv():
    if not PYTHON.is_file():
        pytest.fail(f"{PYTHON} missing: run `make test-rehearse` (it builds .venv-rehearse first)")


def leftovers(out: Path) -> list[str]:
    """Processes (any descendant: the marker is inherited) still carrying this run's marker."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{MARKER}={out}".encode() in env:
            found.append(f"{pid}: {cmd[:120]}")
    return found


def listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _inet(hex_addr: str) -> str:
    """/proc/net/tcp{,6} "0100007F:1F90" -> "127.0.0.1" (the address only)."""
    import ipaddress

    raw = bytes.fromhex(hex_addr.split(":")[0])
    # the kernel prints each 32-bit word in host (little-endian) order
    return str(ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))))


def listeners_of_run(out: Path) -> dict[str, set[str]]:
    """Every listening TCP socket (and bound UDP socket) of the run's processes: {"PID command": {address:port}},
    read from each process's own network namespace's tables and matched to the sockets it holds."""
    found: dict[str, set[str]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if f"{MARKER}={out}".encode() not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                continue
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
            inodes = set()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
                if m:
                    inodes.add(m.group(1))
            for table in ("tcp", "tcp6", "udp", "udp6"):
                for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                    f = line.split()
                    if f[9] in inodes and (table.startswith("udp") or f[3] == "0A"):
                        found.setdefault(f"{pid} {cmd}", set()).add(f"{_inet(f[1])}:{int(f[1].rsplit(':', 1)[1], 16)}")
        except OSError:  # the process ended while we looked
            continue
    return found


def rehearse(out: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kimi_k3", "rehearse", *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_no_leftovers(out: Path) -> None:
    """No process of this run left, 5 s after it was told to stop."""
    deadline = time.monotonic() + 5
    while leftovers(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(out) == []


def assert_nothing_left(out: Path) -> None:
    assert_no_leftovers(out)
    ports = {p["metrics_port"] for p in json.loads((out / "processes.json").read_text())}
    assert not ports & listening_ports()
    assert not Path(json.loads((out / "report.json").read_text())["scratch_dir"]).exists()


@pytest.mark.parametrize("stack", STACKS)
def test_rehearse_every_stack(stack, tmp_path):
    out = tmp_path / stack
    # briefly: both AIPerf runs on the largest graph, the agentic one elsewhere
    runs = "agentic,synthetic" if stack == "gb300-disagg" else "agentic"
    result = rehearse(
        out,
        stack,
        "--requests",
        "8",
        "--duration",
        "60",
        "--concurrency",
        "2",
        "--system-prompt-tokens",
        "2048",
        "--turns",
        "4",
        "--runs",
        runs,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["stack"] == stack and report["failure"] is None
    assert 0 < report["ready_seconds"] < 240
    for w in report["workers"]:
        assert w["registered"] == w["replicas"] >= 1
    assert report["smoke"]["passed"] and all(report["smoke"]["checks"].values())
    assert len(report["smoke"]["checks"]) == 5
    load = report["load"]
    assert load["requests"] == 8 and load["output_tokens_per_second"] > 0
    assert 0 < load["ttft_ms"]["p50"] <= load["ttft_ms"]["p90"] <= load["ttft_ms"]["p99"]
    assert 0 < load["itl_ms"]["p50"] <= load["itl_ms"]["p99"]
    assert list(report["runs"]) == runs.split(",")
    assert all(r["requests"] == 8 for r in report["runs"].values())
    assert 0 < report["kv_hit_rate"] <= 1  # the agentic run shares a 2048-token system prompt
    handled = report["worker_requests"]
    assert set(handled) == {f"{w['role']}-{i}" for w in report["workers"] for i in range(w["replicas"])}
    assert all(n > 0 for n in handled.values()), handled  # the KV router used every replica
    if "prefill" in report["roles"]:
        assert report["prefill_decode_requests"]["prefill"] > 0 and report["prefill_decode_requests"]["decode"] > 0
    for png in ("latency.png", "workers.png", "agentic_ttft.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "passed" in md.splitlines()[0] and "fixture tokenizer" in md
    logs = {p.name for p in (out / "logs").iterdir()}
    assert {"frontend.log", *(f"aiperf-{r}.log" for r in runs.split(","))} <= logs
    assert "graph ready" in result.stdout and "stopped" in result.stdout
    assert_nothing_left(out)


def test_every_mocker_and_frontend_argv_is_accepted_by_the_installed_parsers(tmp_path):
    """Parse each stack's argv with dynamo.mocker's and dynamo.frontend's own parsers (1.6.1), in their venv."""
    from kimi_k3.blueprint import load_stack
    from kimi_k3.graph import role_plans
    from kimi_k3.rehearsal import plan as rehearsal

    argvs = {"mocker": [], "frontend": []}
    for stack in STACKS:
        _, graph = load_stack(stack, ROOT)
        plan = rehearsal.plan_rehearsal(
            graph,
            role_plans.role_kv_plans(graph),
            http_port=18000,
            metrics_ports=range(21000, 21100),
            model_path=str(tmp_path),
        )
        argvs["frontend"].append(list(plan.processes[0].args))
        argvs["mocker"] += [list(r.args) for r in plan.roles]
    script = """
import json, sys
from dynamo.mocker.args import parse_args
from dynamo.frontend.main import parse_args as parse_frontend
argvs = json.load(sys.stdin)
for argv in argvs["mocker"]:
    a = parse_args(argv)
    assert a.num_gpu_blocks > 0 and a.block_size > 0 and a.enable_prefix_caching, argv
for argv in argvs["frontend"]:
    sys.argv = ["dynamo.frontend", *argv]
    parse_frontend()
print("parsed", len(argvs["mocker"]), len(argvs["frontend"]))
"""
    env = {**os.environ, "DYN_FILE_KV": str(tmp_path / "kv")}
    result = subprocess.run(
        [str(PYTHON), "-c", script], input=json.dumps(argvs), capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "parsed 6 4" in result.stdout


def test_graph_that_never_comes_up_fails_names_why_and_cleans_up(tmp_path):
    out = tmp_path / "timeout"
    # 0.1 s: no Python process of the graph has even imported the runtime by then (an idle machine is ready
    # in ~0.7 s), so this is a graph that is not ready within its budget, whatever the machine's load
    result = rehearse(out, "gb300", "--ready-timeout", "0.1", "--no-load", timeout=120)
    assert result.returncode == 1
    assert "graph not ready after" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["ready_seconds"] is None and "graph not ready" in report["failure"]
    assert "FAILED" in (out / "report.md").read_text().splitlines()[0]
    assert_nothing_left(out)


def test_worker_that_dies_fails_names_it_and_cleans_up(tmp_path):
    out = tmp_path / "dies"
    # a perf profile the mocker cannot read (an empty file): every mocker exits at startup
    bad = tmp_path / "empty.npz"
    bad.write_bytes(b"")
    result = rehearse(out, "gb300-disagg", "--perf-profile", str(bad), "--no-load", timeout=120)
    assert result.returncode == 1
    report = json.loads((out / "report.json").read_text())
    assert "exited with code" in report["failure"] and report["failure"].split()[0] in {
        "prefill-0",
        "decode-0",
        "decode-1",
    }
    assert_nothing_left(out)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_everything(tmp_path, sig):
    out = tmp_path / f"interrupt-{sig.name}"
    # its own process group, as a shell runs a foreground job: Ctrl-C sends SIGINT to that group
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kimi_k3",
            "rehearse",
            "gb300-disagg",
            "--out",
            str(out),
            "--requests",
            "200",
            "--duration",
            "300",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "AIPerf agentic" in line:  # graph up, load running: the most processes alive
                break
        time.sleep(3)
        assert leftovers(out), "".join(seen)
        os.killpg(proc.pid, sig)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest and "stopped" in rest
    assert json.loads((out / "report.json").read_text())["failure"] == "interrupted"
    assert_nothing_left(out)


def test_host_network_fallback_serves_on_loopback(tmp_path):
    """Where no private network namespace can be made, the same run uses the host's loopback addresses."""
    out = tmp_path / "host"
    result = rehearse(out, "gb200", "--host-network", "--no-load", timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["network"] == "host loopback" and report["smoke"]["passed"]
    # every address the runtime says it serves on or advertises (its own log lines), across all processes
    logs = re.sub(r"\x1b\[[0-9;]*m", "", "".join(p.read_text(errors="replace") for p in (out / "logs").iterdir()))
    addresses = re.findall(r"shared TCP server on ([0-9.]+):", logs) + re.findall(
        r"public_endpoint=tcp://([0-9.]+):", logs
    )
    assert addresses and set(addresses) == {"127.0.0.1"}, addresses
    assert_nothing_left(out)


def test_every_listening_socket_is_on_loopback(tmp_path):
    """On the host's network, where it matters: every socket any process of the run listens on (frontend, mockers,
    the event-plane broker, AIPerf) is bound to 127.0.0.1, sampled through the whole run. Dynamo's direct ZMQ
    publishers bound 0.0.0.0 (three per mocker) before the event plane went through the loopback broker."""
    out = tmp_path / "sockets"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kimi_k3",
            "rehearse",
            "gb300-disagg",
            "--out",
            str(out),
            "--host-network",
            "--runs",
            "agentic",
            "--requests",
            "16",
            "--duration",
            "60",
            "--concurrency",
            "4",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: dict[str, set[str]] = {}
    try:
        deadline = time.monotonic() + 400
        while proc.poll() is None and time.monotonic() < deadline:
            for cmd, addrs in listeners_of_run(out).items():
                seen.setdefault(cmd, set()).update(addrs)
            time.sleep(0.3)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stdout[-3000:]
    kinds = {
        k for k in ("rehearsal/broker.py", "dynamo.frontend", "dynamo.mocker", "aiperf") if any(k in c for c in seen)
    }
    assert kinds >= {"rehearsal/broker.py", "dynamo.frontend", "dynamo.mocker"}, seen
    assert sum("dynamo.mocker" in c for c in seen) == 3, seen  # 1 prefill + 2 decode, each sampled
    outside = {cmd: sorted(a for a in addrs if not a.startswith(("127.0.0.1:", "::1:"))) for cmd, addrs in seen.items()}
    assert not any(outside.values()), {c: a for c, a in outside.items() if a}
    assert_nothing_left(out)


def test_real_frontend_readiness_with_the_prefill_worker_late(tmp_path):
    """Against Dynamo 1.6.1 itself, what tests/live/test_rehearse_ready.py scripts: with only the decode workers up,
    the frontend's /v1/models/{model}/ready answers 503 naming the missing prefill type and wait_ready does not
    call the graph ready; once the prefill worker starts late, it does, with the frontend's own count of every
    replica, the probe went through a prefill worker (nvext.worker_id), and the next chat completion is served."""
    from kimi_k3.blueprint import load_stack
    from kimi_k3.graph import role_plans
    from kimi_k3.pods import smoke
    from kimi_k3.rehearsal import plan as rehearsal
    from kimi_k3.rehearsal import processes, ready

    out = tmp_path / "late-prefill"
    logs, model, discovery = out / "logs", out / "model", out / "discovery"
    logs.mkdir(parents=True)
    _, graph = load_stack("gb300-disagg", ROOT)
    http_port, xsub, xpub, *metrics_ports = processes.free_ports(6)
    plan = rehearsal.plan_rehearsal(
        graph, role_plans.role_kv_plans(graph), http_port=http_port, metrics_ports=metrics_ports, model_path=str(model)
    )
    broker = (xsub, xpub)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DYN_", "HF_"))}
    env.update(rehearsal.loopback_env(str(discovery), broker))
    env[MARKER] = str(out)
    subprocess.run(
        [str(PYTHON), str(processes.FIXTURE), str(model), str(plan.max_model_len)], env=env, check=True, timeout=120
    )
    procs = processes.Processes(logs, env, print)
    said: list[str] = []
    try:
        procs.start("zmq-broker", [str(PYTHON), str(processes.BROKER), *map(str, broker)])
        late = [p for p in plan.processes if p.role == "prefill"]
        for p in plan.processes:
            if p not in late:
                procs.start(p.name, [str(PYTHON), "-m", p.module, *p.args], dict(p.env))
        client, deadline = smoke.Client(plan.url, 10), time.monotonic() + 120
        while time.monotonic() < deadline:  # until the frontend has seen both decode workers
            try:
                status, body = client.json("GET", smoke.ready_path(plan.served_model_name))
            except OSError:
                status, body = None, None
            if status == 503 and smoke.frontend_workers(body) == {"decode": 2}:
                break
            time.sleep(0.25)
        assert (
            status == 503
            and body["ready"] is False
            and body["namespaces"]["dynamo"]["missing_worker_types"] == ["prefill"]
        ), body
        with pytest.raises(processes.RehearsalFailed) as err:
            ready.wait_ready(plan, procs, discovery, 3, said.append, time.monotonic())
        assert "missing worker types ['prefill']" in str(err.value), "\n".join(said)
        for p in late:
            procs.start(p.name, [str(PYTHON), "-m", p.module, *p.args], dict(p.env))
        state = ready.wait_ready(plan, procs, discovery, 120, said.append, time.monotonic())
        assert state.frontend_workers == {"decode": 2, "prefill": 1}
        assert state.registered == {"backend": 2, "prefill": 1}
        assert smoke.check_chat(smoke.Client(plan.url, 30), plan.served_model_name, plan.max_model_len) is None
        status, body = smoke.Client(plan.url, 30).json(
            "POST", "/v1/chat/completions", smoke.probe_request(plan.served_model_name, which_workers=True)
        )
        assert status == 200 and body["nvext"]["worker_id"]["prefill_worker_id"], body
    finally:
        procs.stop_all()
    assert_no_leftovers(out)
