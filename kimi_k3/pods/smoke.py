"""Smoke test of a serving graph's OpenAI endpoint: one implementation for `kimi-k3 rehearse` (local frontend
over simulated engines) and the in-cluster Job `pulumi up` runs after the graph is Ready.

Standard library only: the Job mounts this file from a ConfigMap into a plain Python image.
Exit 0 when every check passes, 1 when one fails (the names of the failed checks are printed and written to
the container's termination message), 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import base64
import functools
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Mapping, Optional

# The cache-hit probe: vLLM reuses only whole KV blocks (1536 tokens at TP8 for Kimi K3: recipes/model.yaml), so
# a repeat reports cached_tokens > 0 only past a full block of the block size the workers run. The probe's length
# must therefore hold whatever the tokenizer: it is N distinct space-separated random words, and every tokenizer
# vLLM serves Kimi K3 (or the rehearsal) with splits at whitespace before merging (tiktoken's / GPT-2's byte-level
# pre-tokenizer regex, SentencePiece's split_by_whitespace), so no token spans two words: N words >= N tokens.
PROBE_BLOCKS = 3            # probe words per KV block of the largest block size in the graph (>= 2 blocks cached)
PROBE_SEED = 19             # deterministic: the same probe in the rehearsal and in every Job run
PROBE_LETTERS = "abcdefghijklmnopqrstuvwxyz"
PROBE_MAX_TOKENS_PER_WORD = 4   # " abc" is 4 bytes: no byte-level (or byte-fallback) tokenizer makes more of it


def probe_tokens(kv_block_size: int) -> int:
    """The probe's length (a lower bound on its tokens under any whitespace-splitting tokenizer) for workers whose
    largest KV block is `kv_block_size` tokens."""
    return PROBE_BLOCKS * kv_block_size


def cache_probe(tokens: int) -> str:
    """`tokens` space-separated random 3-letter words: at least `tokens` tokens, at most ~3 per word."""
    import random
    rng = random.Random(PROBE_SEED)
    return " ".join("".join(rng.choice(PROBE_LETTERS) for _ in range(3)) for _ in range(tokens)) + " "


# 1x1 PNG (one white pixel): the smallest image input every multimodal processor accepts.
PIXEL_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC")
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


class Client:
    def __init__(self, base_url: str, timeout: float):
        self.base = base_url.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 (URL from our caller)
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def json(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, raw = self.request(method, path, body)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")


def _chat(model: str, content: Any, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}


def _usage_ok(usage: Any) -> bool:
    return isinstance(usage, dict) and usage.get("prompt_tokens", 0) > 0 and usage.get("completion_tokens", 0) > 0


def check_models(c: Client, model: str, max_len: int) -> str | None:
    status, body = c.json("GET", "/v1/models")
    ids = [m.get("id") for m in body.get("data", [])] if status == 200 and isinstance(body, dict) else []
    return None if model in ids else f"GET /v1/models -> {status}, served names {ids}, want {model!r}"


def check_chat(c: Client, model: str, max_len: int) -> str | None:
    status, body = c.json("POST", "/v1/chat/completions", _chat(model, "Say hello.", 8))
    if status != 200 or not isinstance(body, dict):
        return f"POST /v1/chat/completions -> {status}: {str(body)[:200]}"
    if not body.get("choices") or not _usage_ok(body.get("usage")):
        return f"no choices or no token usage in {json.dumps(body)[:200]}"
    return None


def check_chat_stream(c: Client, model: str, max_len: int) -> str | None:
    req = _chat(model, "Count to five.", 8, stream=True, stream_options={"include_usage": True})
    status, raw = c.request("POST", "/v1/chat/completions", req)
    if status != 200:
        return f"streamed POST /v1/chat/completions -> {status}: {raw[:200]!r}"
    chunks, usage, done = 0, None, False
    for line in raw.decode(errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            continue
        event = json.loads(payload)
        chunks += 1
        usage = event.get("usage") or usage
    if not done or chunks < 2 or not _usage_ok(usage):
        return f"stream: {chunks} chunks, [DONE] {'seen' if done else 'missing'}, usage {usage}"
    return None


PREFIX_CACHE_SECONDS = 15   # for the worker's KV event to reach the router (ms when idle; a loaded machine lags)
# Where a repeat's reuse shows: "usage" = the response's usage.prompt_tokens_details.cached_tokens (vLLM; real SGLang
# under dynamo.sglang: SGLang's meta_info cached_tokens, no --enable-cache-report needed, that gates SGLang's own
# OpenAI server only); "router" = the frontend's KV router counter of cached prefix tokens on the worker it chose,
# fed by the worker's KV events (for an engine that caches but reports no cached tokens: the mocker's SGLang).
CACHE_EVIDENCE = ("usage", "router")
# dynamo/prometheus_names.py (1.6.1) router KV_SELECTED_CACHED_PREFIX_TOKENS_TOTAL, on the frontend's /metrics
ROUTER_CACHED_TOTAL = "dynamo_component_router_kv_selected_cached_prefix_tokens_total"


def router_cached_tokens(c: Client) -> float:
    """The frontend's KV router: cached prefix tokens on the workers it chose, so far (all phases and workers)."""
    status, raw = c.request("GET", "/metrics")
    if status != 200:
        raise OSError(f"GET /metrics -> {status}")
    total = 0.0
    for line in raw.decode(errors="replace").splitlines():  # `name{labels} value [timestamp]`
        if line.startswith((ROUTER_CACHED_TOTAL + "{", ROUTER_CACHED_TOTAL + " ")):
            total += float(line[line.rfind("}") + 1:].split()[0] if "{" in line else line.split()[1])
    return total


