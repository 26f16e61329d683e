"""Performance model: TTFT, TPOT, tokens/s per GPU and per user, $/Mtok and SLA sizing for Kimi K3 stacks.

Pure: it reads aiconfigurator's raw estimates from recipes/facts/perf-raw.yaml (written by kimi_k3/sizing/aiconfigurator.py,
the only module that calls the tool) and the public measurements in recipes/facts/perf-measurements.yaml, and
calibrates the first against the second. Points off the committed grid are interpolated (log-log in batch and
context) and say so; `raw` is aiconfigurator's number only where `source` is `aiconfigurator`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Optional

from kimi_k3.data import recipe_file
from kimi_k3.sizing import aiconfigurator as aic

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


# ---------------------------------------------------------------- raw table


@lru_cache(maxsize=None)
def raw_table() -> dict[str, Any]:
    """recipes/facts/perf-raw.yaml, parsed once (with libyaml when present: the table is ~100 KB)."""
    from kimi_k3 import yaml_strict
    from kimi_k3.data import RECIPES

    return yaml_strict.load((RECIPES / "facts" / "perf-raw.yaml").read_text(), "recipes/facts/perf-raw.yaml")


def _points() -> dict[str, dict[str, Any]]:
    return raw_table()["points"]


def _interp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    """Log-log between (x0, y0) and (x1, y1); outside them it extrapolates along the same line."""
    if x0 == x1:
        return y0
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))


def _bracket(value: float, grid: Iterable[int], what: str) -> tuple[int, int]:
    g = sorted(grid)
    if value in g:
        return int(value), int(value)
    if value < g[0] or value > g[-1]:
        raise PerfError(f"{what} {value:,} is outside aiconfigurator's committed grid {g[0]:,}..{g[-1]:,}")
    hi = next(v for v in g if v > value)
    return g[g.index(hi) - 1], hi


@lru_cache(maxsize=None)
def _live() -> bool:
    return aic.available()[0]


# aiconfigurator 0.12.0's disaggregated throughput: min(p * prefill req/s * 0.9, d * decode req/s * 0.92) * OSL
# (reproduces every committed disaggregated point to 1e-4; tests/cli/test_perf_truth.py), and its per-worker rates:
# prefill req/s depends on the ISL only, decode req/s = batch / (OSL * TPOT).
PREFILL_SCALE, DECODE_SCALE = 0.9, 0.92
MAX_CONTEXT = 1048576  # Kimi K3's max_position_embeddings (recipes/facts/model.yaml)
RATES = ("prefill_requests_per_second_per_worker", "decode_requests_per_second_per_worker")


def _gpus(point: dict[str, Any]) -> int:
    if point["mode"] == "agg":
        return point["tp"]
    return point["prefill_tp"] * point["prefill_workers"] + point["decode_tp"] * point["decode_workers"]


def disagg_throughput(point: dict[str, Any], prefill_rps: float, decode_rps: float) -> float:
    """Output tokens/s of p prefill and d decode workers, by aiconfigurator's own rule (above)."""
    return (
        min(point["prefill_workers"] * prefill_rps * PREFILL_SCALE, point["decode_workers"] * decode_rps * DECODE_SCALE)
        * point["osl"]
    )


def _table_metrics(est: dict[str, Any]) -> dict[str, float]:
    return {m: est[m] for m in (*METRICS, *RATES) if m in est}


