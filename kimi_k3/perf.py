"""Performance model: TTFT, TPOT, tokens/s per GPU and per user, $/Mtok and SLA sizing for Kimi K3 stacks.

Pure: it reads aiconfigurator's raw estimates from recipes/perf-raw.yaml (written by kimi_k3/aiconfigurator.py,
the only module that calls the tool) and the public measurements in recipes/perf-measurements.yaml, and
calibrates the first against the second. Points off the committed grid are interpolated (log-log in batch and
context) and say so; `raw` is aiconfigurator's number only where `source` is `aiconfigurator`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Optional

from . import aiconfigurator as aic
from .data import recipe_file

METRICS = ("ttft_ms", "tpot_ms", "tokens_per_second", "tokens_per_second_per_gpu", "tokens_per_second_per_user")
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
    concurrency: Optional[int] = None          # per stack; None = 16 per decoding worker
    request_rate: Optional[float] = None       # requests/s the deployment must sustain (--sla)

    def describe(self) -> str:
        rate = f", {self.request_rate:g} req/s" if self.request_rate else ""
        return f"ISL {self.isl:,} / OSL {self.osl:,}{rate}"


# ---------------------------------------------------------------- raw table


@lru_cache(maxsize=None)
def raw_table() -> dict[str, Any]:
    """recipes/perf-raw.yaml, parsed once (with libyaml when present: the table is ~100 KB)."""
    from . import yaml_strict
    from .data import RECIPES

    return yaml_strict.load((RECIPES / "perf-raw.yaml").read_text(), "recipes/perf-raw.yaml")


def _points() -> dict[str, dict[str, Any]]:
    return raw_table()["points"]


def _interp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    if x0 == x1:
        return y0
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))


def _bracket(value: int, grid: Iterable[int], what: str) -> tuple[int, int]:
    g = sorted(grid)
    if value in g:
        return value, value
    if value < g[0] or value > g[-1]:
        raise PerfError(f"{what} {value:,} is outside aiconfigurator's committed grid {g[0]:,}..{g[-1]:,}")
    hi = next(v for v in g if v > value)
    return g[g.index(hi) - 1], hi


@lru_cache(maxsize=None)
def _live() -> bool:
    return aic.available()[0]


def raw_estimate(point: dict[str, Any], live: bool = True) -> tuple[dict[str, float], str]:
    """aiconfigurator's numbers for `point` (the keys of recipes/perf-raw.yaml), and their source.

    Exact grid points come straight from the committed table; others are interpolated between grid
    neighbours in batch and context. Raises PerfError when the table cannot answer (OOM, off grid).
    """
    point = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in point.items()}
    key = aic.point_key(point)
    found = _points().get(key)
    if found is not None:
        est = found["estimate"]
        if "error" in est:
            raise PerfError(f"aiconfigurator: {est['error']} ({key})")
        return {m: est[m] for m in METRICS}, "aiconfigurator"
    if live and _live():  # off the committed grid, with the tool installed: ask it (a few seconds)
        est = aic.estimate(point)
        if "error" in est:
            raise PerfError(f"aiconfigurator: {est['error']} ({key})")
        return {m: est[m] for m in METRICS}, "aiconfigurator (live)"
    if point["osl"] != aic.OSL:
        raise PerfError(f"OSL {point['osl']:,} is not in the committed aiconfigurator table (OSL {aic.OSL:,}); "
                        f"regenerate it with the tool installed ({aic.INSTALL_HINT})")
    bkey = "batch" if point["mode"] == "agg" else "decode_batch"
    b0, b1 = _bracket(point[bkey], aic.BATCHES, "batch per worker")
    i0, i1 = _bracket(point["isl"], aic.CONTEXTS, "ISL")
    if (b0, i0) == (b1, i1):  # on the grid, yet not in the table: a layout the table does not cover
        raise PerfError(f"{key} is not in the committed aiconfigurator table (recipes/perf-raw.yaml); "
                        f"layouts it covers: {', '.join(l.describe() for l in candidate_layouts())}")
    corners = {}
    for b in {b0, b1}:
        for i in {i0, i1}:
            corners[(b, i)], _ = raw_estimate({**point, bkey: b, "isl": i}, live=False)
    out = {}
    for m in METRICS:
        lo = _interp(point[bkey], b0, b1, corners[(b0, i0)][m], corners[(b1, i0)][m])
        hi = _interp(point[bkey], b0, b1, corners[(b0, i1)][m], corners[(b1, i1)][m])
        out[m] = _interp(point["isl"], i0, i1, lo, hi)
    return out, "interpolated"


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True)
class PowerLaw:
    """factor(c) = a * c**b: measured/raw as a function of requests in flight per worker."""

    a: float
    b: float

    def __call__(self, c: float) -> float:
        return self.a * max(c, 1) ** self.b


@dataclass(frozen=True)
class Calibration:
    throughput: PowerLaw          # scales tokens/s (and 1/TPOT)
    ttft: PowerLaw                # scales TTFT
    used: tuple[str, ...]
    held_out: tuple[str, ...]

    def apply(self, raw: dict[str, float], batch: float, prefill_batch: float | None = None) -> dict[str, float]:
        f = self.throughput(batch)
        g = self.ttft(batch if prefill_batch is None else prefill_batch)
        return {"ttft_ms": raw["ttft_ms"] * g, "tpot_ms": raw["tpot_ms"] / f,
                "tokens_per_second": raw["tokens_per_second"] * f,
                "tokens_per_second_per_gpu": raw["tokens_per_second_per_gpu"] * f,
                "tokens_per_second_per_user": raw["tokens_per_second_per_user"] * f}


def measurements() -> list[dict[str, Any]]:
    return recipe_file("perf-measurements.yaml")["measurements"]


def _fit(xs: list[float], ys: list[float]) -> PowerLaw:
    """Least squares of log y = log a + b log x (one point: b = 0)."""
    lx, ly = [math.log(max(x, 1)) for x in xs], [math.log(y) for y in ys]
    if len(set(lx)) < 2:
        return PowerLaw(math.exp(sum(ly) / len(ly)), 0.0)
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    b = sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sum((x - mx) ** 2 for x in lx)
    return PowerLaw(math.exp(my - b * mx), b)


@lru_cache(maxsize=None)
def calibration() -> Calibration:
    used = [m for m in measurements() if m["use"] == "calibrate"]
    if not used:
        return Calibration(PowerLaw(1, 0), PowerLaw(1, 0), (), ())
    xs, tput, ttft = [], [], []
    for m in used:
        raw, _ = raw_estimate(m["config"])
        xs.append(m["config"]["batch"])
        tput.append(m["measured"]["tokens_per_second"] / raw["tokens_per_second"])
        ttft.append(m["measured"]["ttft_ms"] / raw["ttft_ms"])
    held = tuple(m["id"] for m in measurements() if m["use"] == "held_out")
    return Calibration(_fit(xs, tput), _fit(xs, ttft), tuple(m["id"] for m in used), held)


def calibration_report() -> list[dict[str, Any]]:
    """Raw vs calibrated vs measured for every public measurement (the README table and the 15% test)."""
    cal = calibration()
    rows = []
    for m in measurements():
        raw, _ = raw_estimate(m["config"])
        calibrated = cal.apply(raw, m["config"]["batch"])
        for metric, measured in sorted(m["measured"].items()):
            rows.append({"id": m["id"], "use": m["use"], "source": m["source"], "metric": metric,
                         "measured": measured, "raw": round(raw[metric], 2),
                         "calibrated": round(calibrated[metric], 2),
                         "raw_error": round(raw[metric] / measured - 1, 4),
                         "calibrated_error": round(calibrated[metric] / measured - 1, 4)})
    return rows


def held_out_error() -> Optional[float]:
    """Mean absolute relative error of calibrated numbers on measurements not used to calibrate."""
    errs = [abs(r["calibrated_error"]) for r in calibration_report() if r["use"] == "held_out"]
    return sum(errs) / len(errs) if errs else None


# ---------------------------------------------------------------- stacks


@dataclass(frozen=True)
class RoleLayout:
    name: str
    type: str          # decode (aggregated workers are type decode in our recipes) | prefill
    gpu: str
    tp: int
    replicas: int


@dataclass(frozen=True)
class Layout:
    """A deployable shape: aggregated workers, or prefill + decode workers."""

    gpu: str
    mode: str                  # agg | disagg
    tp: int                    # agg worker TP, or decode TP
    replicas: int              # agg workers, or decode workers
    prefill_tp: int = 0
    prefill_replicas: int = 0

    @classmethod
    def from_roles(cls, roles: Iterable[RoleLayout]) -> "Layout":
        roles = list(roles)
        prefill = [r for r in roles if r.type == "prefill"]
        decode = [r for r in roles if r.type != "prefill"]
        if len(decode) != 1 or len(prefill) > 1:
            raise PerfError("the performance model knows one worker role, or one prefill + one decode role")
        d = decode[0]
        if prefill:
            p = prefill[0]
            return cls(d.gpu, "disagg", d.tp, d.replicas, p.tp, p.replicas)
        return cls(d.gpu, "agg", d.tp, d.replicas)

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas + self.prefill_tp * self.prefill_replicas

    def describe(self) -> str:
        if self.mode == "agg":
            return f"{self.gpu} agg {self.replicas}x TP{self.tp}"
        return f"{self.gpu} disagg {self.prefill_replicas}P x TP{self.prefill_tp} + {self.replicas}D x TP{self.tp}"

    def unit(self) -> tuple["Layout", int]:
        """The smallest layout with the same shape (for disagg: the P:D ratio), and how many of it this is."""
        if self.mode == "agg":
            return Layout(self.gpu, "agg", self.tp, 1), self.replicas
        g = math.gcd(self.replicas, self.prefill_replicas)
        return Layout(self.gpu, "disagg", self.tp, self.replicas // g, self.prefill_tp, self.prefill_replicas // g), g

    def point(self, isl: int, osl: int, batch: int) -> dict[str, Any]:
        unit, _ = self.unit()
        if unit.mode == "agg":
            return dict(mode="agg", system=unit.gpu, tp=unit.tp, isl=isl, osl=osl, batch=batch)
        return dict(mode="disagg", system=unit.gpu, prefill_tp=unit.prefill_tp, prefill_workers=unit.prefill_replicas,
                    decode_tp=unit.tp, decode_workers=unit.replicas, isl=isl, osl=osl, decode_batch=batch)


@dataclass(frozen=True)
class Estimate:
    layout: Layout
    workload: Workload
    batch: int                             # requests in flight per decoding (or aggregated) worker
    raw: dict[str, float]
    calibrated: dict[str, float]
    source: str                            # aiconfigurator | interpolated
    kv_fits: bool
    kv_capacity_per_worker: int            # concurrent requests at isl+osl the planner gives one worker
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def concurrency(self) -> int:
        return self.batch * self.layout.replicas

    def stack_tokens_per_second(self, calibrated: bool = True) -> float:
        """Output tokens/s of the whole layout (per-GPU figure x all GPUs)."""
        m = self.calibrated if calibrated else self.raw
        return m["tokens_per_second_per_gpu"] * self.layout.gpus

    def role_metrics(self, calibrated: bool = True) -> dict[str, dict[str, Optional[float]]]:
        """Per role: what its part of a request costs and how much it carries (stable JSON keys)."""
        m = self.calibrated if calibrated else self.raw
        L, tps = self.layout, self.stack_tokens_per_second(calibrated)
        r = lambda x: None if x is None else round(x, 3)  # noqa: E731
        if L.mode == "agg":
            return {"decode": {"ttft_ms": r(m["ttft_ms"]), "tpot_ms": r(m["tpot_ms"]),
                               "tokens_per_second_per_gpu": r(m["tokens_per_second_per_gpu"]),
                               "tokens_per_second_per_user": r(m["tokens_per_second_per_user"])}}
        requests_per_second = tps / self.workload.osl
        return {
            # prefill: its latency is the TTFT; it produces one token per request and reads ISL tokens.
            "prefill": {"ttft_ms": r(m["ttft_ms"]), "tpot_ms": None,
                        "tokens_per_second_per_gpu": r(requests_per_second * self.workload.isl
                                                       / (L.prefill_tp * L.prefill_replicas)),
                        "tokens_per_second_per_user": None},
            "decode": {"ttft_ms": None, "tpot_ms": r(m["tpot_ms"]),
                       "tokens_per_second_per_gpu": r(tps / (L.tp * L.replicas)),
                       "tokens_per_second_per_user": r(m["tokens_per_second_per_user"])},
        }


def _kv_capacity(gpu: str, tp: int, context: int, gpu_memory_utilization: float, dcp: int = 1) -> int:
    from . import planner
    # Workers as the recipes run them: --enable-prefix-caching (vLLM's "align" KDA state, 1536-token blocks at TP8).
    return planner.plan_role(gpu, tp, dcp=dcp, gpu_memory_utilization=gpu_memory_utilization,
                             max_model_len=max(context, 1), prefix_caching=True).max_concurrent_requests(context)


def estimate(layout: Layout, workload: Workload, *, gpu_memory_utilization: float = 0.9, dcp: int = 1,
             live: bool = True) -> Estimate:
    """Raw and calibrated performance of `layout` under `workload` (concurrency spread over decoding workers)."""
    if workload.isl < 1 or workload.osl < 1:
        raise PerfError("ISL and OSL must be >= 1")
    concurrency = workload.concurrency or DEFAULT_CONCURRENCY_PER_DECODE_WORKER * layout.replicas
    batch = max(1, round(concurrency / layout.replicas))
    raw, source = raw_estimate(layout.point(workload.isl, workload.osl, batch), live=live)
    cal = calibration().apply(raw, batch, prefill_batch=1 if layout.mode == "disagg" else None)
    capacity = _kv_capacity(layout.gpu, layout.tp, workload.isl + workload.osl, gpu_memory_utilization, dcp)
    notes = []
    if batch > capacity:
        notes.append(f"{batch} requests of {workload.isl + workload.osl:,} tokens per worker exceed the KV cache "
                     f"({capacity} fit on TP{layout.tp} {layout.gpu}): vLLM would queue the rest")
    if concurrency % layout.replicas:
        notes.append(f"concurrency {concurrency} is not a multiple of {layout.replicas} workers; modelled {batch} each")
    return Estimate(layout, workload, batch, raw, cal, source, batch <= capacity, capacity, tuple(notes))


def gpu_hour_usd(pricing: Any) -> float:
    return pricing.instance_hour_usd / pricing.gpus_per_instance


def usd_per_million_output_tokens(cost_per_hour: float, tokens_per_second: float) -> Optional[float]:
    if not tokens_per_second:
        return None
    return cost_per_hour / (tokens_per_second * 3600) * 1e6


def curves(layout: Layout, *, osl: int = DEFAULT_OSL, gpu_memory_utilization: float = 0.9,
           cost_per_hour: Optional[float] = None) -> list[dict[str, Any]]:
    """The layout across context lengths (8k..1M) and load (batch per worker): the plan's curves and Pareto."""
    out = []
    for isl in aic.CONTEXTS:
        for batch in aic.BATCHES:
            w = Workload(isl=isl, osl=osl, concurrency=batch * layout.replicas)
            try:
                e = estimate(layout, w, gpu_memory_utilization=gpu_memory_utilization, live=False)
            except PerfError as err:
                out.append({"isl": isl, "batch_per_worker": batch, "error": str(err)})
                continue
            tps = e.stack_tokens_per_second()
            out.append({"isl": isl, "batch_per_worker": batch, "concurrency": e.concurrency, "kv_fits": e.kv_fits,
                        **{k: round(v, 3) for k, v in e.calibrated.items() if k != "tokens_per_second"},
                        "raw": {k: round(v, 3) for k, v in e.raw.items() if k != "tokens_per_second"},
                        "usd_per_million_output_tokens": None if cost_per_hour is None else
                        round(usd_per_million_output_tokens(cost_per_hour, tps), 4)})
    return out


