"""Why layout x load points were left out of an --sla answer: counts, and the nearest miss per limit."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional


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