def raw_estimate(point: dict[str, Any], live: bool = True) -> tuple[dict[str, float], str]:
    """aiconfigurator's numbers for `point` (the keys of recipes/facts/perf-raw.yaml), and their source.

    Exact grid points come straight from the committed table; with the tool installed other points are asked
    of it live (unless live=False: the --sla search must answer in seconds). Off the table: ISL and batch are
    interpolated log-log between grid neighbours (ISL below 8k extrapolated along the 8k-32k line), other
    OSLs are re-derived from the OSL-1,024 row (TTFT and TPOT as there, throughput by aiconfigurator's own
    formulas), and prefill:decode ratios the table lacks are composed from its 1P:1D point. `source` says
    which. Raises PerfError, with the reason, only where no answer exists (OOM, past the model's context).
    """
    point = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in point.items()}
    key = aic.point_key(point)
    found = _points().get(key)
    if found is not None:
        est = found["estimate"]
        if "error" in est:
            raise PerfError(f"aiconfigurator: {est['error']} ({key})")
        return _table_metrics(est), "aiconfigurator"
    if point["isl"] + point["osl"] > MAX_CONTEXT:
        raise PerfError(f"ISL {point['isl']:,} + OSL {point['osl']:,} exceeds Kimi K3's {MAX_CONTEXT:,}-token context")
    if live and _live():  # off the committed grid, with the tool installed: ask it (a few seconds)
        est = aic.estimate(point)
        if "error" in est:
            raise PerfError(f"aiconfigurator: {est['error']} ({key})")
        return _table_metrics(est), "aiconfigurator (live)"
    notes = []
    if point["mode"] == "disagg" and (point["prefill_workers"], point["decode_workers"]) not in aic.DISAGG_WORKERS:
        base, src = raw_estimate({**point, "prefill_workers": 1, "decode_workers": 1}, live=False)
        out = dict(base)
        out["tokens_per_second"] = disagg_throughput(point, base[RATES[0]], base[RATES[1]])
        out["tokens_per_second_per_gpu"] = out["tokens_per_second"] / _gpus(point)
        return out, f"{src}; {point['prefill_workers']}P:{point['decode_workers']}D composed from 1P:1D"
    if point["osl"] != aic.OSL:
        base, src = raw_estimate({**point, "osl": aic.OSL}, live=False)
        out = dict(base)
        note = f"OSL {point['osl']:,} derived from the OSL-{aic.OSL:,} row"
        if point["mode"] == "agg":  # aiconfigurator's agg rule: batch * OSL / (TTFT + OSL * TPOT)
            t, d0 = base["ttft_ms"] / 1000, base["tpot_ms"] / 1000
            pure = _pure_decode_tpot(point)
            if pure is not None and pure < base["tpot_ms"]:
                # an aggregated TPOT = pure decode + the other requests' prefills spread over the output:
                # the spread part scales with 1 / OSL (pure decode: the same worker's disaggregated decode row)
                out["tpot_ms"] = pure + (base["tpot_ms"] - pure) * aic.OSL / point["osl"]
                out["tokens_per_second_per_user"] = (
                    base["tokens_per_second_per_user"] * base["tpot_ms"] / out["tpot_ms"]
                )
            else:
                note += " (TPOT as there: no pure-decode row for this layout)"
            d = out["tpot_ms"] / 1000
            out["tokens_per_second"] = (
                base["tokens_per_second"] * (point["osl"] / (t + point["osl"] * d)) / (aic.OSL / (t + aic.OSL * d0))
            )
        else:
            out[RATES[1]] = base[RATES[1]] * aic.OSL / point["osl"]
            out["tokens_per_second"] = disagg_throughput(point, out[RATES[0]], out[RATES[1]])
            note += " (TTFT, TPOT as there)"
        out["tokens_per_second_per_gpu"] = out["tokens_per_second"] / _gpus(point)
        return out, f"{src}; {note}"
    bkey = "batch" if point["mode"] == "agg" else "decode_batch"
    b0, b1 = _bracket(point[bkey], aic.BATCHES, "batch per worker")
    if point["isl"] < aic.CONTEXTS[0]:  # short prompts: along the 8k-32k line (no row below 8k)
        i0, i1 = aic.CONTEXTS[0], aic.CONTEXTS[1]
        notes.append(f"ISL {point['isl']:,} extrapolated below the table's {aic.CONTEXTS[0]:,}")
    else:
        i0, i1 = _bracket(point["isl"], aic.CONTEXTS, "ISL")
    if (b0, i0) == (b1, i1):  # on the grid, yet not in the table: a layout the table does not cover
        raise PerfError(
            f"{key} is not in the committed aiconfigurator table (recipes/facts/perf-raw.yaml); "
            f"layouts it covers: {', '.join(l.describe() for l in candidate_layouts())}"
        )
    corners = {}
    for b in {b0, b1}:
        for i in {i0, i1}:
            corners[(b, i)], _ = raw_estimate({**point, bkey: b, "isl": i}, live=False)
    out = {}
    for m in corners[(b0, i0)]:
        lo = _interp(point[bkey], b0, b1, corners[(b0, i0)][m], corners[(b1, i0)][m])
        hi = _interp(point[bkey], b0, b1, corners[(b0, i1)][m], corners[(b1, i1)][m])
        out[m] = _interp(point["isl"], i0, i1, lo, hi)
    return out, "; ".join(["interpolated", *notes])


def _pure_decode_tpot(point: dict[str, Any]) -> Optional[float]:
    """The TPOT of decoding alone for an aggregated point (OSL 1,024): the same GPU and TP's disaggregated
    decode row; without one, the agg TPOT times the pure-decode share another TP on the same GPU shows."""

    def decode_row(tp: int) -> Optional[float]:
        try:
            est, _ = raw_estimate(
                dict(
                    mode="disagg",
                    system=point["system"],
                    prefill_tp=tp,
                    prefill_workers=1,
                    decode_tp=tp,
                    decode_workers=1,
                    isl=point["isl"],
                    osl=aic.OSL,
                    decode_batch=point["batch"],
                ),
                live=False,
            )
        except PerfError:
            return None
        return est["tpot_ms"]

    if (point["system"], point["tp"], point["tp"]) in aic.DISAGG_LAYOUTS:
        return decode_row(point["tp"])
    for system, tp, _ in aic.DISAGG_LAYOUTS:
        if system == point["system"] and (system, tp) in aic.AGG_LAYOUTS:
            pure = decode_row(tp)
            try:
                agg, _ = raw_estimate({**point, "tp": tp, "osl": aic.OSL}, live=False)
                mine, _ = raw_estimate({**point, "osl": aic.OSL}, live=False)
            except PerfError:
                return None
            return None if pure is None else mine["tpot_ms"] * pure / agg["tpot_ms"]
    return None