def check_prefix_cache(c: Client, model: str, max_len: int, kv_block_size: Optional[int] = None,
                       probe_len: Optional[int] = None, cache_evidence: str = "usage") -> str | None:
    """The same long prompt again: a repeat must show at least one whole KV block of cached prompt tokens (prefix
    caching + KV routing), where `cache_evidence` says the engine exposes it (CACHE_EVIDENCE). `kv_block_size`:
    the largest block the graph's workers run; the probe spans PROBE_BLOCKS of them (or `probe_len` words)."""
    if cache_evidence not in CACHE_EVIDENCE:
        return f"cache evidence {cache_evidence!r}: allowed: {', '.join(CACHE_EVIDENCE)}"
    if not kv_block_size or kv_block_size < 1:
        return ("no --kv-block-size: the probe cannot be sized to the workers' KV block (vLLM caches whole blocks "
                "only, so a probe shorter than one never reports cached tokens)")
    words = probe_len or probe_tokens(kv_block_size)
    if words < kv_block_size + 1:
        return (f"probe of {words} words cannot span one whole {kv_block_size}-token block and a new token; "
                f"allowed: >= {kv_block_size + 1} (default {probe_tokens(kv_block_size)})")
    prompt = cache_probe(words)
    cached, attempt, end = 0.0, 0, time.monotonic() + PREFIX_CACHE_SECONDS
    while True:  # the router learns a block from the worker's KV event; give it a moment, bounded in time
        before = router_cached_tokens(c) if cache_evidence == "router" else 0.0
        status, body = c.json("POST", "/v1/chat/completions", _chat(model, prompt + f"Task {attempt}.", 4))
        if status != 200:
            return f"long prompt -> {status}: {str(body)[:200]}"
        usage = body.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        cached = router_cached_tokens(c) - before if cache_evidence == "router" else details.get("cached_tokens") or 0
        if attempt and cached >= kv_block_size:
            return None
        if attempt >= 2 and time.monotonic() > end:
            where = ("the KV router found cached on the chosen worker" if cache_evidence == "router"
                     else "reported cached_tokens")
            return (f"repeated {usage.get('prompt_tokens')}-token prompt ({words} words): {where}={cached:.0f}, "
                    f"want >= {kv_block_size} (one whole KV block; {attempt} repeats)")
        attempt += 1
        time.sleep(0.5)


def check_context_limit(c: Client, model: str, max_len: int) -> str | None:
    """A request that cannot fit the context window gets a clean 4xx with an error body, not a 5xx or a hang."""
    status, body = c.json("POST", "/v1/chat/completions", _chat(model, "Write forever.", max_len + 1))
    if 400 <= status < 500 and body:
        return None
    return f"max_tokens={max_len + 1} over a {max_len}-token context -> {status}: {str(body)[:200]}"


def check_reasoning(c: Client, model: str, max_len: int) -> str | None:
    status, body = c.json("POST", "/v1/chat/completions", _chat(model, "What is 17 * 23? Think step by step.", 512))
    msg = (body.get("choices") or [{}])[0].get("message", {}) if status == 200 and isinstance(body, dict) else {}
    return None if msg.get("reasoning_content") else f"-> {status}: no reasoning_content in {str(body)[:200]}"


def check_tool_call(c: Client, model: str, max_len: int) -> str | None:
    req = _chat(model, "What is the weather in Paris? Use the tool.", 256, tools=[WEATHER_TOOL], tool_choice="auto")
    status, body = c.json("POST", "/v1/chat/completions", req)
    msg = (body.get("choices") or [{}])[0].get("message", {}) if status == 200 and isinstance(body, dict) else {}
    calls = msg.get("tool_calls") or []
    if calls and calls[0].get("function", {}).get("name") == "get_weather":
        return None
    return f"-> {status}: no get_weather tool call in {str(body)[:200]}"


