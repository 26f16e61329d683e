"""Read vLLM / Dynamo flags and variable references out of a Kubernetes container spec.

Upstream recipes run the server either as a plain argv (`python3 -m dynamo.frontend --router-mode kv`)
or as a shell script (`/bin/sh -c` / `/bin/bash -lc` with one multi-line argument and backslash
continuations). Both forms end up as one token list here, so rules never care which form was used.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Mapping, Optional, Sequence

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
SERVER_MODULES = ("dynamo.vllm", "dynamo.sglang", "dynamo.frontend")

# Kubernetes expands $(VAR) in command/args/env values; $$(VAR) is the escape for a literal.
_KUBE_REF = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_SINGLE_QUOTED = re.compile(r"'[^']*'")
_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)
# Variables every POSIX shell in a container has without any env entry.
SHELL_BUILTIN_VARS = frozenset({"HOME", "PATH", "PWD", "HOSTNAME", "SHELL", "IFS", "OLDPWD"})


def raw_argv(container: Mapping) -> list[str]:
    """command + args exactly as the container spec holds them."""
    return [str(a) for a in (container.get("command") or [])] + [str(a) for a in (container.get("args") or [])]


def shell_script(container: Mapping) -> Optional[str]:
    """The script string when the container runs `<shell> -c SCRIPT` (any flag cluster holding `c`)."""
    argv = raw_argv(container)
    if not argv or os.path.basename(argv[0]) not in SHELLS:
        return None
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return argv[i + 1] if i + 1 < len(argv) else None
    return None


def _logical_lines(script: str) -> list[str]:
    return script.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()


def server_argv(container: Mapping) -> list[str]:
    """Tokens of the serving command: the script line that starts a Dynamo module, or the plain argv."""
    script = shell_script(container)
    if script is None:
        return raw_argv(container)
    for line in _logical_lines(script):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # unbalanced quotes: not a line we can read as a command
            continue
        if any(t in SERVER_MODULES for t in tokens):
            return tokens
    return []


def module(tokens: Sequence[str]) -> Optional[str]:
    """The Python module run with `-m`, e.g. `dynamo.vllm`."""
    for i, tok in enumerate(tokens[:-1]):
        if tok == "-m":
            return tokens[i + 1]
    return None


def flag_values(tokens: Sequence[str], flag: str) -> list[Optional[str]]:
    """Every value given to `flag` (`--f v` or `--f=v`); None for a bare boolean occurrence."""
    values: list[Optional[str]] = []
    for i, tok in enumerate(tokens):
        if tok == flag:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            values.append(None if nxt is None or nxt.startswith("--") else nxt)
        elif tok.startswith(flag + "="):
            values.append(tok[len(flag) + 1 :])
    return values


def flag_value(tokens: Sequence[str], flag: str) -> Optional[str]:
    """The value that wins (argparse keeps the last one), or None."""
    values = flag_values(tokens, flag)
    return values[-1] if values else None


def has_flag(tokens: Sequence[str], flag: str) -> bool:
    return bool(flag_values(tokens, flag))


def dotted_values(tokens: Sequence[str], prefix: str) -> dict[str, str]:
    """vLLM's dotted JSON-config args, e.g. `--kv-transfer-config.kv_connector NixlConnector`."""
    out: dict[str, str] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith(prefix + ".") and i + 1 < len(tokens):
            out[tok[len(prefix) + 1 :]] = tokens[i + 1]
    return out


def kube_refs(text: str) -> list[str]:
    return _KUBE_REF.findall(text)


def shell_refs(script: str) -> list[str]:
    """Variables a shell script reads (outside single quotes) and does not assign itself."""
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    visible = _SINGLE_QUOTED.sub("''", code)
    assigned = set(_ASSIGNMENT.findall(visible))
    names = [a or b for a, b in _SHELL_REF.findall(visible)]
    return [n for n in dict.fromkeys(names) if n not in assigned and n not in SHELL_BUILTIN_VARS]


def container_env(container: Mapping) -> dict[str, Optional[str]]:
    """Env name -> literal value as Kubernetes expands it (earlier entries feed $(VAR)); None if valueFrom."""
    env: dict[str, Optional[str]] = {}
    for entry in container.get("env") or []:
        value = entry.get("value")
        if value is None:
            env[entry["name"]] = None if "valueFrom" in entry else ""
            continue
        env[entry["name"]] = _KUBE_REF.sub(
            lambda m: env[m.group(1)] if env.get(m.group(1)) is not None else m.group(0), str(value)
        )
    return env


def resolve(value: str, env: Mapping[str, Optional[str]], shell: bool) -> Optional[str]:
    """Expand $(VAR) (Kubernetes) and, in a shell script, ${VAR}/$VAR; None if anything stays unresolved."""
    unresolved = False

    def sub(match: re.Match) -> str:
        nonlocal unresolved
        name = next(g for g in match.groups() if g)
        if env.get(name) is None:
            unresolved = True
            return match.group(0)
        return str(env[name])

    out = _KUBE_REF.sub(sub, value)
    if shell:
        out = _SHELL_REF.sub(sub, out)
    return None if unresolved else out