# ---------------------------------------------------------------- SLA search


@dataclass(frozen=True)
class Candidate:
    estimate: Estimate
    units: int                  # copies of the layout needed for the request rate
    gpus: int
    nodes: int
    cost_per_hour_usd: float
    usd_per_million_output_tokens: float
    ours: str = ""              # the stack that deploys this shape, if any

    def to_json(self) -> dict[str, Any]:
        e, L = self.estimate, self.estimate.layout
        return {"layout": L.describe(), "gpu": L.gpu, "mode": L.mode, "tp": L.tp, "replicas": L.replicas * self.units,
                "prefill_tp": L.prefill_tp or None, "prefill_replicas": L.prefill_replicas * self.units or None,
                "pd_ratio": f"{L.prefill_replicas}:{L.replicas}" if L.mode == "disagg" else None,
                "batch_per_worker": e.batch, "gpus": self.gpus, "nodes": self.nodes,
                "cost_per_hour_usd": round(self.cost_per_hour_usd, 2),
                "usd_per_million_output_tokens": round(self.usd_per_million_output_tokens, 4),
                **{k: round(v, 3) for k, v in e.calibrated.items()},
                "raw": {k: round(v, 3) for k, v in e.raw.items()}, "source": e.source, "ours": self.ours or None}


def candidate_layouts() -> list[Layout]:
    out = [Layout(gpu, "agg", tp, 1) for gpu, tp in aic.AGG_LAYOUTS]
    for gpu, ptp, dtp in aic.DISAGG_LAYOUTS:
        out += [Layout(gpu, "disagg", dtp, d, ptp, p) for p, d in aic.DISAGG_WORKERS]
    return out


