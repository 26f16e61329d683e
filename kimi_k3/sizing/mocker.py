"""perf.py -> mocker.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from typing import Any, Optional

from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing.aic_table import raw_estimate
from kimi_k3.sizing.calibration import calibration
from kimi_k3.sizing.layout import DEFAULT_OSL, Layout, PerfError


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
        from kimi_k3.sizing import memory

        max_active_kv_tokens = memory.plan_role(layout.gpu, layout.tp, prefix_caching=True).single_request_tokens

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
    cap = float("inf") if max_num_seqs is None else float(max_num_seqs)  # a worker never runs more at once
    itl = [[round(tpot(ctx, min(kv / ctx, cap)), 3) for ctx in ctx_grid] for kv in kv_grid]
    return {
        "prefill_isl": isl_grid,
        "prefill_ttft_ms": prefill,
        "decode_active_kv_tokens": kv_grid,
        "decode_context_length": ctx_grid,
        "decode_itl": itl,
    }


def write_mocker_profile(profile: dict[str, Any], path: str) -> str:
    """The profile as the mocker's NPZ file (numpy comes with matplotlib)."""
    import numpy as np

    np.savez(path, **{k: np.asarray(v, dtype=float) for k, v in profile.items()})
    return path