def _tpot_at(point: dict[str, Any], batch: float) -> float:
    """Raw TPOT of `point` at `batch` requests per worker, from whatever batches the table holds for it
    (log-log, extrapolated past the largest along its last segment: speculation verifies batch x (k+1))."""
    bkey = "batch" if point["mode"] == "agg" else "decode_batch"
    have = {}
    for b in sorted({*aic.BATCHES, point[bkey]}):
        try:
            have[b] = raw_estimate({**point, bkey: b}, live=False)[0]["tpot_ms"]
        except PerfError:
            pass
    if not have:
        raise PerfError(f"no batch of {aic.point_key(point)} is in the committed table")
    bs = sorted(have)
    if batch in have:
        return have[batch]
    if len(bs) == 1:
        return have[bs[0]] * batch / bs[0]
    lo = max([b for b in bs if b < batch] or [bs[0]])
    hi = min([b for b in bs if b > batch] or [bs[-1]])
    if lo == hi:
        lo, hi = (bs[-2], bs[-1]) if batch > bs[-1] else (bs[0], bs[1])
    return _interp(batch, lo, hi, have[lo], have[hi])


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
    """The model, fitted on the measurements marked `calibrate` (recipes/facts/perf-measurements.yaml):

    plain decoding   TPOT = raw TPOT / decode_factor           (vLLM launch post, GB300 TP8, batch 1)
    TTFT             TTFT = raw TTFT * ttft(batch)             (vLLM 0913 blog, B300 TP8, batch 1 and 16)
    speculation      TPOT = plain TPOT / speed-up, speed-up = acceptance length /
                     (verify_cost * raw TPOT(batch * (k + 1)) / raw TPOT(batch)): a target step verifies
                     k + 1 tokens per request, costing what a plain step of that many tokens costs, times
                     verify_cost (the drafter and rejection sampling; launch post, GB300 TP8 DSpark)
    throughput       from TTFT and TPOT by aiconfigurator's own formulas (raw_estimate)."""

    decode_factor: float
    ttft: PowerLaw
    verify_cost: float
    fitted: dict[str, float]  # measurement id -> the parameter it fitted (acceptance lengths found)

    def apply(self, raw: dict[str, float], batch: float, prefill_batch: float | None = None) -> dict[str, float]:
        """Plain decoding's calibrated TTFT and TPOT for raw figures at `batch` (the mocker tables use it)."""
        f = self.decode_factor
        g = self.ttft(batch if prefill_batch is None else prefill_batch)
        return {
            "ttft_ms": raw["ttft_ms"] * g,
            "tpot_ms": raw["tpot_ms"] / f,
            "tokens_per_second_per_user": raw["tokens_per_second_per_user"] * f,
        }

    def speedup(self, point: dict[str, Any], spec: Speculation) -> float:
        if not spec.on:
            return 1.0
        bkey = "batch" if point["mode"] == "agg" else "decode_batch"
        b = point[bkey]
        ratio = _tpot_at(point, b * (spec.num_speculative_tokens + 1)) / _tpot_at(point, b)
        return spec.acceptance_length / (self.verify_cost * ratio)


def measurements() -> list[dict[str, Any]]:
    return recipe_file("facts/perf-measurements.yaml")["measurements"]


def measurement_use(m: dict[str, Any], metric: str) -> str:
    """`use` of one measured figure: one word for all of a measurement's figures, or a mapping per metric."""
    use = m["use"]
    return use if isinstance(use, str) else use[metric]


def measurement_speculation(m: dict[str, Any], acceptance_length: Optional[float] = None) -> Speculation:
    s = m.get("speculation", "none")
    if s == "none":
        return PLAIN
    tau = s["acceptance_length"] if acceptance_length is None else acceptance_length
    return Speculation(s["method"], int(s["num_speculative_tokens"]), float(tau))


def configuration(m: dict[str, Any]) -> str:
    """What a measurement describes, as the README's per-configuration held-out error groups it."""
    s = m.get("speculation", "none")
    return "plain decoding" if s == "none" else f"{s['method']} speculative decoding"


def _fit(xs: list[float], ys: list[float]) -> PowerLaw:
    """Least squares of log y = log a + b log x (one point: b = 0)."""
    lx, ly = [math.log(max(x, 1)) for x in xs], [math.log(y) for y in ys]
    if len(set(lx)) < 2:
        return PowerLaw(math.exp(sum(ly) / len(ly)), 0.0)
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    b = sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sum((x - mx) ** 2 for x in lx)
    return PowerLaw(math.exp(my - b * mx), b)


def _one(ms: list[dict[str, Any]], what: str) -> dict[str, Any]:
    if len(ms) != 1:
        raise PerfError(
            f"recipes/facts/perf-measurements.yaml: {what} needs exactly one `calibrate` measurement, found {len(ms)}"
        )
    return ms[0]


