"""What a multinode vLLM worker pod really runs: the Dynamo operator's launch rewrite, kubelet's $(VAR)
expansion and `sh -c` word expansion, emulated as pure functions so tests and rules can assert the argv
every pod receives.

Sources (ai-dynamo/dynamo, deploy/operator/internal/dynamo/):
- backend_vllm.go @ 003d1ee5de27986d5265b7a4bedb1e9241974034: UpdateContainer -> updateVLLMMultinodeArgs;
  injectMpDistributedLaunchFlags (leader: `--distributed-executor-backend mp --nnodes N --master-addr HOST
  --master-port 29500 --node-rank 0`, workers: `... --node-rank RANK --headless`, needsShell from the deployer);
  injectRayDistributedLaunchFlags (leader: `ray start --head ... && <quoted command+args> --distributed-executor-
  backend ray` under /bin/sh -c; workers: `ray start --address=HOST:6379 --block`).
- mutation/command_line.go @ 62eeb052698a5379259e5e9968721670da6f303c: ShellQuote and
  injectFlagsIntoContainerCommand: a python Command with needsShell becomes
  `sh -c "exec <ShellQuote(command)> <ShellQuote(args)> <flags>"`; otherwise flags are appended to Args; a
  shell Command gets the flags inserted after `python... <framework>` inside its script.
- grove.go @ 015d780ba9c3d32c293ad67b786fe9af0d8a4d22: GroveMultinodeDeployer: leader host
  `$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-<service>-ldr-0.$(GROVE_HEADLESS_SERVICE)`, node rank
  `$((GROVE_PCLQ_POD_INDEX + 1))` with needsShell = true.
- kubernetes/kubernetes third_party/forked/golang/expansion/expand.go @ fde22c3f9aacfd260225a9741de123a41157b7c0:
  kubelet expands `$(VAR)` in command/args before the process starts; `$$` is the only escape; an undefined
  reference stays as written.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal, Mapping, Optional, Sequence

MASTER_PORT = "29500"  # commonconsts.VLLMMpMasterPort
RAY_PORT = "6379"  # backend_vllm.go VLLMPort
LEADER_SUFFIX = "ldr"  # commonconsts.GroveRoleSuffixLeader
BACKEND_ANNOTATION = (
    "nvidia.com/vllm-distributed-executor-backend"  # commonconsts.KubeAnnotationVLLMDistributedExecutorBackend
)
GROVE_NODE_RANK = "$((GROVE_PCLQ_POD_INDEX + 1))"
_QUOTE_TRIGGERS = " \t\n'\"\\{}[]$`!"
_PYTHON = re.compile(r"^(.*/)?(python\d*(\.\d+)*)$")
SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash"})

PodRole = Literal["leader", "worker"]


class UnsupportedShell(ValueError):
    """The script uses shell syntax this emulation does not evaluate (it never guesses)."""


class ShellSyntaxError(UnsupportedShell):
    """sh itself rejects the script (e.g. an unterminated quote): the container exits at once with status 2."""


# ------------------------------------------------------------------------------------------------ operator
def shell_quote(value: str) -> str:
    """mutation.ShellQuote: values with special characters go in double quotes with \\ \" $ ` escaped."""
    if not any(c in value for c in _QUOTE_TRIGGERS):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    escaped = escaped.replace("'", "'\"'\"'")
    return f'"{escaped}"'


def is_python_command(command: str) -> bool:
    return bool(_PYTHON.match(command))


def grove_leader_hostname(service_name: str) -> str:
    return f"$(GROVE_PCSG_NAME)-$(GROVE_PCSG_INDEX)-{service_name.lower()}-{LEADER_SUFFIX}-0.$(GROVE_HEADLESS_SERVICE)"


def _inject_into_script(script: str, flags: str, framework: str = "vllm") -> str:
    """injectFlagsIntoPythonCommand: flags go after the first `python... <framework>` token run of the script."""
    pattern = re.compile(r"(python[0-9.]*\s+[^|&;]*" + framework + r"[^|&;]*?)(\s|$|[|&;])")

    def sub(match: re.Match) -> str:
        return f"{match.group(1).strip()} {flags}{match.group(2)}"

    return pattern.sub(sub, script)


