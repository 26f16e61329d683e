"""rehearse.py -> processes.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import urllib.request
from contextlib import closing
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import unquote

from kimi_k3.config.stack_files import project_root
from kimi_k3.rehearsal import metrics
from kimi_k3.rehearsal import plan as rehearsal

VENV_ENV = "KIMI_K3_REHEARSE_PYTHON"  # python of the rehearsal venv (default: .venv-rehearse/bin/python)


NETNS_ENV = "KIMI_K3_REHEARSE_NETNS"  # set once the command runs inside its own network namespace


MARKER_ENV = "KIMI_K3_REHEARSAL"  # set in every child: tests find leftovers by it in /proc/*/environ


FIXTURE = Path(rehearsal.__file__).with_name("fixture.py")


BROKER = Path(rehearsal.__file__).with_name("broker.py")  # the event plane's loopback-only broker


class RehearsalFailed(Exception):
    """The graph did not come up, a process died, or a step failed: the message names what."""


class Interrupted(BaseException):
    """SIGTERM/SIGHUP, handled like Ctrl-C."""


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
    try:  # held open until all are chosen, so the n are distinct
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
        raise RehearsalFailed(
            f"no rehearsal environment at {path}: run `make rehearse STACK=...` (it builds "
            f".venv-rehearse with ai-dynamo, ai-dynamo-runtime and aiperf pinned in "
            f"requirements-rehearse.txt), or set {VENV_ENV}"
        )
    return path


class Processes:
    """Children in their own process groups, so one signal reaches everything each of them started."""

    def __init__(self, logs: Path, env: dict[str, str], say: Callable[[str], None]):
        self.logs, self.env, self.say = logs, env, say
        self.procs: dict[str, subprocess.Popen] = {}

    def start(
        self, name: str, argv: list[str], extra_env: dict[str, str] | None = None, cwd: Optional[Path] = None
    ) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "wb")
        try:
            proc = subprocess.Popen(
                argv,
                env={**self.env, **(extra_env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=cwd,
            )
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
        return metrics.parse_prometheus(_get(f"http://{rehearsal.LOOPBACK}:{port}/metrics"))
    except OSError:
        return []


def _discovery_keys(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return [unquote(str(p.relative_to(root))) for p in root.rglob("*") if p.is_file()]


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
