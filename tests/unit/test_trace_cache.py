"""The best KV-cache hit rate of a mooncake_trace at a block size (kimi_k3/sizing/trace_cache.py), worked by hand on small
traces, its ordering over block sizes on the Mooncake FAST'25 traces, and the line selection the rehearsal replays."""

from __future__ import annotations

import json
import random

import pytest

from kimi_k3.sizing import trace_cache as tc
from kimi_k3.sizing.trace_cache import Request, TraceError


def req(isl, ids, ts=0, osl=10):
    return Request(float(ts), isl, osl, tuple(ids))


# r1 computes hash blocks [1], [1,2]; r2 extends it; r3 shares only the first 512 tokens; r4 reuses hash id 2 under
# another first block (a different prefix: nothing to reuse).
HAND = [req(1024, [1, 2]), req(1536, [1, 2, 3]), req(700, [1, 9]), req(1024, [5, 2])]
TOTAL = 1024 + 1536 + 700 + 1024


def test_hand_trace_at_512():
    # r1: 0 (nothing before). r2: blocks ending 512 ([1]) and 1024 ([1,2]) seen in r1, 1536 ([1,2,3]) not: 1024.
    # r3: 700 // 512 = 1 whole block, [1] seen: 512. r4: [5] never seen: 0.
    assert tc.cacheable_tokens(HAND, 512) == [0, 1024, 512, 0]
    assert tc.best_hit_rate(HAND, 512) == pytest.approx(1536 / TOTAL)


def test_hand_trace_at_768():
    # 768-token blocks span 1.5 hash blocks: block 0 needs hash_ids[:2], block 1 (ends 1536) needs hash_ids[:3].
    # r1: one whole block, none before. r2: block 0 ([1,2]) seen in r1 -> 768; block 1 ([1,2,3]) not.
    # r3: 700 < 768, no whole block. r4: [5,2] never seen.
    assert tc.cacheable_tokens(HAND, 768) == [0, 768, 0, 0]


def test_hand_trace_at_1536_tp8_block():
    # 1536 = 3 hash blocks: r2 is the first to hold one whole; nothing before it did.
    assert tc.cacheable_tokens(HAND, 1536) == [0, 0, 0, 0]
    # A repeat of r2 is served whole.
    assert tc.cacheable_tokens([*HAND, req(1536, [1, 2, 3])], 1536)[-1] == 1536


def test_a_block_needs_every_block_before_it():
    # [7,8] seen, then [6,8]: same second id, other first block -> not a hit, and a hit cannot start mid-prompt.
    trace = [req(1024, [7, 8]), req(1024, [6, 8]), req(1536, [7, 4, 8])]
    assert tc.cacheable_tokens(trace, 512) == [0, 0, 512]


def test_a_partial_block_is_never_cached():
    # r1 holds only 600 tokens of hash block 2: at 1024 it has no whole block to offer r2.
    trace = [req(600, [1, 2]), req(1024, [1, 2])]
    assert tc.cacheable_tokens(trace, 1024) == [0, 0]
    assert tc.cacheable_tokens(trace, 512) == [0, 512]


def random_trace(seed: int, n: int = 60) -> list[Request]:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(10**6) for _ in range(rng.randint(1, 8))] for _ in range(5)]
    out = []
    for i in range(n):
        ids = list(rng.choice(prefixes)) + [rng.randrange(10**6) for _ in range(rng.randint(0, 4))]
        out.append(req(len(ids) * 512 - rng.randrange(512), ids, ts=i * 100))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_best_rate_never_rises_with_the_block_size(seed):
    trace = random_trace(seed)
    for chain in ((256, 512, 1536, 3072), (384, 768, 1536, 4608)):  # each size divides the next
        rates = [tc.best_hit_rate(trace, b) for b in chain]
        assert rates == sorted(rates, reverse=True), (chain, rates)
    assert tc.best_hit_rate(trace, 512) > 0  # the shared prefixes are found at all


def test_mooncake_conversation_trace(shared_reference):
    path = shared_reference / "traces" / "mooncake-fast25-conversation_trace.jsonl"
    lines, reqs = tc.select(path.read_text().splitlines(), str(path), first=3000, limit=3000)
    assert len(reqs) == 3000 and lines[0].startswith("{")
    rates = {b: tc.best_hit_rate(reqs, b) for b in (512, 768, 1536, 3072)}
    assert rates[512] >= rates[768] >= rates[1536] >= rates[3072]
    # the paper's traffic shares long prefixes (Mooncake FAST'25 reports a large reusable share); not nearly zero
    assert 0.2 < rates[1536] < 1.0, rates


# ---- selection: whole lines, a window in seconds, the first N, a limit ------------------------------------------


def lines(*objs):
    return [json.dumps(o) for o in objs]


TRACE = lines(
    *({"timestamp": t, "input_length": 100, "output_length": 5, "hash_ids": [t]} for t in (0, 1000, 2500, 4000, 9000))
)


def test_select_window_and_first():
    kept, reqs = tc.select(TRACE, "t.jsonl", window=(1, 4), limit=100)
    assert [r.timestamp_ms for r in reqs] == [1000, 2500, 4000]
    assert kept == [line + "\n" for line in TRACE[1:4]]  # the lines themselves, unchanged
    _, reqs = tc.select(TRACE, "t.jsonl", window=(1, 100), first=2, limit=100)
    assert [r.timestamp_ms for r in reqs] == [1000, 2500]


def test_select_refuses_more_than_the_limit_naming_file_and_limit():
    with pytest.raises(TraceError, match=r"t\.jsonl: more than 3 requests.*limit is 3"):
        tc.select(TRACE, "t.jsonl", limit=3)
    assert len(tc.select(TRACE, "t.jsonl", first=3, limit=3)[1]) == 3


@pytest.mark.parametrize(
    "bad, says",
    [
        ("not json", "line 2: not JSON"),
        ("[1, 2]", "line 2: a list, not a JSON object"),
        ('{"timestamp": 1, "input_length": 3}', "line 2: no output_length"),
        ('{"timestamp": -1, "input_length": 3, "output_length": 1}', "line 2: timestamp -1"),
        ('{"timestamp": 1, "input_length": 0, "output_length": 1}', "line 2: input_length 0"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}', "line 2: hash_ids"),
    ],
)
def test_bad_lines_name_file_line_and_value(bad, says):
    with pytest.raises(TraceError, match="t.jsonl " + says):
        tc.select([TRACE[0], bad], "t.jsonl", limit=10)


def test_empty_window_is_refused():
    with pytest.raises(TraceError, match="no requests in --trace-window 20:30"):
        tc.select(TRACE, "t.jsonl", window=(20, 30), limit=10)


def test_summary_percentiles_by_hand():
    reqs = [req(i * 100, [i], ts=i * 1000, osl=i) for i in range(1, 11)]
    s = tc.summary(reqs, 512)
    assert s["requests"] == 10 and s["duration_s"] == 9.0 and s["arrival_rate_per_s"] == 1.0
    # nearest rank: p50 = 5th of 10, p90 = 9th, p99 = 10th
    assert (s["isl"]["p50"], s["isl"]["p90"], s["isl"]["p99"]) == (500, 900, 1000)
    assert s["osl"]["mean"] == 5.5
