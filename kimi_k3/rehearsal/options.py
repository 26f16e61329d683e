"""What `kimi-k3 rehearse` was asked for: one frozen value the command builds from its command line, so the
rehearsal reads typed fields and never sees argparse (the import contract in pyproject.toml keeps it so)."""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class RehearseOptions:
    """The flags of `kimi-k3 rehearse` (kimi_k3/commands/rehearse.py defines them, their defaults and help)."""

    stack: str
    out: Optional[str] = None
    ready_timeout: float = 240
    requests: Optional[int] = None
    duration: Optional[float] = None
    concurrency: Optional[int] = None
    system_prompt_tokens: Optional[int] = None
    turns: Optional[int] = None
    speedup_ratio: float = 1.0
    perf_profile: Optional[str] = None
    perf_model: bool = True  # False: --mocker-timing
    runs: Optional[tuple[str, ...]] = None
    load: bool = True  # False: --no-load
    trace: Optional[str] = None
    trace_first: Optional[int] = None
    trace_window: Optional[tuple[float, float]] = None
    trace_speedup: float = 1.0
    kv_budget_gib: Optional[float] = None
    plan_config: bool = False
    host_network: bool = False

    @classmethod
    def from_values(cls, values: object) -> "RehearseOptions":
        """From an object with one attribute per field (the command's parsed arguments); lists become tuples."""
        given = {f.name: getattr(values, f.name) for f in dataclasses.fields(cls)}
        for name in ("runs", "trace_window"):
            if given[name] is not None:
                given[name] = tuple(given[name])
        return cls(**given)