@lru_cache(maxsize=None)
def calibration() -> Calibration:
    ms = measurements()
    cal = lambda m, metric: metric in m["measured"] and measurement_use(m, metric) == "calibrate"  # noqa: E731
    # 1. plain decoding: one factor on TPOT (so on tokens/s per user), from a no-speculation measurement.
    plain = _one(
        [m for m in ms if configuration(m) == "plain decoding" and cal(m, "tokens_per_second_per_user")],
        "plain decoding",
    )
    raw, _ = raw_estimate(plain["config"], live=False)
    decode_factor = plain["measured"]["tokens_per_second_per_user"] / raw["tokens_per_second_per_user"]
    fitted = {plain["id"]: decode_factor}
    # 2. TTFT: a*c**b on the measurements that report it (speculation does not change prefill much: the drafter
    #    prefills too, one layer deep; the TTFT points are DSpark runs).
    used = [m for m in ms if cal(m, "ttft_ms")]
    xs = [m["config"]["batch"] for m in used]
    ys = [m["measured"]["ttft_ms"] / raw_estimate(m["config"], live=False)[0]["ttft_ms"] for m in used]
    ttft = _fit(xs, ys) if used else PowerLaw(1, 0)
    # 3. speculation's verification cost, from a speculative measurement with a published acceptance length.
    spec_m = _one(
        [m for m in ms if configuration(m) != "plain decoding" and cal(m, "tokens_per_second_per_user")],
        "the speculation verify cost",
    )
    spec = measurement_speculation(spec_m)
    probe = Calibration(decode_factor, ttft, 1.0, {})
    raw, _ = raw_estimate(spec_m["config"], live=False)
    plain_user = raw["tokens_per_second_per_user"] * decode_factor
    verify_cost = probe.speedup(spec_m["config"], spec) * plain_user / spec_m["measured"]["tokens_per_second_per_user"]
    fitted[spec_m["id"]] = verify_cost
    out = Calibration(decode_factor, ttft, verify_cost, fitted)
    # 4. acceptance lengths the source does not publish ("fit"): solved from that measurement's tokens/s.
    for m in ms:
        s = m.get("speculation", "none")
        if s != "none" and s.get("acceptance_length") == "fit" and cal(m, "tokens_per_second"):
            fitted[f"acceptance_length {m['source']}"] = _solve_acceptance(out, m)
    return out


def _solve_acceptance(cal: Calibration, m: dict[str, Any]) -> float:
    """The acceptance length at which the model gives measurement m's output tokens/s (bisection: monotone)."""
    lo, hi = 1.0, float(m["speculation"]["num_speculative_tokens"] + 1)
    target = m["measured"]["tokens_per_second"]
    for _ in range(60):
        mid = (lo + hi) / 2
        if _measured_metrics(cal, m, mid)["tokens_per_second"] < target:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 4)


def _measured_metrics(
    cal: Calibration, m: dict[str, Any], acceptance_length: Optional[float] = None
) -> dict[str, float]:
    """The model's figures for measurement m's configuration (one aggregated worker, no prefix-cache hits)."""
    c = m["config"]
    tau = acceptance_length
    s = m.get("speculation", "none")
    if tau is None and s != "none" and s.get("acceptance_length") == "fit":
        tau = cal.fitted.get(f"acceptance_length {m['source']}", 1.0)
    spec = measurement_speculation(m, tau)
    raw, _ = raw_estimate(c, live=False)
    return _calibrated(cal, c, raw, spec, raw["ttft_ms"])


def _calibrated(
    cal: Calibration, point: dict[str, Any], raw: dict[str, float], spec: Speculation, ttft_raw_ms: float
) -> dict[str, float]:
    """Calibrated TTFT (service time, no queueing), TPOT and throughputs of one layout point."""
    agg = point["mode"] == "agg"
    batch = point["batch"] if agg else point["decode_batch"]
    ttft = ttft_raw_ms * cal.ttft(batch if agg else 1)
    tpot = raw["tpot_ms"] / (cal.decode_factor * cal.speedup(point, spec))
    out = {"ttft_ms": ttft, "tpot_ms": tpot, "tokens_per_second_per_user": 1000 / tpot}
    osl = point["osl"]
    if agg:  # aiconfigurator's agg rule with the calibrated times, and its own small correction kept
        t, d = raw["ttft_ms"] / 1000, raw["tpot_ms"] / 1000
        correction = raw["tokens_per_second"] / (batch * osl / (t + osl * d))
        out["tokens_per_second"] = correction * batch * osl / (ttft / 1000 + osl * tpot / 1000)
    else:  # prefill capacity follows the calibrated prefill time, decode capacity the calibrated TPOT
        prefill_rps = raw[RATES[0]] * raw["ttft_ms"] / ttft
        decode_rps = batch / (osl * tpot / 1000)
        out["tokens_per_second"] = disagg_throughput(point, prefill_rps, decode_rps)
        out[RATES[0]], out[RATES[1]] = prefill_rps, decode_rps
    out["tokens_per_second_per_gpu"] = out["tokens_per_second"] / _gpus(point)
    return out