def check_image(c: Client, model: str, max_len: int) -> str | None:
    url = "data:image/png;base64," + base64.b64encode(PIXEL_PNG).decode()
    content = [{"type": "text", "text": "Describe the image in one word."}, {"type": "image_url", "image_url": {"url": url}}]
    status, body = c.json("POST", "/v1/chat/completions", _chat(model, content, 16))
    if status == 200 and isinstance(body, dict) and _usage_ok(body.get("usage")):
        return None
    return f"image input -> {status}: {str(body)[:200]}"


CHECKS: dict[str, Callable[[Client, str, int], str | None]] = {
    "models_lists_served_name": check_models,
    "chat_completion": check_chat,
    "chat_completion_streamed": check_chat_stream,
    "repeated_prompt_cached": check_prefix_cache,
    "over_context_clean_error": check_context_limit,
}
# What only the real model (its parsers and vision encoder) can show: run in the cluster, not over the mocker.
REAL_MODEL_CHECKS: dict[str, Callable[[Client, str, int], str | None]] = {
    "reasoning_content": check_reasoning,
    "tool_call_parsed": check_tool_call,
    "image_input": check_image,
}


def run(base_url: str, model: str, max_model_len: int, *, kv_block_size: Optional[int] = None,
        probe_len: Optional[int] = None, real_model: bool = False, timeout: float = 60.0,
        log: Callable[[str], None] = lambda s: None, cache_evidence: str = "usage") -> dict[str, Any]:
    """Run every check; {passed, checks: {name: bool}, failures: {name: why}}. `kv_block_size`: the largest KV
    block (tokens) the graph's workers run, which the cache-hit probe must span (kimi_k3/manifests.py passes it to
    the Job, kimi_k3/commands/rehearse.py to the rehearsal: one probe, one criterion). `cache_evidence`: where the
    engine shows the reuse (CACHE_EVIDENCE; the Job: usage, every real engine reports it there)."""
    client = Client(base_url, timeout)
    checks = {**CHECKS, **(REAL_MODEL_CHECKS if real_model else {})}
    checks["repeated_prompt_cached"] = functools.partial(check_prefix_cache, kv_block_size=kv_block_size,
                                                         probe_len=probe_len, cache_evidence=cache_evidence)
    results: dict[str, bool] = {}
    failures: dict[str, str] = {}
    for name, check in checks.items():
        try:
            why = check(client, model, max_model_len)
        except Exception as err:  # a check that crashes has failed; say why and go on with the others
            why = f"{type(err).__name__}: {err}"
        results[name] = why is None
        if why is not None:
            failures[name] = why
        log(f"  smoke {name}: {'ok' if why is None else 'FAILED: ' + why}")
    return {"passed": all(results.values()), "checks": results, "failures": failures}


def ready_path(model: str) -> str:
    """Dynamo's per-model serving readiness (dynamo-llm 1.6.1 src/http/service/openai.rs, get_model_readiness):
    200 only when every registered worker type has a live worker, a serving engine exists and the HTTP routes are
    enabled; 503 with the same body otherwise; 404 while the model is not committed (or on a frontend without it)."""
    return "/v1/models/" + urllib.parse.quote(model, safe="/") + "/ready"


def frontend_workers(body: Any) -> dict[str, int]:
    """Live workers per worker type ("decode", "prefill", "aggregated") as the frontend counts them, from the
    body of GET /v1/models/{model}/ready: {"namespaces": {ns: {"worker_types": {type: {"workers": n}}}}}."""
    out: dict[str, int] = {}
    namespaces = body.get("namespaces") if isinstance(body, dict) else None
    for ns in (namespaces or {}).values():
        for kind, detail in ((ns or {}).get("worker_types") or {}).items():
            out[kind] = out.get(kind, 0) + int((detail or {}).get("workers") or 0)
    return out


def topology_verdict(status: int, body: Any, want: Optional[Mapping[str, int]] = None) -> Optional[str]:
    """None when /v1/models/{model}/ready says the frontend can serve the model and (if `want` is given) sees at
    least that many live workers of each type; otherwise what is missing, in one line."""
    if status != 200 or not isinstance(body, dict) or body.get("ready") is not True:
        reason = body.get("reason") if isinstance(body, dict) else None
        missing = sorted({t for ns in ((body.get("namespaces") or {}).values() if isinstance(body, dict) else [])
                          for t in (ns or {}).get("missing_worker_types") or []})
        return (f"GET /v1/models/<model>/ready -> {status}" + (f": {reason}" if reason else "")
                + (f"; missing worker types {missing}" if missing else ""))
    seen = frontend_workers(body)
    short = [f"{k} {seen.get(k, 0)}/{n}" for k, n in sorted((want or {}).items()) if seen.get(k, 0) < n]
    return None if not short else "live workers the frontend sees: " + ", ".join(short)