def sla_search(ttft_ms: float, tpot_ms: float, workload: Workload, gpu_hour_usd_by_platform: dict[str, float],
               gpus_per_node: dict[str, int], ours: dict[Layout, str] | None = None,
               gpu_memory_utilization: float = 0.9) -> list[Candidate]:
    """Every layout x load on the grid that meets TTFT and TPOT (calibrated), cheapest $/Mtok first.

    With a request rate, each layout is replicated until it carries it, and the ranking is by $/hour.
    `ours` maps the stacks' unit layouts to stack names so the answer can mark them.
    """
    ours = {k.unit()[0]: v for k, v in (ours or {}).items()}
    found = []
    for layout in candidate_layouts():
        if layout.gpu not in gpu_hour_usd_by_platform:
            continue
        for batch in aic.BATCHES:
            w = Workload(workload.isl, workload.osl, concurrency=batch * layout.replicas)
            try:  # table only (interpolated off the grid): the answer must come in seconds
                e = estimate(layout, w, gpu_memory_utilization=gpu_memory_utilization, live=False)
            except PerfError:
                continue
            c = e.calibrated
            if not e.kv_fits or c["ttft_ms"] > ttft_ms or c["tpot_ms"] > tpot_ms:
                continue
            tps = e.stack_tokens_per_second()
            units = 1
            if workload.request_rate:
                units = max(1, math.ceil(workload.request_rate * workload.osl / tps))
            gpus = layout.gpus * units
            cost = gpus * gpu_hour_usd_by_platform[layout.gpu]
            found.append(Candidate(e, units, gpus, gpus // gpus_per_node[layout.gpu], cost,
                                   usd_per_million_output_tokens(cost, tps * units), ours.get(layout, "")))
    key = (lambda c: (c.cost_per_hour_usd, c.usd_per_million_output_tokens)) if workload.request_rate else \
        (lambda c: (c.usd_per_million_output_tokens, c.cost_per_hour_usd))
    return sorted(found, key=key)