def _inject(command: list[str], args: list[str], flags: str, needs_shell: bool) -> tuple[list[str], list[str]]:
    if command and is_python_command(command[0]):
        if needs_shell:
            line = " ".join(shell_quote(t) for t in command)
            if args:
                line += " " + " ".join(shell_quote(a) for a in args)
            return ["sh", "-c"], [f"exec {line} {flags}"]
        return command, args + flags.split()
    for i, arg in enumerate(args):
        modified = _inject_into_script(arg, flags)
        if modified != arg:
            return command, args[:i] + [modified] + args[i + 1 :]
    return command, args


def rewrite_vllm_multinode(
    command: Sequence[str],
    args: Sequence[str],
    role: PodRole,
    service_name: str,
    number_of_nodes: int,
    backend: Literal["mp", "ray"] = "mp",
) -> tuple[list[str], list[str]]:
    """(command, args) the operator gives one pod of a multinode vLLM component deployed with Grove."""
    command, args = [str(c) for c in command], [str(a) for a in args]
    leader = grove_leader_hostname(service_name)
    if backend == "ray":
        if role == "leader":
            line = " ".join(shell_quote(t) for t in command) + " " + " ".join(shell_quote(a) for a in args)
            return ["/bin/sh", "-c"], [
                f"ray start --head --port={RAY_PORT} && {line} --distributed-executor-backend ray"
            ]
        return ["/bin/sh", "-c"], [f"ray start --address={leader}:{RAY_PORT} --block"]
    flags = f"--distributed-executor-backend mp --nnodes {number_of_nodes} --master-addr {leader} --master-port {MASTER_PORT}"
    if role == "leader":
        return _inject(command, args, flags + " --node-rank 0", needs_shell=False)
    return _inject(command, args, flags + f" --node-rank {GROVE_NODE_RANK} --headless", needs_shell=True)


