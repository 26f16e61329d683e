"""`kimi-k3 plan STACK --trace FILE` (issue 21): the prefill:decode split a trace needs moves the way its traffic
does: longer outputs need a larger decode share, longer (uncached) inputs a larger prefill share."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kimi_k3.commands.main import main
from kimi_k3.sizing import trace_cache, trace_plan
from kimi_k3.sizing.trace_cache import Request

LAYOUTS = {
    "gb300 TP8": dict(gpu="gb300", prefill_tp=8, decode_tp=8, block_size=1536),
    "gb200 TP16": dict(gpu="gb200", prefill_tp=16, decode_tp=16, block_size=768),
}


def trace(n=40, own_blocks=12, osl=300) -> list[Request]:
    """Requests 1 s apart, each a shared 4-block system prompt plus `own_blocks` 512-token blocks of its own."""
    out = []
    for i in range(n):
        ids = (1, 2, 3, 4) + tuple(10_000 * (i + 1) + k for k in range(own_blocks))
        out.append(Request(1000.0 * i, 512 * len(ids), osl, ids))
    return out


def decode_share(r):
    return 1 - r["prefill_gpu_share"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_longer_outputs_need_more_decode(layout):
    base = trace_plan.pd_ratio(trace(osl=200), **LAYOUTS[layout])
    longer = trace_plan.pd_ratio(trace(osl=800), **LAYOUTS[layout])
    assert decode_share(longer) > decode_share(base) + 0.05, (base, longer)
    assert longer["decode_per_prefill"] > base["decode_per_prefill"]
    assert longer["workers"]["decode"] >= base["workers"]["decode"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_longer_inputs_need_more_prefill(layout):
    base = trace_plan.pd_ratio(trace(own_blocks=8), **LAYOUTS[layout])
    longer = trace_plan.pd_ratio(trace(own_blocks=32), **LAYOUTS[layout])
    assert longer["mean_uncached_input"] > base["mean_uncached_input"]
    assert longer["prefill_gpu_share"] > base["prefill_gpu_share"] + 0.05, (base, longer)


def test_cached_input_is_not_prefilled():
    # The same lengths, but every request after the first repeats the first one's prompt: only the first is new.
    shared = [dataclasses.replace(r, hash_ids=trace()[0].hash_ids) for r in trace()]
    assert (
        trace_plan.trace_load(shared, 1536)["mean_uncached_input"]
        < trace_plan.trace_load(trace(), 1536)["mean_uncached_input"] / 5
    )
    assert (
        trace_plan.pd_ratio(shared, **LAYOUTS["gb300 TP8"])["prefill_gpu_share"]
        < trace_plan.pd_ratio(trace(), **LAYOUTS["gb300 TP8"])["prefill_gpu_share"]
    )


def test_mooncake_outputs_scaled_up_shift_to_decode(shared_reference):
    path = shared_reference / "traces" / "mooncake-fast25-conversation_trace.jsonl"
    _, reqs = trace_cache.select(path.read_text().splitlines(), str(path), limit=20_000)
    base = trace_plan.pd_ratio(reqs, **LAYOUTS["gb300 TP8"])
    assert base["requests"] == 12_031 and 3.3 < base["arrival_rate_per_s"] < 3.5  # 12,031 requests in ~3,537 s
    longer = trace_plan.pd_ratio(
        [dataclasses.replace(r, output_length=3 * r.output_length) for r in reqs], **LAYOUTS["gb300 TP8"]
    )
    assert decode_share(longer) > decode_share(base)


def cli(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def write(path, reqs):
    path.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": r.timestamp_ms,
                    "input_length": r.input_length,
                    "output_length": r.output_length,
                    "hash_ids": list(r.hash_ids),
                }
            )
            + "\n"
            for r in reqs
        )
    )
    return path


def test_plan_trace_command(tmp_path, capsys):
    f = write(tmp_path / "t.jsonl", trace())
    code, out, err = cli(["plan", "gb300-disagg", "--trace", str(f)], capsys)
    assert code == 0, err
    assert "40 requests over 39.0 s" in out and "P:D 1:" in out and "deploy " in out
    code, out, err = cli(["plan", "gb300-disagg", "--trace", str(f), "--json"], capsys)
    r = json.loads(out)
    assert r["block_size"] == 1536 and r["workers"]["prefill"] >= 1 and r["workers"]["decode"] >= 1
    code, out, _ = cli(["plan", "gb300", "--trace", str(f)], capsys)
    assert code == 0 and "gb300 is aggregated" in out


def test_plan_trace_refusals(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0}\n')
    code, out, err = cli(["plan", "gb300-disagg", "--trace", str(bad)], capsys)
    assert code == 2 and f"--trace {bad} line 1: no input_length, output_length" in err and "Traceback" not in err
    one = write(tmp_path / "one.jsonl", trace(n=1))
    code, _, err = cli(["plan", "gb300-disagg", "--trace", str(one)], capsys)
    assert code == 2 and "needs an arrival rate" in err
    code, _, err = cli(["plan", "--trace", str(one)], capsys)
    assert code == 2 and "give the STACK" in err