def stack_config_for(candidate: Candidate) -> dict[str, Any]:
    """The Pulumi stack config (kimi-k3:* keys) that deploys `candidate` from one of our recipes."""
    L, units = candidate.estimate.layout, candidate.units
    recipe = f"{L.gpu}-disagg" if L.mode == "disagg" else L.gpu
    cfg: dict[str, Any] = {"kimi-k3:recipe": recipe}
    if L.mode == "agg":
        cfg["kimi-k3:serving"] = {"roles": {"decode": {"tp": L.tp, "replicas": L.replicas * units}}}
    else:
        cfg["kimi-k3:serving"] = {"pdRatio": f"{L.prefill_replicas * units}:{L.replicas * units}",
                                  "roles": {"prefill": {"tp": L.prefill_tp}, "decode": {"tp": L.tp}}}
    return cfg


# ---------------------------------------------------------------- memory


def memory_comparison(gpu: str, tp: int) -> Optional[dict[str, Any]]:
    """Our per-GPU weights and HBM next to aiconfigurator's (GiB), with the difference taken apart.

    Two terms explain it: aiconfigurator counts the MXFP4 routed experts at 4 bits per value, without the E8M0
    scale (8 bits per 32 values, +6.25% of the experts), and leaves the vision tower (kept whole on every GPU
    by --mm-encoder-tp-mode data) out of the weights. What remains is `residual_gib`."""
    from . import planner

    theirs = raw_table().get("memory_gib_per_gpu", {}).get(f"{gpu} tp{tp}")
    if theirs is None:
        return None
    gib = 2**30
    m = planner.load_model_facts()
    ours = planner.weights_bytes_per_gpu(m, tp)
    groups = planner.weight_groups(m)
    scale_bits = m.routed_expert_bits - 4
    scales = sum(g.params * scale_bits / 8 / tp for g in groups if g.kind == "routed_experts")
    vision = sum(g.bytes for g in groups if g.kind == "vision")
    hbm = planner.load_platforms()[gpu].hbm_gb * 1e9
    return {"ours_weights_gib": round(ours / gib, 2), "aiconfigurator_weights_gib": round(theirs["weights"], 2),
            "difference_gib": round(ours / gib - theirs["weights"], 2),
            "mxfp4_scales_gib": round(scales / gib, 2), "vision_tower_gib": round(vision / gib, 2),
            "residual_gib": round((ours - scales - vision) / gib - theirs["weights"], 2),
            "ours_hbm_gib": round(hbm / gib, 2), "aiconfigurator_hbm_gib": round(theirs["hbm_bytes"] / gib, 2),
            "aiconfigurator_activations_nccl_other_gib": round(theirs["activations"] + theirs["nccl"] + theirs["others"], 2)}