def calibration_report() -> list[dict[str, Any]]:
    """Raw vs model vs measured for every public measurement and figure (docs/performance.md, tests)."""
    cal = calibration()
    rows = []
    for m in measurements():
        raw, _ = raw_estimate(m["config"], live=False)
        model = _measured_metrics(cal, m)
        for metric, measured in sorted(m["measured"].items()):
            rows.append(
                {
                    "id": m["id"],
                    "use": measurement_use(m, metric),
                    "configuration": configuration(m),
                    "source": m["source"],
                    "metric": metric,
                    "measured": measured,
                    "raw": round(raw[metric], 2),
                    "calibrated": round(model[metric], 2),
                    "raw_error": round(raw[metric] / measured - 1, 4),
                    "calibrated_error": round(model[metric] / measured - 1, 4),
                }
            )
    return rows


def held_out_errors() -> dict[str, Optional[float]]:
    """Per configuration: mean absolute relative error of the model on figures it was not fitted to."""
    out: dict[str, list[float]] = {}
    for r in calibration_report():
        out.setdefault(r["configuration"], [])
        if r["use"] == "held_out":
            out[r["configuration"]].append(abs(r["calibrated_error"]))
    return {k: (sum(v) / len(v) if v else None) for k, v in out.items()}


def held_out_error() -> Optional[float]:
    """Mean absolute relative error of the model on every figure it was not fitted to."""
    errs = [abs(r["calibrated_error"]) for r in calibration_report() if r["use"] == "held_out"]
    return sum(errs) / len(errs) if errs else None


# ---------------------------------------------------------------- stacks


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


@dataclass(frozen=True)
class Estimate:
    layout: Layout
    workload: Workload
    batch: int  # requests in flight per decoding (or aggregated) worker
    raw: dict[str, float]
    calibrated: dict[str, float]  # the model: prefix-cache hits, speculation and prefill queueing in
    source: str  # aiconfigurator | interpolated | ...
    kv_fits: bool
    kv_capacity_per_worker: int  # concurrent requests at isl+osl the planner gives one worker
    notes: tuple[str, ...] = field(default_factory=tuple)
    ttft_service_ms: float = 0.0  # TTFT of a request that finds the prefill stage idle (cache hits counted)
    prefill_wait_ms: float = 0.0  # M/D/1 wait at a prefill server (see queueing())
    prefill_utilization: float = 0.0  # arrival rate x service time per prefill server
    arrival_rate: float = 0.0  # requests/s the queueing term used (given, or the closed loop's)
    speedup: float = 1.0  # speculative decoding's TPOT gain over plain decoding

    @property
    def concurrency(self) -> int:
        return self.batch * self.layout.replicas

    @property
    def requests_per_second_capacity(self) -> float:
        """Requests/s the layout completes at this load (its output tokens/s over OSL)."""
        return self.stack_tokens_per_second() / self.workload.osl

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
            return {
                "decode": {
                    "ttft_ms": r(m["ttft_ms"]),
                    "tpot_ms": r(m["tpot_ms"]),
                    "tokens_per_second_per_gpu": r(m["tokens_per_second_per_gpu"]),
                    "tokens_per_second_per_user": r(m["tokens_per_second_per_user"]),
                }
            }
        requests_per_second = tps / self.workload.osl
        return {
            # prefill: its latency is the TTFT; it produces one token per request and reads ISL tokens.
            "prefill": {
                "ttft_ms": r(m["ttft_ms"]),
                "tpot_ms": None,
                "tokens_per_second_per_gpu": r(
                    requests_per_second * self.workload.isl / (L.prefill_tp * L.prefill_replicas)
                ),
                "tokens_per_second_per_user": None,
            },
            "decode": {
                "ttft_ms": None,
                "tpot_ms": r(m["tpot_ms"]),
                "tokens_per_second_per_gpu": r(tps / (L.tp * L.replicas)),
                "tokens_per_second_per_user": r(m["tokens_per_second_per_user"]),
            },
        }


def _kv_capacity(gpu: str, tp: int, context: int, gpu_memory_utilization: float, dcp: int = 1) -> int:
    from kimi_k3.sizing import memory

    # Workers as the recipes run them: --enable-prefix-caching (vLLM's "align" KDA state, 1536-token blocks at TP8).
    return memory.plan_role(
        gpu,
        tp,
        dcp=dcp,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max(context, 1),
        prefix_caching=True,
    ).max_concurrent_requests(context)


