"""A stand-in for the Pulumi CLI in tests of the Makefile and the README's commands (no network, no cloud).

It logs every call to $PULUMI_LOG and behaves like the real CLI where the workflow depends on it:
- `stack select --create S`: writes a passphrase salt into the default stack file Pulumi.S.yaml, as the CLI does
  for a new stack with the passphrase provider (the workflow must move it out of the tracked file);
- `config set|get [--secret] [--path] KEY [VALUE] --stack S [--config-file F]`: edits/reads F (default
  Pulumi.S.yaml); a secret without a value is read from stdin, as the CLI prompts for it;
- `stack export --file F`: writes $FAKE_STATE (a deployed state) or an empty one;
- `up`/`preview`: runs the real program (`__main__.py` under Pulumi's mock engine) with the config of the file
  it was given, so a missing per-user value fails exactly as `pulumi up` would.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path

import yaml


def _args(argv: list[str]) -> tuple[list[str], dict[str, str], set[str]]:
    positional, options, flags = [], {}, set()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--stack", "--config-file", "--policy-pack", "--exclude", "-s", "--file"):
            options[a.lstrip("-")] = argv[i + 1]
            i += 2
            continue
        if a.startswith("--"):
            flags.add(a)
        else:
            positional.append(a)
        i += 1
    return positional, options, flags


def _file(options: dict[str, str]) -> Path:
    return Path(options.get("config-file") or f"Pulumi.{options.get('stack') or options.get('s')}.yaml")


def _tokens(key: str, path: bool) -> list:
    if not path:
        return [key]
    top, _, rest = key.partition(".")
    out: list = [top]
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", rest):
        out.append(int(index) if index else name)
    if "[" in top:
        head, index = top.split("[")
        out = [head, int(index.rstrip("]")), *out[1:]]
    return out


def config_set(path: Path, key: str, value, tokens: list) -> None:
    doc = yaml.safe_load(path.read_text()) if path.is_file() else {}
    doc = doc or {}
    node = doc.setdefault("config", {})
    for tok, nxt in zip(tokens, tokens[1:]):
        if isinstance(node, list):
            while len(node) <= tok:
                node.append({} if not isinstance(nxt, int) else [])
            node = node[tok]
        else:
            node = node.setdefault(tok, [] if isinstance(nxt, int) else {})
    last = tokens[-1]
    if isinstance(node, list):
        while len(node) <= last:
            node.append(None)
    node[last] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def config_get(path: Path, tokens: list):
    doc = (yaml.safe_load(path.read_text()) if path.is_file() else {}) or {}
    node = doc.get("config") or {}
    for tok in tokens:
        node = node[tok]
    return node


def run_program(stack: str, path: Path) -> int:
    """What `pulumi up` would do first: run __main__.py with this config; it refuses missing per-user values."""
    from kimi_k3.offline.synth import RenderError, render_config

    doc = yaml.safe_load(path.read_text()) or {}
    config, secrets = {}, set()
    for key, value in (doc.get("config") or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key] = base64.b64decode(value["secure"].split(":", 2)[2]).decode()
            secrets.add(key)
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
    try:
        render_config(stack, config, secrets, Path.cwd())
    except RenderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"fake pulumi: the program accepted the configuration of {path}")
    return 0


def main(argv: list[str]) -> int:
    with open(os.environ["PULUMI_LOG"], "a") as log:
        log.write(" ".join(argv) + "\n")
    positional, options, flags = _args(argv)
    stack = options.get("stack") or options.get("s")
    if positional[:2] == ["stack", "select"]:
        name = stack or positional[2]
        default = Path(f"Pulumi.{name}.yaml")
        if "--create" in flags and default.is_file() and "encryptionsalt" not in default.read_text():
            default.write_text("encryptionsalt: v1:ZmFrZQ==:v1:fake:salt\n" + default.read_text())
        return 0
    if positional[:2] == ["config", "set"]:
        key = positional[2]
        value = positional[3] if len(positional) > 3 else sys.stdin.readline().strip()
        if "--secret" in flags:
            value = {"secure": "v1:fake:" + base64.b64encode(value.encode()).decode()}
        elif "--path" in flags and value in ("true", "false"):  # as the CLI does with --path
            value = value == "true"
        elif "--path" in flags and re.fullmatch(r"-?\d+", value):
            value = int(value)
        config_set(_file(options), key, value, _tokens(key, "--path" in flags))
        return 0
    if positional[:2] == ["config", "rm"]:
        path = _file(options)
        doc = yaml.safe_load(path.read_text()) or {}
        node, tokens = doc.get("config") or {}, _tokens(positional[2], "--path" in flags)
        for tok in tokens[:-1]:
            node = node.get(tok, {})
        node.pop(tokens[-1], None)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return 0
    if positional[:2] == ["stack", "export"]:
        state = os.environ.get("FAKE_STATE")
        Path(options["file"]).write_text(Path(state).read_text() if state else "{}")
        return 0
    if positional[:2] == ["config", "get"]:
        try:
            print(config_get(_file(options), _tokens(positional[2], "--path" in flags)))
        except (KeyError, IndexError, TypeError):
            print(f"error: configuration key '{positional[2]}' not found for stack '{stack}'", file=sys.stderr)
            return 1
        return 0
    if positional and positional[0] in ("up", "preview"):
        return run_program(stack, _file(options))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