# ------------------------------------------------------------------------------------------------ kubelet
def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """expansion.Expand with MappingFuncFor(env): `$$` -> `$`, `$(NAME)` -> value or left as written."""
    out: list[str] = []
    checkpoint, cursor = 0, 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                read, advance = "$", 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    read, advance = "$(", 1
                else:
                    name = rest[1:close]
                    read, advance = (env[name] if name in env else f"$({name})"), close + 1
            else:
                read, advance = "$" + rest[0], 1
            out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def container_env_map(env_entries: Sequence[Mapping], extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """Env name -> value as kubelet builds it (each value expanded with the ones before; valueFrom unknown)."""
    env: dict[str, str] = dict(extra or {})
    for entry in env_entries:
        if "value" in entry and entry["value"] is not None:
            env[entry["name"]] = kubelet_expand(str(entry["value"]), env)
        else:
            env[entry["name"]] = f"<{entry['name']}>"  # from a Secret/ConfigMap/field: a stand-in value
    return env


# ------------------------------------------------------------------------------------------------ sh -c
_ARITH = re.compile(r"^\s*(\w+)\s*([-+*])\s*(\w+)\s*$")


def _arith(expr: str, env: Mapping[str, str]) -> str:
    m = _ARITH.match(expr)
    if not m:
        raise UnsupportedShell(f"arithmetic {expr!r}")

    def val(tok: str) -> int:
        return int(tok) if tok.isdigit() else int(env.get(tok) or 0)

    a, op, b = val(m.group(1)), m.group(2), val(m.group(3))
    return str(a + b if op == "+" else a - b if op == "-" else a * b)


def _param(script: str, i: int, env: Mapping[str, str]) -> tuple[str, int]:
    """Expand the `$...` at script[i]; returns (text, next index)."""
    nxt = script[i + 1] if i + 1 < len(script) else ""
    if script.startswith("$((", i):
        end = script.find("))", i + 3)
        if end == -1:
            raise UnsupportedShell("unterminated $((")
        return _arith(script[i + 3 : end], env), end + 2
    if nxt == "(":
        raise UnsupportedShell("command substitution $(...)")
    if nxt == "{":
        end = script.find("}", i + 2)
        name = script[i + 2 : end]
        if end == -1 or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise UnsupportedShell(f"parameter expansion {script[i : end + 1]!r}")
        return env.get(name, ""), end + 1
    m = re.match(r"[A-Za-z_]\w*", script[i + 1 :])
    if m:
        return env.get(m.group(0), ""), i + 1 + m.end()
    return "$", i + 1


def sh_c_argv(script: str, env: Mapping[str, str]) -> list[str]:
    """The argv of the (last) simple command `sh -c SCRIPT` runs (POSIX quoting, parameter and arithmetic
    expansion, field splitting of unquoted expansions, `&&` lists). A leading `exec` is dropped. Anything else
    (pipes, `;`, `&`, redirections, command substitution) raises UnsupportedShell."""
    words: list[str] = []
    cur: list[str] = []
    has_word = False
    i, n = 0, len(script)

    def end_word() -> None:
        nonlocal cur, has_word
        if has_word:
            words.append("".join(cur))
        cur, has_word = [], False

    while i < n:
        c = script[i]
        if c in " \t\n":
            end_word()
            i += 1
        elif script.startswith("&&", i):  # `A && B`: the pod's process is the last command of the list
            end_word()
            words = []
            i += 2
        elif c in "|&;<>`":
            raise UnsupportedShell(f"{c!r} at offset {i}")
        elif c == "\\":
            if i + 1 < n and script[i + 1] == "\n":
                i += 2
                continue
            cur.append(script[i + 1] if i + 1 < n else "")
            has_word = True
            i += 2
        elif c == "'":
            end = script.find("'", i + 1)
            if end == -1:
                raise ShellSyntaxError("unterminated single quote")
            cur.append(script[i + 1 : end])
            has_word = True
            i = end + 1
        elif c == '"':
            has_word = True
            i += 1
            while True:
                if i >= n:
                    raise ShellSyntaxError("unterminated double quote")
                d = script[i]
                if d == '"':
                    i += 1
                    break
                if d == "\\" and i + 1 < n and script[i + 1] in '$`"\\\n':
                    if script[i + 1] != "\n":
                        cur.append(script[i + 1])
                    i += 2
                elif d == "$":
                    text, i = _param(script, i, env)
                    cur.append(text)
                elif d == "`":
                    raise UnsupportedShell("command substitution `...`")
                else:
                    cur.append(d)
                    i += 1
        elif c == "$":
            text, i = _param(script, i, env)
            fields = text.split()
            if fields:  # unquoted expansion: field splitting on blanks
                if text[:1].isspace():
                    end_word()
                cur.append(fields[0])
                has_word = True
                for f in fields[1:]:
                    end_word()
                    cur.append(f)
                    has_word = True
                if text[-1:].isspace():
                    end_word()
        else:
            cur.append(c)
            has_word = True
            i += 1
    end_word()
    if words and words[0] == "exec":
        words = words[1:]
    return words


# ------------------------------------------------------------------------------------------------ pods
@dataclass(frozen=True)
class PodLaunch:
    role: PodRole
    index: int  # GROVE_PCLQ_POD_INDEX within its clique
    argv: tuple[str, ...]  # what the process receives (argv[0] first)


def pod_argv(command: Sequence[str], args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """argv of a container after kubelet expansion (and the shell, for `sh -c`)."""
    cmd = [kubelet_expand(str(c), env) for c in command]
    arg = [kubelet_expand(str(a), env) for a in args]
    full = cmd + arg
    if full and os.path.basename(full[0]) in {"sh", "bash"} and len(full) >= 3 and full[1] == "-c":
        return sh_c_argv(full[2], env)
    return full


def multinode_pod_launches(
    component: Mapping, container: Mapping, grove_env: Mapping[str, str], backend: Literal["mp", "ray"] = "mp"
) -> list[PodLaunch]:
    """One PodLaunch per pod of one replica of a multinode component: the leader, then each worker."""
    nodes = int((component.get("multinode") or {}).get("nodeCount") or 1)
    service = str(component.get("name") or "")
    out = []
    for role, index in [("leader", 0)] + [("worker", i) for i in range(nodes - 1)]:
        env = container_env_map(container.get("env") or [], {**grove_env, "GROVE_PCLQ_POD_INDEX": str(index)})
        cmd, args = rewrite_vllm_multinode(
            container.get("command") or [], container.get("args") or [], role, service, nodes, backend
        )
        out.append(PodLaunch(role, index, tuple(pod_argv(cmd, args, env))))
    return out


def grove_env_for(dgd_name: str, component: str, namespace: str = "default") -> dict[str, str]:
    """Stand-in values for the variables Grove injects into every gang pod (their exact text does not matter
    to the rewrite: both the leader address and the rank are substituted the same way on every pod)."""
    pcsg = f"{dgd_name}-0-{component.lower()}"
    return {
        "GROVE_PCSG_NAME": pcsg,
        "GROVE_PCSG_INDEX": "0",
        "GROVE_HEADLESS_SERVICE": f"{dgd_name}-0.{namespace}.svc.cluster.local",
    }
