"""`kimi-k3:serving.benchmark.trace`: the in-cluster benchmark Job replays a request trace the user keeps in a
ConfigMap of the graph's namespace (issue 21). Only its name, key and the selection live in the stack: the trace
itself never enters the repository or the Pulumi state (the Job mounts the ConfigMap the user created)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from kimi_k3.config.base import DNS_LABEL, Strict, allowed_as

# The API server refuses a ConfigMap whose data values sum past 1 MiB (kubernetes pkg/apis/core/validation/
# validation.go ValidateConfigMap: totalSize > core.MaxSecretSize, 1 << 20 bytes).
CONFIGMAP_MAX_BYTES = 1 << 20

# The Job's replay bounds: arrival span / speedup (what its deadline covers) and requests (a 1 MiB ConfigMap holds
# ~4,000 FAST'25 lines; the cap keeps a hand-made one bounded too).
JOB_TRACE_MAX_SECONDS = 3600.0
JOB_TRACE_MAX_REQUESTS = 20000

CONFIGMAP_KEY = allowed_as(r"^[-._a-zA-Z0-9]+$", "a ConfigMap key: letters, digits, '-', '_' and '.'")


def parse_window(text: str) -> tuple[float, float]:
    """START:END seconds, 0 <= START <= END (as `kimi-k3 rehearse --trace-window`)."""
    import math

    allowed = "START:END seconds with 0 <= START <= END, e.g. 600:900"
    parts = str(text).split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"{text!r} is not a window; allowed: {allowed}") from None
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start <= end):
        raise ValueError(f"{text!r} is not a window; allowed: {allowed}")
    return start, end


class BenchmarkTraceConfig(Strict):
    """The benchmark Job replays this trace (AIPerf's mooncake_trace replay, the rehearsal's `--trace` options)
    instead of the built-in runs. Create the ConfigMap with `kimi-k3 trace-configmap FILE` (it selects and checks
    the size) or kubectl; the Job refuses at start, naming it, a missing, oversized or empty trace."""

    config_map: str = Field(
        alias="configMap",
        pattern=allowed_as(DNS_LABEL, "a ConfigMap name: lower-case letters, digits and '-', at most 63"),
        description="ConfigMap in the graph's namespace holding the trace (created by you, not by Pulumi)",
    )
    key: str = Field("trace.jsonl", pattern=CONFIGMAP_KEY, max_length=253, description="its data key")
    size_bytes: Optional[int] = Field(
        None,
        alias="sizeBytes",
        ge=1,
        description=f"the trace's size, if known: refused at render past a ConfigMap's {CONFIGMAP_MAX_BYTES:,} bytes",
    )
    first: Optional[int] = Field(
        None, ge=1, le=JOB_TRACE_MAX_REQUESTS, description="replay only the first N requests (of the window)"
    )
    window: Optional[str] = Field(
        None, description="replay only the requests whose timestamp is in START:END seconds (e.g. 600:900)"
    )
    speedup: float = Field(1.0, ge=0.01, le=1000, description="replay X times faster than recorded")
    max_seconds: float = Field(
        1800.0,
        alias="maxSeconds",
        gt=0,
        le=JOB_TRACE_MAX_SECONDS,
        description="the replay's longest span / speedup; the Job's deadline covers it, a longer one is refused",
    )

    @field_validator("size_bytes")
    @classmethod
    def _fits(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v > CONFIGMAP_MAX_BYTES:
            raise ValueError(
                f"{v:,} bytes do not fit in a ConfigMap (the API server's limit is {CONFIGMAP_MAX_BYTES:,} bytes of "
                "data); allowed: at most that: select fewer requests (`kimi-k3 trace-configmap FILE --first N` or "
                "--window START:END)"
            )
        return v

    @field_validator("window")
    @classmethod
    def _window(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            parse_window(v)
        return v

    @property
    def window_seconds(self) -> Optional[tuple[float, float]]:
        return None if self.window is None else parse_window(self.window)
