"""aiconfigurator's committed table (recipes/facts/perf-raw.yaml): its raw estimates, interpolated and composed off the grid.

`raw` is aiconfigurator's number only where `source` is `aiconfigurator`; points off the committed grid are
interpolated (log-log in batch and context) and say so.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Iterable, Optional

from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing.layout import PerfError, candidate_layouts

METRICS = ("ttft_ms", "tpot_ms", "tokens_per_second", "tokens_per_second_per_gpu", "tokens_per_second_per_user")


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


def point_gpus(point: dict[str, Any]) -> int:
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
        out["tokens_per_second_per_gpu"] = out["tokens_per_second"] / point_gpus(point)
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
        out["tokens_per_second_per_gpu"] = out["tokens_per_second"] / point_gpus(point)
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


def tpot_at(point: dict[str, Any], batch: float) -> float:
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
