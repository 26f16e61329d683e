"""The prefill workers stepped as dynamo.mocker 1.6.1 steps them (kimi_k3/sizing/prefill_sim.py), on a table of
1 ms per new token (so every expected time below is worked out by hand from the scheduling rules)."""

from __future__ import annotations

import pytest

from kimi_k3.sizing.prefill_sim import frontend, simulate, step_ms

MS_PER_TOKEN = {"prefill_isl": [0.0, 1000.0], "prefill_ttft_ms": [0.0, 1000.0]}  # read linearly, extrapolated


def run(arrivals, prompts, cached=None, **kw):
    kw.setdefault("token_budget", 1000)
    kw.setdefault("max_num_seqs", 4)
    return simulate(arrivals, prompts, cached or [0] * len(prompts), MS_PER_TOKEN, **kw)


def test_one_request_takes_its_prompt_in_budget_sized_steps():
    # 3000 tokens, 1000 a step: three 1 s steps
    assert run([0.0], [3000]) == pytest.approx([3.0])
    # cached tokens are not computed: 2000 of 3000 cached leaves one 1 s step
    assert run([0.0], [3000], [2000]) == pytest.approx([1.0])
    # a whole prompt cached still computes its last token (vLLM): 1 ms
    assert run([0.0], [3000], [3000]) == pytest.approx([0.001])


def test_an_idle_worker_starts_a_step_at_the_first_arrival():
    # A's arrival starts a step with A alone (0.6 s, as the live mocker ran the replay's first request alone);
    # B, there a moment later, waits for it and runs 0.6-1.2
    assert run([0.0, 0.0], [600, 600]) == pytest.approx([0.6, 1.2])


def test_waiting_requests_share_a_steps_budget():
    # A (1000) runs 0-1 s; B and C (600 each) arrive at 0.5: step 1-2 s takes B's 600 + C's 400 (1000 tokens),
    # B done at 2.0 (1.5 s in the worker); C's last 200 run 2.0-2.2 (1.7 s)
    assert run([0.0, 0.5, 0.5], [1000, 600, 600]) == pytest.approx([1.0, 1.5, 1.7])
    # one sequence at a time: B alone 1.0-1.6, C 1.6-2.2
    assert run([0.0, 0.5, 0.5], [1000, 600, 600], max_num_seqs=1) == pytest.approx([1.0, 1.1, 1.7])


def test_a_burst_is_admitted_first_come_first_served_up_to_the_budget():
    # five of 500 at once: the first alone (0-0.5), then (2, 3) 0.5-1.5, then (4, 5) 1.5-2.5
    assert run([0.0] * 5, [500] * 5) == pytest.approx([0.5, 1.5, 1.5, 2.5, 2.5])
    # a running request keeps its place: 2500 tokens take steps 0-1 and 1-2 whole, then its last 500 + B's 500
    assert run([0.0, 0.0], [2500, 500]) == pytest.approx([3.0, 3.0])


def test_a_request_arriving_mid_step_waits_for_the_next():
    # A's 1000 tokens run 0-1 s; B (100) arrives at 0.5 and runs 1.0-1.1: 0.6 s in the worker
    assert run([0.0, 0.5], [1000, 100]) == pytest.approx([1.0, 0.6])


def test_speedup_divides_each_step_and_the_timer_floor_bounds_it():
    assert run([0.0], [1000], speedup=20) == pytest.approx([0.05])
    # 10 tokens / 20 = 0.5 ms, floored at 1 ms
    assert run([0.0], [10], speedup=20, floor_ms=1.0) == pytest.approx([0.001])


def test_two_workers_split_a_burst_by_outstanding_tokens():
    # 1000 to worker 0 (a tie: the first), 500 to idle worker 1 (0-0.5), 200 to worker 1 (500 outstanding < 1000):
    # it waits for the 500 and runs 0.5-0.7
    assert run([0.0] * 3, [1000, 500, 200], workers=2) == pytest.approx([1.0, 0.5, 0.7])


def test_a_step_is_read_at_the_batchs_whole_token_means():
    # (before, chunk): ISL 0+3 and 0+4 -> mean 3 (7 // 2), prefix 0: 2 x 3 = 6 tokens, not 7
    assert step_ms(MS_PER_TOKEN, [(0, 3), (0, 4)]) == pytest.approx(6.0)
    assert step_ms(MS_PER_TOKEN, []) == 0.0


def test_frontend_lanes_queue_requests_by_their_prompt():
    # 2 lanes, 1 ms + 1 us/token: 10k tokens take 11 ms, 1k take 2 ms
    at = frontend([0.0, 0.0, 0.0], [10_000, 1000, 1000], lanes=2, fixed_ms=1.0, us_per_token=1.0)
    assert at == pytest.approx([0.011, 0.002, 0.004])  # the short ones overtake the long one


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="sorted"):
        run([1.0, 0.0], [10, 10])
    with pytest.raises(ValueError, match="one entry per request"):
        simulate([0.0], [10, 10], [0], MS_PER_TOKEN)
    with pytest.raises(ValueError, match="workers 0"):
        run([0.0], [10], workers=0)
