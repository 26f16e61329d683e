"""Self-hosted cost against an API's list price (recipes/facts/api-prices.yaml): prices, per request, break-even."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.data import recipe_file
from kimi_k3.sizing.layout import PerfError, Workload


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
