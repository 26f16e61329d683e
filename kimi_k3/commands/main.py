"""`kimi-k3`: the offline commands. A shell over the same modules `pulumi up` uses, never a second implementation."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys

from kimi_k3.errors import UserError

# name -> one-line help. A command's module is imported only when that command runs (`--help` and `plan` need no
# Pulumi SDK); each module's register() adds its own subparser.
COMMANDS = {
    "render": "render stacks to manifests.yaml + resources.json without a cluster",
    "check": "lint a stack, a render directory or a YAML file of objects",
    "diff": "render stacks at two revisions and report what changes",
    "plan": "capacity, cold-start and cost plan for a stack or an ad hoc role",
    "rehearse": "run the stack's serving graph locally (Dynamo frontend + mocker engines), smoke test, AIPerf, report",
    "trace-configmap": "write the ConfigMap the in-cluster benchmark Job replays a trace from (size checked)",
}


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: `kimi-k3 plan: argument --tp: ...; see kimi-k3 plan --help`."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}; see {self.prog} --help\n")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kimi-k3")
    except PackageNotFoundError:  # run from a checkout without `pip install -e .`
        return "unknown (not installed; run make)"


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI parser; only `command` (if any) gets its full subparser, the others a name and help line."""
    p = Parser(prog="kimi-k3", description="Offline tools for the kimi-k3 Pulumi program.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, help_line in COMMANDS.items():
        if name == command:
            importlib.import_module(f"kimi_k3.commands.{name.replace('-', '_')}").register(sub)
        else:
            sub.add_parser(name, help=help_line)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    args = parser(command if command in COMMANDS else None).parse_args(argv)
    try:
        return args.func(args)
    except UserError as err:  # bad input: one line naming the file/key, the value and what is allowed
        print(f"kimi-k3 {args.command}: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `kimi-k3 render ... | head -n 1`: the reader is gone, nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 141  # 128 + SIGPIPE, as a shell reports a writer killed by a closed pipe
    except KeyboardInterrupt:
        print(f"kimi-k3 {args.command}: interrupted", file=sys.stderr)
        return 130


def console() -> int:
    """The `kimi-k3` console script: a short-lived process, so the cyclic GC only costs time.

    Off for the run (allocation-triggered collections), and everything alive frozen before exit so the interpreter's
    final collection does not walk the ~230k objects the Pulumi SDK leaves. Library use and tests call main()."""
    gc.disable()
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(console())