def probe_request(model: str, which_workers: bool = False) -> dict[str, Any]:
    """The routing probe: one token through every role of the graph; `which_workers`: Dynamo's nvext asks the
    response to name the workers that served it (dynamo-llm 1.6.1 NvExtResponse.worker_id)."""
    return {**_chat(model, "Ready?", 1), **({"nvext": {"extra_fields": ["worker_id"]}} if which_workers else {})}


def probe_verdict(status: int, body: Any, needs_prefill: bool) -> Optional[str]:
    """None when the probe was served (and, for a disaggregated graph, went through a prefill worker where the
    response says which workers served it); otherwise why not, in one line."""
    if status != 200 or not isinstance(body, dict) or not body.get("choices"):
        return f"POST /v1/chat/completions -> {status}: {str(body)[:200]}"
    served_by = (body.get("nvext") or {}).get("worker_id")
    if needs_prefill and isinstance(served_by, dict) and served_by.get("prefill_worker_id") is None:
        return f"served without a prefill worker: {served_by}"
    return None


def wait_until_served(base_url: str, model: str, deadline_s: float, log: Callable[[str], None]) -> bool:
    """Wait until the frontend can route a request: the Service can lag the graph's Ready condition by a few
    seconds (endpoints, kube-proxy), the model is listed as soon as every worker type has registered, and a
    disaggregated decode set's prefill router is built after that: in that window Dynamo answers 503 ("Service
    temporarily unavailable"; dynamo-llm 1.6.1 src/kv_router/prefill_router/mod.rs, prefill_activation_pending_error)
    with no status that says so. So: listed, /ready (where the frontend has it), then one probe request, retried."""
    client = Client(base_url, 10.0)
    end = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < end:
        why: Optional[str]
        try:
            why = check_models(client, model, 0)
            if why is None:
                status, body = client.json("GET", ready_path(model))
                # listed but 404: a frontend without the readiness route (older Dynamo); the probe decides
                why = None if status == 404 else topology_verdict(status, body)
            if why is None:
                status, body = client.json("POST", "/v1/chat/completions", probe_request(model))
                why = probe_verdict(status, body, needs_prefill=False)
                if why is None:
                    return True
        except OSError as err:
            why = f"{base_url}: {err}"
        if why != last:
            log(f"  waiting for {model} to be served: {why}")
            last = why
        time.sleep(2)
    return False


def parser() -> argparse.ArgumentParser:
    """The Job's command line (policies/rules/observability.py reads a rendered Job's args with it)."""
    p = argparse.ArgumentParser(prog="smoke.py", description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="frontend base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--served-model-name", dest="model", required=True, help="the model name the frontend serves")
    p.add_argument("--max-model-len", type=int, required=True, help="the workers' context window in tokens")
    p.add_argument("--kv-block-size", type=int, help="the largest KV block (tokens) the workers run: the cache-hit "
                   "probe spans whole blocks of it and a repeat must report >= one block cached")
    p.add_argument("--cache-probe-tokens", type=int, help="the cache-hit probe's length in words, each >= 1 token "
                   f"under any whitespace-splitting tokenizer (default {PROBE_BLOCKS} x --kv-block-size)")
    p.add_argument("--real-model", action="store_true", help="also check reasoning, tool calls and image input")
    p.add_argument("--wait-seconds", type=float, default=0, help="wait this long for /v1/models to list the model")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    p.add_argument("--termination-log", metavar="FILE", help="write the one-line summary here (the Job's "
                   "/dev/termination-log, shown by kubectl describe pod)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def log(line: str) -> None:
        print(line, flush=True)

    if args.wait_seconds and not wait_until_served(args.url, args.model, args.wait_seconds, log):
        log(f"smoke: {args.url} did not list {args.model!r} within {args.wait_seconds:.0f}s")
    result = run(args.url, args.model, args.max_model_len, kv_block_size=args.kv_block_size,
                 probe_len=args.cache_probe_tokens, real_model=args.real_model, log=log)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
    summary = ("smoke test passed: " + ", ".join(result["checks"]) if result["passed"] else
               "smoke test FAILED: " + "; ".join(f"{k}: {v}" for k, v in result["failures"].items()))
    print(summary, flush=True)
    if args.termination_log:
        try:
            with open(args.termination_log, "w") as f:
                f.write(summary[:4000])
        except OSError as err:  # the log above says the same; the exit code is what gates `pulumi up`
            print(f"could not write {args.termination_log}: {err}", flush=True)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
