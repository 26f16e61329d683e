"""The calibration of aiconfigurator's raw figures against the public measurements (recipes/facts/perf-measurements.yaml)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from kimi_k3.data import recipe_file
from kimi_k3.sizing.aic_table import RATES, disagg_throughput, point_gpus, raw_estimate, tpot_at
from kimi_k3.sizing.layout import PLAIN, PerfError, Speculation


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
        ratio = tpot_at(point, b * (spec.num_speculative_tokens + 1)) / tpot_at(point, b)
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
    return calibrated_metrics(cal, c, raw, spec, raw["ttft_ms"])


def calibrated_metrics(
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
    out["tokens_per_second_per_gpu"] = out["tokens_per_second"] / point_gpus(point)
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
