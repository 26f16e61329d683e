"""The prefill workers of a disaggregated rehearsal as dynamo.mocker 1.6.1 schedules them, simulated event by event
(issue 21: `plan --trace` against the rehearsal's measured prefill load). Pure, stdlib only.

What the mocker does (aisimulate-core 0.13.0, the engine inside Dynamo 1.6.1's wheel, src/engine/scheduler/vllm/
core.rs `execute_pass_internal`, `schedule_request`, `predict_prefill_duration`, `emit_ready_tokens`):

- one pass (step) at a time per worker; a step's token budget is --max-num-batched-tokens, shared in order by the
  running requests (each continues its prompt: at most what is left of the budget, chunked prefill on), then by
  waiting requests admitted first come first served while fewer than --max-num-seqs run and budget is left; a
  request arriving during a step waits for the next one, and one reaching an idle worker starts a step at once (the
  live engine: the replay's first request ran alone, 31.6 ms for 6,758 tokens where the table / 20 says 30.6);
- a step lasts the profile's prefill time at the batch's new tokens: predict_prefill_time(batch, mean ISL, mean
  prefix), ISL and prefix summed over the scheduled chunks (prefix = the prompt tokens before the chunk: cached or
  computed by earlier steps) and divided by the batch in whole tokens; the table is read linearly at batch x (ISL -
  prefix) (kimi_k3/sizing/mocker.py `prefill_ms`), divided by --speedup-ratio; the live engine then sleeps that
  long, never less than the timer's `floor_ms` (kimi_k3/rehearsal/trace_sizing.py TIMER_MS, measured);
- a prefill worker emits the request's one token in the step that finishes its prompt (no separate decode step)
  and the request ends there: its request_duration is the wait plus the steps up to and including that one. The
  KV handoff adds nothing: --kv-transfer-bandwidth is unset in the rehearsal, and with no bandwidth
  prefill_handoff_delay_ms is None.

Before the worker: the frontend preprocesses (templates, tokenizes) each request on its runtime's worker threads
before routing it, in time growing with the prompt (`frontend`). Measured on the rehearsal (docs/traces.md): the
first request of each of the trace's bursts waited 7-10 ms + 1.0-1.5 us per prompt token between the frontend's
"request received" and the prefill worker's; the rest of a burst queue behind it, on 2 lanes (frontend.log: 2
worker threads). The FAST'25 trace's arrivals come in bursts on a 3 s grid, so this reorders each burst at the
worker, shortest first: 0.84 requests in flight without it, 0.53-0.57 measured with it.

Routing over several prefill workers: the KV router's cost is the prefill blocks a worker would compute plus its
active blocks; with the cache taken as shared (every worker's hits the same) that is the worker with the fewest
outstanding prefill tokens, lowest index on a tie. gb300-disagg deploys one prefill worker, where this is moot.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from kimi_k3.sizing import mocker, trace_plan


@dataclass
class _Job:
    index: int
    arrival: float
    prompt: int  # the prompt's tokens
    done: int  # prompt tokens already in KV (cached at admission, then computed)
    cached: int


@dataclass
class _Worker:
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)
    busy_until: Optional[float] = None  # end of the step under way (None: idle)
    step: list = field(default_factory=list)  # (job, chunk) of the step under way

    def outstanding(self) -> int:
        return sum(j.prompt - j.done for j in list(self.waiting) + self.running)


def frontend(
    arrivals: Sequence[float], tokens: Sequence[int], *, lanes: int, fixed_ms: float, us_per_token: float
) -> list[float]:
    """When each request (in arrival order, `tokens` prompt tokens) reaches the worker: one first-come-first-served
    queue over `lanes`, each request taking `fixed_ms` + `us_per_token` per prompt token (seconds out)."""
    if lanes < 1 or fixed_ms < 0 or us_per_token < 0:
        raise ValueError(f"lanes {lanes}, {fixed_ms} ms + {us_per_token} us/token: allowed >= 1, >= 0, >= 0")
    service = [(fixed_ms + us_per_token * n / 1000) / 1000 for n in tokens]
    return trace_plan.fcfs_departures(arrivals, service, lanes)


def step_ms(profile: dict[str, Any], chunks: Sequence[tuple[int, int]]) -> float:
    """The table's time (ms, before --speedup-ratio) of one step over (prompt tokens before, chunk) per request,
    as predict_prefill_duration reduces them: whole-token means of ISL and prefix, read at batch x new tokens."""
    n = len(chunks)
    if not n:
        return 0.0
    total_isl = sum(before + chunk for before, chunk in chunks)
    total_prefix = sum(before for before, _ in chunks)
    new = total_isl // n - total_prefix // n
    return mocker.prefill_ms(profile, new, n) if new > 0 else 0.0


def simulate(
    arrivals: Sequence[float],
    prompts: Sequence[int],
    cached: Sequence[int],
    profile: dict[str, Any],
    *,
    workers: int = 1,
    token_budget: Optional[int] = None,
    max_num_seqs: Optional[int] = None,
    speedup: float = 1.0,
    floor_ms: float = 0.0,
) -> list[float]:
    """Each request's time on a prefill worker (seconds, arrival to its last step's end), requests arriving at
    `arrivals` (seconds, sorted) with `prompts` tokens of which `cached` are already in the worker's KV cache;
    `token_budget` (--max-num-batched-tokens) and `max_num_seqs` (--max-num-seqs) None: unbounded."""
    if not (len(arrivals) == len(prompts) == len(cached)):
        raise ValueError("arrivals, prompts and cached: one entry per request each")
    if workers < 1 or speedup <= 0 or (token_budget is not None and token_budget < 1):
        raise ValueError(f"workers {workers}, speedup {speedup}, token budget {token_budget}: allowed >= 1, > 0, >= 1")
    if any(b < a for a, b in zip(arrivals, arrivals[1:])):
        raise ValueError("arrivals must be sorted")
    budget_cap = token_budget or float("inf")
    seqs_cap = max_num_seqs or float("inf")
    pool = [_Worker() for _ in range(workers)]
    # vLLM computes at least a prompt's last token itself, however much of it is cached
    jobs = [_Job(i, a, p, min(c, p - 1), min(c, p - 1)) for i, (a, p, c) in enumerate(zip(arrivals, prompts, cached))]
    out = [0.0] * len(jobs)
    ends: list[tuple[float, int]] = []  # (step end, worker)

    def start(w: int, now: float) -> None:
        wk = pool[w]
        budget = budget_cap
        chunks: list[tuple[_Job, int]] = []
        for j in wk.running:
            if budget <= 0:
                break
            c = int(min(j.prompt - j.done, budget))
            chunks.append((j, c))
            budget -= c
        while wk.waiting and len(wk.running) < seqs_cap and budget > 0:
            j = wk.waiting.popleft()
            wk.running.append(j)
            c = int(min(j.prompt - j.done, budget))
            chunks.append((j, c))
            budget -= c
        if not chunks:
            wk.busy_until = None
            return
        ms = step_ms(profile, [(j.done, c) for j, c in chunks]) / speedup
        wk.step, wk.busy_until = chunks, now + max(ms, floor_ms) / 1000
        heapq.heappush(ends, (wk.busy_until, w))

    i = 0
    while i < len(jobs) or ends:
        if i < len(jobs) and (not ends or jobs[i].arrival <= ends[0][0]):  # there at a step's end: in the next
            j = jobs[i]
            i += 1
            w = min(range(workers), key=lambda k: (pool[k].outstanding(), k))
            pool[w].waiting.append(j)
            if pool[w].busy_until is None:
                start(w, j.arrival)
            continue
        now, w = heapq.heappop(ends)
        wk = pool[w]
        for j, c in wk.step:
            j.done += c
            if j.done >= j.prompt:
                out[j.index] = now - j.arrival
        wk.running = [j for j in wk.running if j.done < j.prompt]
        wk.step = []
        start(w, now)
    return out
