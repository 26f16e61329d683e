"""What the performance model is asked about: workloads, worker layouts and speculative decoding."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from kimi_k3.data import recipe_file
from kimi_k3.sizing import aiconfigurator as aic

# Agentic coding: long, mostly-new context per turn, short answers; 16 requests in flight per decoding worker.
DEFAULT_ISL = 32768
DEFAULT_OSL = aic.OSL
DEFAULT_CONCURRENCY_PER_DECODE_WORKER = 16


class PerfError(ValueError):
    """A workload or layout the model cannot answer; the message says what is missing."""


@dataclass(frozen=True)
class Workload:
    isl: int = DEFAULT_ISL
    osl: int = DEFAULT_OSL
    concurrency: Optional[int] = None  # per stack; None = 16 per decoding worker
    request_rate: Optional[float] = None  # requests/s arriving (open loop: prefill queueing, --sla sizing)
    cache_hit_rate: float = 0.0  # share of each request's input found in the prefix cache

    def describe(self) -> str:
        rate = f", {self.request_rate:g} req/s" if self.request_rate else ""
        hit = f", {self.cache_hit_rate:.0%} of the input cached" if self.cache_hit_rate else ""
        return f"ISL {self.isl:,} / OSL {self.osl:,}{rate}{hit}"


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding as a dimension of a layout: off (all four stacks: their image cannot run DSpark,
    ai-dynamo/dynamo#12843), or a method with its draft length and mean accepted tokens per target step."""

    method: str = "none"  # none | dspark
    num_speculative_tokens: int = 0
    acceptance_length: float = 1.0  # tokens a target step yields on average, the bonus token included

    @property
    def on(self) -> bool:
        return self.method != "none" and self.num_speculative_tokens > 0

    def describe(self) -> str:
        if not self.on:
            return "no speculative decoding"
        return (
            f"{self.method} speculation, {self.num_speculative_tokens} draft tokens, "
            f"acceptance length {self.acceptance_length:g}"
        )


PLAIN = Speculation()


def speculation_from_config(spec: dict[str, Any], acceptance_length: Optional[float] = None) -> Speculation:
    """A vLLM `--speculative-config` as the model sees it; the acceptance length is the caller's, or the
    published figure for the method (recipes/facts/perf-measurements.yaml `speculation`)."""
    if not spec:
        return PLAIN
    method = str(spec.get("method") or "unknown")
    k = int(spec.get("num_speculative_tokens") or 0)
    if acceptance_length is None:
        acceptance_length = float(
            recipe_file("facts/perf-measurements.yaml")["speculation"]
            .get(method, {})
            .get("acceptance_length", {})
            .get("default", 1.0)
        )
    if acceptance_length > k + 1:
        raise PerfError(f"acceptance length {acceptance_length:g} exceeds {k} draft tokens + 1")
    return Speculation(method, k, acceptance_length)


@dataclass(frozen=True)
class RoleLayout:
    name: str
    type: str  # decode (aggregated workers are type decode in our recipes) | prefill
    gpu: str
    tp: int
    replicas: int


@dataclass(frozen=True)
class Layout:
    """A deployable shape: aggregated workers, or prefill + decode workers."""

    gpu: str
    mode: str  # agg | disagg
    tp: int  # agg worker TP, or decode TP
    replicas: int  # agg workers, or decode workers
    prefill_tp: int = 0
    prefill_replicas: int = 0
    speculation: Speculation = PLAIN  # the decoding workers' speculative decoding

    @classmethod
    def from_roles(cls, roles: Iterable[RoleLayout], speculation: Speculation = PLAIN) -> "Layout":
        roles = list(roles)
        prefill = [r for r in roles if r.type == "prefill"]
        decode = [r for r in roles if r.type != "prefill"]
        if len(decode) != 1 or len(prefill) > 1:
            raise PerfError("the performance model knows one worker role, or one prefill + one decode role")
        d = decode[0]
        if prefill:
            p = prefill[0]
            return cls(d.gpu, "disagg", d.tp, d.replicas, p.tp, p.replicas, speculation)
        return cls(d.gpu, "agg", d.tp, d.replicas, speculation=speculation)

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas + self.prefill_tp * self.prefill_replicas

    def describe(self) -> str:
        spec = (
            f" + {self.speculation.method} k={self.speculation.num_speculative_tokens}" if self.speculation.on else ""
        )
        if self.mode == "agg":
            return f"{self.gpu} agg {self.replicas}x TP{self.tp}{spec}"
        return (
            f"{self.gpu} disagg {self.prefill_replicas}P x TP{self.prefill_tp} + {self.replicas}D x TP{self.tp}{spec}"
        )

    def unit(self) -> tuple["Layout", int]:
        """The smallest layout with the same shape (for disagg: the P:D ratio), and how many of it this is."""
        if self.mode == "agg":
            return Layout(self.gpu, "agg", self.tp, 1, speculation=self.speculation), self.replicas
        g = math.gcd(self.replicas, self.prefill_replicas)
        return Layout(
            self.gpu,
            "disagg",
            self.tp,
            self.replicas // g,
            self.prefill_tp,
            self.prefill_replicas // g,
            self.speculation,
        ), g

    def point(self, isl: int, osl: int, batch: int) -> dict[str, Any]:
        unit, _ = self.unit()
        if unit.mode == "agg":
            return dict(mode="agg", system=unit.gpu, tp=unit.tp, isl=isl, osl=osl, batch=batch)
        return dict(
            mode="disagg",
            system=unit.gpu,
            prefill_tp=unit.prefill_tp,
            prefill_workers=unit.prefill_replicas,
            decode_tp=unit.tp,
            decode_workers=unit.replicas,
            isl=isl,
            osl=osl,
            decode_batch=batch,
        )


# Prefill:decode worker ratios ranked: every p:d in lowest terms with p, d <= 4. The table holds 1:1, 1:2 and
# 2:1 as aiconfigurator computed them; the others are composed from 1:1 by its own rule (disagg_throughput).
PD_RATIOS = tuple((p, d) for p in range(1, 5) for d in range(1, 5) if math.gcd(p, d) == 1)


def candidate_layouts(speculation: Speculation = PLAIN) -> list[Layout]:
    out = [Layout(gpu, "agg", tp, 1, speculation=speculation) for gpu, tp in aic.AGG_LAYOUTS]
    for gpu, ptp, dtp in aic.DISAGG_LAYOUTS:
        out += [Layout(gpu, "disagg", dtp, d, ptp, p, speculation) for p, d in PD_RATIOS]
    return out