def queueing(
    arrival_rate: float, service_ms: float, servers: int, in_flight: Optional[int] = None
) -> tuple[float, float]:
    """Wait at the prefill stage, as a model: each of `servers` prefill servers (prefill workers, or aggregated
    workers, which prefill one request at a time between decode steps) is an M/D/1 queue: Poisson arrivals
    split evenly, a deterministic service time (one request's prefill at its ISL), first come first served.
    Wq = rho * S / (2 * (1 - rho)), rho = lambda * S per server. With a fixed number of requests in flight
    (closed loop) no more than in_flight / servers - 1 can be ahead of one, which bounds the wait.
    Returns (wait ms, rho); rho >= 1 means the queue grows without bound (wait = inf, open loop). In a closed
    loop estimate() also takes Little's law's wait where the prefill stage is the bottleneck."""
    s = service_ms / 1000
    rho = arrival_rate / servers * s
    bound = math.inf if in_flight is None else max(0.0, in_flight / servers - 1) * service_ms
    if rho >= 1:
        return bound, rho
    return min(rho * s / (2 * (1 - rho)) * 1000, bound), rho


def _ttft_raw_with_hits(point: dict[str, Any], hit: float) -> float:
    """Raw prefill time when a share `hit` of the input is a prefix-cache hit: only the new tokens are computed.
    Prefilling tokens h*ISL..ISL after a cached prefix costs what a whole prefill of ISL costs minus one of
    h*ISL (causal attention: the prefix's work is the same either way), and never less than prefilling the
    new tokens alone; the table's TTFT at the shorter contexts gives both."""
    full, _ = raw_estimate(point, live=False)
    if hit <= 0:
        return full["ttft_ms"]
    isl = point["isl"]
    cached = max(1, round(isl * hit))
    new = max(1, isl - cached)
    prefix, _ = raw_estimate({**point, "isl": cached}, live=False)
    alone, _ = raw_estimate({**point, "isl": new}, live=False)
    return max(full["ttft_ms"] - prefix["ttft_ms"], alone["ttft_ms"])


def estimate(
    layout: Layout, workload: Workload, *, gpu_memory_utilization: float = 0.9, dcp: int = 1, live: bool = True
) -> Estimate:
    """Raw and modelled performance of `layout` under `workload` (concurrency spread over decoding workers)."""
    if workload.isl < 1 or workload.osl < 1:
        raise PerfError("ISL and OSL must be >= 1")
    if not 0 <= workload.cache_hit_rate < 1:
        raise PerfError(f"cache hit rate {workload.cache_hit_rate:g} is outside [0, 1)")
    concurrency = workload.concurrency or DEFAULT_CONCURRENCY_PER_DECODE_WORKER * layout.replicas
    batch = max(1, round(concurrency / layout.replicas))
    point = layout.point(workload.isl, workload.osl, batch)
    raw, source = raw_estimate(point, live=live)
    cal_params = calibration()
    ttft_raw = _ttft_raw_with_hits(point, workload.cache_hit_rate) if workload.cache_hit_rate else raw["ttft_ms"]
    cal = _calibrated(cal_params, point, raw, layout.speculation, ttft_raw)
    unit, units = layout.unit()
    # Queueing at the prefill stage: the given arrival rate (open loop), or the rate this many requests in
    # flight complete at (closed loop).
    rate = workload.request_rate or cal["tokens_per_second"] * units / workload.osl
    servers = layout.prefill_replicas if layout.mode == "disagg" else layout.replicas
    # A server's time per request: an aggregated worker's prefill of one request alone (its TTFT at batch 1;
    # at batch b aiconfigurator's TTFT also holds the decode steps interleaved with it), or a prefill worker's
    # 1 / its request rate (its disaggregated TTFT also counts the KV hand-off, which does not block it).
    if layout.mode == "agg":
        one = {**point, "batch": 1}
        service = (
            _ttft_raw_with_hits(one, workload.cache_hit_rate)
            if workload.cache_hit_rate
            else raw_estimate(one, live=live)[0]["ttft_ms"]
        ) * cal_params.ttft(1)
    else:
        service = 1000 / (cal[RATES[0]] * PREFILL_SCALE)
    wait, rho = queueing(rate, service, servers, None if workload.request_rate else concurrency)
    if not workload.request_rate:  # closed loop: Little's law, N = rate x (TTFT + OSL x TPOT), holds exactly
        residual = (concurrency / rate - (cal["ttft_ms"] + workload.osl * cal["tpot_ms"]) / 1000) * 1000
        wait = max(wait if rho < 1 else 0.0, residual)
    cal["ttft_ms"] += wait
    capacity = _kv_capacity(layout.gpu, layout.tp, workload.isl + workload.osl, gpu_memory_utilization, dcp)
    notes = []
    if batch > capacity:
        notes.append(
            f"{batch} requests of {workload.isl + workload.osl:,} tokens per worker exceed the KV cache "
            f"({capacity} fit on TP{layout.tp} {layout.gpu}): vLLM would queue the rest"
        )
    if concurrency % layout.replicas:
        notes.append(f"concurrency {concurrency} is not a multiple of {layout.replicas} workers; modelled {batch} each")
    if rho >= 1 and workload.request_rate:
        notes.append(
            f"{rate:.3g} req/s load the prefill stage to {rho:.0%} of what it serves: the queue grows without bound"
        )
    return Estimate(
        layout,
        workload,
        batch,
        {m: raw[m] for m in METRICS},
        {m: cal[m] for m in METRICS},
        source,
        batch <= capacity,
        capacity,
        tuple(notes),
        ttft_service_ms=cal["ttft_ms"] - wait,
        prefill_wait_ms=wait,
        prefill_utilization=rho,
        arrival_rate=rate,
        speedup=cal_params.speedup(point, layout.speculation),
    )


