"""The Dynamo mocker's timing tables from the calibrated performance model, and the mocker's own reading of them."""

from __future__ import annotations

import bisect
from functools import lru_cache
from typing import Any, Optional, Sequence

from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing.aic_table import raw_estimate
from kimi_k3.sizing.calibration import calibration
from kimi_k3.sizing.layout import DEFAULT_OSL, Layout, PerfError


def _contexts(layout: Layout, osl: int) -> tuple[int, int]:
    """The shortest and longest context where one request fits (aiconfigurator's memory check)."""
    fits = []
    for isl in aic.CONTEXTS:
        try:
            raw_estimate(layout.point(isl, osl, 1), live=False)
            fits.append(isl)
        except PerfError:
            pass
    if not fits:
        raise PerfError(f"no context length of {layout.describe()} is in the committed aiconfigurator table")
    return fits[0], fits[-1]


def _tpot(layout: Layout, osl: int, lo: int, hi: int, ctx: float, batch: float) -> float:
    """The calibrated decode step (ms) at a context (clamped to [lo, hi]) and batch: what the decode table samples."""
    cal = calibration()
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


def model_itl_ms(
    gpu: str, prefill_tp: int, decode_tp: int, context: float, batch: float, max_num_seqs: Optional[int] = None
) -> float:
    """The decode step the decode table samples at (batch x context, context), from the model itself: the table's
    first context column (1 token: loads no worker can hold) skews the mocker's bilinear reading below its second
    (~23k tokens), e.g. 56.8 ms for 16 x 14k where this gives 18.4 (noted in docs/traces.md, not fixed here)."""
    layout = Layout(gpu, "disagg", decode_tp, 1, prefill_tp, 1)
    lo, hi = _contexts(layout, DEFAULT_OSL)
    cap = float("inf") if max_num_seqs is None else float(max_num_seqs)
    return _tpot(layout, DEFAULT_OSL, lo, hi, context, min(batch, cap))


def mocker_profile(
    layout: Layout,
    osl: int = DEFAULT_OSL,
    resolution: int = 24,
    max_active_kv_tokens: Optional[int] = None,
    max_num_seqs: Optional[int] = None,
) -> dict[str, Any]:
    """Dynamo mocker timing tables from the calibrated model of `layout`, in the mocker-format NPZ keys of
    dynamo/mocker 1.6.1 (utils/planner_profiler_perf_data_converter.py, on regular grids as it makes them):
    prefill_ttft_ms by prefill_isl, and decode_itl[active KV tokens][context length] in ms, where the decode
    batch is active tokens / context length. Outside the table (contexts below 8k, more than 64 requests per
    worker, up to the decode workers' `max_num_seqs`, their --max-num-seqs; None: no cap) the nearest covered point is
    used, scaled by the extra load."""
    cal = calibration()
    lo, hi = _contexts(layout, osl)
    if max_active_kv_tokens is None:
        from kimi_k3.sizing import memory

        max_active_kv_tokens = memory.plan_role(layout.gpu, layout.tp, prefix_caching=True).single_request_tokens

    def grid(a: float, b: float) -> list[float]:
        return [a + (b - a) * k / (resolution - 1) for k in range(resolution)]

    def tpot(ctx: float, batch: float) -> float:
        return _tpot(layout, osl, lo, hi, ctx, batch)

    isl_grid = grid(lo, hi)
    prefill = []
    for isl in isl_grid:
        raw, _ = raw_estimate(layout.point(isl, osl, 1), live=False)
        prefill.append(round(cal.apply(raw, 1, prefill_batch=1)["ttft_ms"], 3))
    kv_grid, ctx_grid = grid(0, float(max_active_kv_tokens)), grid(1, hi)
    cap = float("inf") if max_num_seqs is None else float(max_num_seqs)  # a worker never runs more at once
    itl = [[round(tpot(ctx, min(kv / ctx, cap)), 3) for ctx in ctx_grid] for kv in kv_grid]
    return {
        "prefill_isl": isl_grid,
        "prefill_ttft_ms": prefill,
        "decode_active_kv_tokens": kv_grid,
        "decode_context_length": ctx_grid,
        "decode_itl": itl,
    }


@lru_cache(maxsize=32)
def _disagg_profile(gpu: str, prefill_tp: int, decode_tp: int, max_num_seqs: Optional[int]) -> dict[str, Any]:
    return mocker_profile(Layout(gpu, "disagg", decode_tp, 1, prefill_tp, 1), max_num_seqs=max_num_seqs)


def disagg_profile(gpu: str, prefill_tp: int, decode_tp: int, max_num_seqs: Optional[int] = None) -> dict[str, Any]:
    """The tables the rehearsal hands its mockers for a prefill + decode layout of these TPs (the worker counts do
    not enter them: per-worker times)."""
    return _disagg_profile(gpu, prefill_tp, decode_tp, max_num_seqs)


def _segment(xs: Sequence[float], x: float) -> tuple[int, float]:
    """The grid cell of x (the first or last one outside the grid: extrapolated) and x's position in it."""
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


def prefill_ms(profile: dict[str, Any], new_tokens: float, batch: int = 1) -> float:
    """A prefill step's time as dynamo.mocker 1.6.1 reads the table (lib/mocker/src/common/perf_model.rs
    predict_prefill_time: linear in batch x new tokens, extrapolated past both ends, at least 0)."""
    if batch <= 0 or new_tokens <= 0:
        return 0.0
    xs, ys = profile["prefill_isl"], profile["prefill_ttft_ms"]
    i, t = _segment(xs, batch * new_tokens)
    return max(0.0, ys[i] + t * (ys[i + 1] - ys[i]))


def decode_itl_ms(profile: dict[str, Any], active_kv_tokens: float, context_length: float) -> float:
    """A decode step's time as dynamo.mocker 1.6.1 reads the table (perf_model.rs predict_decode_time: bilinear in
    (active KV tokens, mean context length), extrapolated, at least 1 ms)."""
    i, tx = _segment(profile["decode_active_kv_tokens"], active_kv_tokens)
    j, ty = _segment(profile["decode_context_length"], context_length)
    z = profile["decode_itl"]
    top = z[i][j] + ty * (z[i][j + 1] - z[i][j])
    bottom = z[i + 1][j] + ty * (z[i + 1][j + 1] - z[i + 1][j])
    return max(1.0, top + tx * (bottom - top))


def write_mocker_profile(profile: dict[str, Any], path: str) -> str:
    """The profile as the mocker's NPZ file (numpy comes with matplotlib)."""
    import numpy as np

    np.savez(path, **{k: np.asarray(v, dtype=float) for k, v in profile.items()})
    return path
