"""The `rehearse` command line rebuilt from its options, to re-run it inside the network namespace."""

from __future__ import annotations

from kimi_k3.rehearsal.options import RehearseOptions


def command_line(args: RehearseOptions) -> list[str]:
    """The same command's arguments again (to re-run it inside the network namespace)."""
    out = [args.stack]
    for name in (
        "out",
        "ready_timeout",
        "requests",
        "duration",
        "concurrency",
        "system_prompt_tokens",
        "turns",
        "speedup_ratio",
        "perf_profile",
        "runs",
        "trace",
        "trace_first",
        "trace_window",
        "trace_speedup",
        "kv_budget_gib",
    ):
        value = getattr(args, name)
        if value is not None:
            text = (
                ",".join(value)
                if name == "runs"
                else f"{value[0]!r}:{value[1]!r}"
                if name == "trace_window"
                else repr(value)
                if isinstance(value, float)
                else str(value)
            )
            out += ["--" + name.replace("_", "-"), text]
    return (
        out
        + ([] if args.load else ["--no-load"])
        + (["--host-network"] if args.host_network else [])
        + (["--plan-config"] if args.plan_config else [])
        + ([] if args.perf_model else ["--mocker-timing"])
    )