def gpu_hour_usd(pricing: Any) -> float:
    return pricing.instance_hour_usd / pricing.gpus_per_instance


def usd_per_million_output_tokens(cost_per_hour: float, tokens_per_second: float) -> Optional[float]:
    if not tokens_per_second:
        return None
    return cost_per_hour / (tokens_per_second * 3600) * 1e6


def curves(
    layout: Layout,
    *,
    osl: int = DEFAULT_OSL,
    gpu_memory_utilization: float = 0.9,
    cost_per_hour: Optional[float] = None,
) -> list[dict[str, Any]]:
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
            out.append(
                {
                    "isl": isl,
                    "batch_per_worker": batch,
                    "concurrency": e.concurrency,
                    "kv_fits": e.kv_fits,
                    **{k: round(v, 3) for k, v in e.calibrated.items() if k != "tokens_per_second"},
                    "raw": {k: round(v, 3) for k, v in e.raw.items() if k != "tokens_per_second"},
                    "usd_per_million_output_tokens": None
                    if cost_per_hour is None
                    else round(usd_per_million_output_tokens(cost_per_hour, tps), 4),
                }
            )
    return out


# ---------------------------------------------------------------- against the API


@dataclass(frozen=True)
class ApiPrice:
    """An API's list price, USD per million tokens (recipes/facts/api-prices.yaml)."""

    model: str
    input_cache_miss: float
    input_cache_hit: float
    output: float
    source: str
    as_of: str

    def per_request(self, w: Workload) -> float:
        """The API's bill for one request: uncached input, cached input and output priced separately."""
        cached = w.isl * w.cache_hit_rate
        return ((w.isl - cached) * self.input_cache_miss + cached * self.input_cache_hit + w.osl * self.output) / 1e6


API_PRICE_KEYS = ("input_cache_miss", "input_cache_hit", "output")


def api_prices() -> tuple[str, dict[str, ApiPrice]]:
    """(default model, every model's price) from recipes/facts/api-prices.yaml, each price finite and >= 0."""
    data = recipe_file("facts/api-prices.yaml")
    out = {}
    for name, p in (data.get("models") or {}).items():
        for k in API_PRICE_KEYS:
            v = p.get(k) if isinstance(p, dict) else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise PerfError(
                    f"recipes/facts/api-prices.yaml: models.{name}.{k} = {v!r}; allowed: a finite number >= 0 "
                    "(USD per million tokens)"
                )
        for k in ("source", "as_of"):
            if not str(p.get(k) or "").strip():
                raise PerfError(f"recipes/facts/api-prices.yaml: models.{name}.{k} is missing; every price needs it")
        out[name] = ApiPrice(name, *(float(p[k]) for k in API_PRICE_KEYS), str(p["source"]), str(p["as_of"]))
    if data.get("default") not in out:
        raise PerfError(
            f"recipes/facts/api-prices.yaml: default {data.get('default')!r} is not one of {', '.join(out)}"
        )
    return data["default"], out


def cost_vs_api(
    w: Workload, price: ApiPrice, capacity_rps: float, bases: dict[str, float], request_rate: Optional[float] = None
) -> dict[str, Any]:
    """Self-hosted vs API cost for the workload `w`, per cost basis.

    capacity_rps: requests/s the layout completes within the SLA at its modelled load; request_rate: the load
    the team sends (None: the layout kept full, at capacity). bases: $/hour per cost basis, e.g.
    {"capacity_block": the whole block (paid whether used or not), "gpus_used": only the layout's GPUs}.
    Break-even: the request rate at which the hour's cost equals the API's bill for the same requests."""
    api_req = price.per_request(w)
    rate = capacity_rps if request_rate is None else request_rate
    out: dict[str, Any] = {
        "api_model": price.model,
        "api_price_source": f"{price.source}, {price.as_of}",
        "api_usd_per_request": round(api_req, 6),
        "api_usd_per_million_output_tokens": round(api_req / w.osl * 1e6, 4),
        "capacity_requests_per_second": round(capacity_rps, 4),
        "requests_per_second": round(rate, 4),
        "carries_the_load": rate <= capacity_rps * (1 + 1e-9),
        "bases": {},
    }
    for basis, per_hour in bases.items():
        self_req = per_hour / 3600 / rate if rate > 0 else math.inf
        even = per_hour / 3600 / api_req if api_req > 0 else math.inf
        out["bases"][basis] = {
            "usd_per_hour": round(per_hour, 2),
            "usd_per_request": round(self_req, 6),
            "usd_per_million_output_tokens": round(self_req / w.osl * 1e6, 4),
            "cheaper_than_api": self_req < api_req,
            "break_even_requests_per_second": round(even, 4),
            "break_even_utilization": round(even / capacity_rps, 4) if capacity_rps else None,
            "break_even_reachable": even <= capacity_rps,
        }
    return out


