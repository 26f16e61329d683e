"""plan.py -> metrics.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import re
from typing import Iterable, Optional

from kimi_k3.pods.smoke import ROUTER_CACHED_TOTAL
from kimi_k3.rehearsal.plan import Rehearsal


def registered_workers(discovery_keys: Iterable[str]) -> dict[str, int]:
    """Worker instances per endpoint component ('backend', 'prefill') from the file discovery store's keys,
    e.g. 'v1/instances/dynamo/prefill/generate/1a2b' (URL-decoded)."""
    out: dict[str, int] = {}
    for key in discovery_keys:
        parts = key.split("/")
        if len(parts) >= 6 and parts[0] == "v1" and parts[1] == "instances" and parts[4] == "generate":
            out[parts[3]] = out.get(parts[3], 0) + 1
    return out


# A mocker's --disaggregation-mode -> the worker type its model card declares, as the frontend's
# GET /v1/models/{model}/ready counts live workers (dynamo-kv-router WorkerType, lowercase).
FRONTEND_WORKER_TYPE = {"agg": "aggregated", "prefill": "prefill", "decode": "decode"}


def frontend_workers_wanted(rehearsal: "Rehearsal") -> dict[str, int]:
    """Live workers per worker type the frontend must see before the graph counts as ready: every replica."""
    out: dict[str, int] = {}
    for r in rehearsal.roles:
        kind = FRONTEND_WORKER_TYPE[r.mode]
        out[kind] = out.get(kind, 0) + r.replicas
    return out


def endpoint_component(mode: str) -> str:
    """The endpoint a mocker registers by default (dynamo/mocker/args.py: DEFAULT_PREFILL_ENDPOINT, DEFAULT_ENDPOINT)."""
    return "prefill" if mode == "prefill" else "backend"


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text exposition -> [(name, labels, value)] (comments and unparsable lines skipped)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def metric_sum(samples: Iterable[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))


# Where kv_hit_rate's cached tokens come from, per the plan's cache_evidence (plan.MOCKER_CACHE_EVIDENCE): the
# frontend's count of usage cached_tokens, or the KV router's cached prefix on the chosen workers (their KV events;
# decode mockers publish none: dynamo/mocker/config.py build_runtime_config, so a disaggregated prompt counts once).
CACHED_METRIC = {"usage": "dynamo_frontend_cached_tokens_sum", "router": ROUTER_CACHED_TOTAL}
HIT_SOURCE = {
    "usage": "frontend's cached / prompt tokens (usage cached_tokens)",
    "router": "KV router's cached prefix on the chosen workers / frontend's prompt tokens (the mocker's SGLang "
    "engine reports no cached_tokens)",
}


def kv_hit_rate(frontend_samples: list[tuple[str, dict[str, str], float]], evidence: str = "usage") -> Optional[float]:
    """Share of prompt tokens served from cache, from Dynamo's own metrics on the frontend (CACHED_METRIC)."""
    prompt = metric_sum(frontend_samples, "dynamo_frontend_input_sequence_tokens_sum")
    cached = metric_sum(frontend_samples, CACHED_METRIC[evidence])
    return None if prompt <= 0 else round(cached / prompt, 4)


def worker_requests(worker_samples: list[tuple[str, dict[str, str], float]]) -> float:
    """Requests one worker process handled on its generate endpoint (its own system server's metrics)."""
    return metric_sum(worker_samples, "dynamo_component_requests_total", dynamo_endpoint="generate")


HIT_METRICS = ("dynamo_frontend_input_sequence_tokens_sum", *CACHED_METRIC.values())


def delta(before, after, names=HIT_METRICS) -> list[tuple[str, dict[str, str], float]]:
    """What each counter in `names` grew by between two scrapes, as samples kv_hit_rate() reads."""
    b = {n: metric_sum(before, n) for n in names}
    return [(n, {}, metric_sum(after, n) - b[n]) for n in names]