# ---------------------------------------------------------------- mocker


def mocker_profile(layout: Layout, osl: int = DEFAULT_OSL, resolution: int = 24,
                   max_active_kv_tokens: Optional[int] = None) -> dict[str, Any]:
    """Dynamo mocker timing tables from the calibrated model of `layout`, in the mocker-format NPZ keys of
    dynamo/mocker 1.6.1 (utils/planner_profiler_perf_data_converter.py, on regular grids as it makes them):
    prefill_ttft_ms by prefill_isl, and decode_itl[active KV tokens][context length] in ms, where the decode
    batch is active tokens / context length. Outside the table (contexts below 8k, more than 64 requests per
    worker, up to 256) the nearest covered point is used, scaled by the extra load."""
    cal = calibration()
    fits = []
    for isl in aic.CONTEXTS:  # context lengths where one request fits (aiconfigurator's memory check)
        try:
            raw_estimate(layout.point(isl, osl, 1), live=False)
            fits.append(isl)
        except PerfError:
            pass
    if not fits:
        raise PerfError(f"no context length of {layout.describe()} is in the committed aiconfigurator table")
    lo, hi = fits[0], fits[-1]
    if max_active_kv_tokens is None:
        from . import planner
        max_active_kv_tokens = planner.plan_role(layout.gpu, layout.tp, prefix_caching=True).single_request_tokens

    def grid(a: float, b: float) -> list[float]:
        return [a + (b - a) * k / (resolution - 1) for k in range(resolution)]

    def tpot(ctx: float, batch: float) -> float:
        ctx = min(max(ctx, lo), hi)
        b = min(max(batch, 1.0), float(aic.BATCHES[-1]))
        while True:
            try:
                raw, _ = raw_estimate(layout.point(ctx, osl, b), live=False)
                return cal.apply(raw, b)["tpot_ms"] * max(batch, 1.0) / b
            except PerfError:  # this many requests of this length do not fit: fewer, scaled by the load
                if b <= 1:
                    raise
                b = max(1.0, b / 2)

    isl_grid = grid(lo, hi)
    prefill = []
    for isl in isl_grid:
        raw, _ = raw_estimate(layout.point(isl, osl, 1), live=False)
        prefill.append(round(cal.apply(raw, 1, prefill_batch=1)["ttft_ms"], 3))
    kv_grid, ctx_grid = grid(0, float(max_active_kv_tokens)), grid(1, hi)
    # A worker never runs more than its --max-num-seqs (256 in our recipes) at once.
    itl = [[round(tpot(ctx, min(kv / ctx, 256.0)), 3) for ctx in ctx_grid] for kv in kv_grid]
    return {"prefill_isl": isl_grid, "prefill_ttft_ms": prefill, "decode_active_kv_tokens": kv_grid,
            "decode_context_length": ctx_grid, "decode_itl": itl}


def write_mocker_profile(profile: dict[str, Any], path: str) -> str:
    """The profile as the mocker's NPZ file (numpy comes with matplotlib)."""
    import numpy as np

    np.savez(path, **{k: np.asarray(v, dtype=float) for k, v in profile.items()})
    return path