# ---------------------------------------------------------------- SLA search


# Prefill:decode worker ratios ranked: every p:d in lowest terms with p, d <= 4. The table holds 1:1, 1:2 and
# 2:1 as aiconfigurator computed them; the others are composed from 1:1 by its own rule (disagg_throughput).
PD_RATIOS = tuple((p, d) for p in range(1, 5) for d in range(1, 5) if math.gcd(p, d) == 1)


def candidate_layouts(speculation: Speculation = PLAIN) -> list[Layout]:
    out = [Layout(gpu, "agg", tp, 1, speculation=speculation) for gpu, tp in aic.AGG_LAYOUTS]
    for gpu, ptp, dtp in aic.DISAGG_LAYOUTS:
        out += [Layout(gpu, "disagg", dtp, d, ptp, p, speculation) for p, d in PD_RATIOS]
    return out


@dataclass
class Exclusions:
    """Why layout x load points were left out of an --sla answer: counts, and the nearest miss per limit."""

    counts: dict[str, int] = field(default_factory=dict)
    best: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def add(self, why: str, value: Optional[float] = None, reason: str = "") -> None:
        self.counts[why] = self.counts.get(why, 0) + 1
        if value is not None:
            self.best[why] = min(self.best.get(why, math.inf), value)
        if reason and why not in self.reasons:
            self.reasons[why] = reason

    def to_json(self) -> dict[str, Any]:
        return {
            k: {
                "points": n,
                **({"nearest": round(self.best[k], 3)} if k in self.best else {}),
                **({"example": self.reasons[k]} if k in self.reasons else {}),
            }
            for k, n in self.counts.items()
        }

    def lines(self, ttft_ms: float, tpot_ms: float) -> list[str]:
        text = {
            "ttft": f"TTFT over {ttft_ms:g} ms (prefill and its queue; lowest seen {{:,.0f}} ms)",
            "tpot": f"TPOT over {tpot_ms:g} ms (lowest seen {{:,.1f}} ms)",
            "kv": "the KV cache cannot hold that many requests of this length",
            "rate": "the request rate needs more copies than modelled (saturated prefill or decode)",
            "no_answer": "the model has no number for it",
        }
        out = []
        for k, n in self.counts.items():
            line = text[k].format(self.best[k]) if k in self.best else text[k]
            if k in self.reasons:
                line += f" (e.g. {self.reasons[k]})"
            out.append(f"{n} excluded: {line}")
        return out


# ---------------------------------------------------------------- memory


def memory_comparison(gpu: str, tp: int) -> Optional[dict[str, Any]]:
    """Our per-GPU weights and HBM next to aiconfigurator's (GiB), with the difference taken apart.

    Two terms explain it: aiconfigurator counts the MXFP4 routed experts at 4 bits per value, without the E8M0
    scale (8 bits per 32 values, +6.25% of the experts), and leaves the vision tower (kept whole on every GPU
    by --mm-encoder-tp-mode data) out of the weights. What remains is `residual_gib`."""
    from kimi_k3.facts import model as facts_model
    from kimi_k3.facts import platforms
    from kimi_k3.sizing import memory

    theirs = raw_table().get("memory_gib_per_gpu", {}).get(f"{gpu} tp{tp}")
    if theirs is None:
        return None
    gib = 2**30
    m = facts_model.load_model_facts()
    ours = memory.weights_bytes_per_gpu(m, tp)
    groups = facts_model.weight_groups(m)
    scale_bits = m.routed_expert_bits - 4
    scales = sum(g.params * scale_bits / 8 / tp for g in groups if g.kind == "routed_experts")
    vision = sum(g.bytes for g in groups if g.kind == "vision")
    hbm = platforms.load_platforms()[gpu].hbm_gb * 1e9
    return {
        "ours_weights_gib": round(ours / gib, 2),
        "aiconfigurator_weights_gib": round(theirs["weights"], 2),
        "difference_gib": round(ours / gib - theirs["weights"], 2),
        "mxfp4_scales_gib": round(scales / gib, 2),
        "vision_tower_gib": round(vision / gib, 2),
        "residual_gib": round((ours - scales - vision) / gib - theirs["weights"], 2),
        "ours_hbm_gib": round(hbm / gib, 2),
        "aiconfigurator_hbm_gib": round(theirs["hbm_bytes"] / gib, 2),
        "aiconfigurator_activations_nccl_other_gib": round(
            theirs["activations"] + theirs["nccl"] + theirs["others"], 2
        ),
    }


# ---------------------------------------------------------------- mocker
