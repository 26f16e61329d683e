"""`kimi-k3 plan`'s performance options: the argparse group, its value types, and what the parsed options mean
(workload, API price, SLA, speculation). Errors name the flag, the value and what is allowed."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from typing import Optional

from kimi_k3.commands import plan_perf
from kimi_k3.commands.argtypes import context_tokens, finite, positive, positive_int
from kimi_k3.graph.model import ServingGraph
from kimi_k3.sizing import perf


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("performance (aiconfigurator, calibrated to public measurements)")
    g.add_argument(
        "--isl",
        type=context_tokens,
        default=perf.DEFAULT_ISL,
        help=f"input tokens per request (default {perf.DEFAULT_ISL}: agentic turns carry long context)",
    )
    g.add_argument(
        "--osl",
        type=context_tokens,
        default=perf.DEFAULT_OSL,
        help=f"output tokens per request (default {perf.DEFAULT_OSL})",
    )
    g.add_argument(
        "--concurrency",
        type=positive_int,
        help="requests in flight per stack (default: "
        f"{perf.DEFAULT_CONCURRENCY_PER_DECODE_WORKER} per decoding worker)",
    )
    g.add_argument("--request-rate", type=positive, help="requests/s to sustain (--sla: replicate layouts to carry it)")
    g.add_argument(
        "--sla",
        metavar="ttft_ms=N,tpot_ms=N",
        help="rank the layouts on GB200 and GB300 that meet it, "
        "cheapest first, and print the stack config that deploys the best",
    )
    g.add_argument("--top", type=positive_int, default=10, help="--sla: how many layouts to list (default 10)")
    g.add_argument(
        "--cache-hit-rate",
        type=hit_rate,
        default=0.0,
        metavar="FRACTION",
        help="share of each request's input found in the prefix cache, [0, 1): skips that prefill "
        "compute and is billed at the API's cache-hit price (default 0)",
    )
    g.add_argument(
        "--speculation",
        choices=("none", "dspark"),
        help="--sla / --gpu: model the decode workers "
        "with this speculative decoding (a STACK's own --speculative-config decides for it; default none)",
    )
    g.add_argument(
        "--acceptance-length",
        type=acceptance,
        metavar="TOKENS",
        help="mean tokens a speculative "
        "step yields (default: the published figure, recipes/facts/perf-measurements.yaml `speculation`)",
    )
    g.add_argument(
        "--api-model", help="the API price to compare with (recipes/facts/api-prices.yaml; default its `default`)"
    )
    g.add_argument(
        "--api-price",
        metavar="KEY=USD,...",
        help=f"override the API's price per million tokens: {', '.join(perf.API_PRICE_KEYS)}",
    )
    g.add_argument(
        "--pareto",
        metavar="FILE.png",
        help="draw tokens/s per GPU against tokens/s per user for the "
        "stack across context lengths, over every layout on its platform",
    )
    g.add_argument(
        "--cost-plot",
        metavar="FILE.png",
        help="draw the stack's $ per million output tokens against "
        "load at each context length, with the API's price for the same requests (where they cross is "
        "the break-even load), on both cost bases",
    )
    g.add_argument(
        "--mocker-profile",
        metavar="FILE.npz",
        help="write the stack's calibrated timing as Dynamo "
        "mocker profile data (dynamo.mocker --planner-profile-data FILE.npz)",
    )


def hit_rate(text: str) -> float:
    """argparse type: a share of the input, 0 <= x < 1 (a full hit would leave nothing to prefill)."""
    value = finite(text, "--cache-hit-rate", allowed=None)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} is outside [0, 1); allowed: e.g. 0.9 for 90% of the input cached")
    return value


def acceptance(text: str) -> float:
    """argparse type: tokens per speculative step, >= 1 (1 = every draft rejected)."""
    value = finite(text, "--acceptance-length", allowed=None)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} is below 1; allowed: a number >= 1 (tokens per target step, the bonus token included)"
        )
    return value


def api_price(args: argparse.Namespace) -> perf.ApiPrice:
    """The API price the comparison uses: recipes/facts/api-prices.yaml's model, with --api-price overrides."""
    default, prices = perf.api_prices()
    name = args.api_model or default
    if name not in prices:
        raise ValueError(f"--api-model {name!r}: unknown; allowed: {', '.join(prices)} (recipes/facts/api-prices.yaml)")
    price = prices[name]
    if not args.api_price:
        return price
    values = {}
    for part in args.api_price.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in perf.API_PRICE_KEYS:
            raise ValueError(
                f"--api-price {args.api_price!r}: {part!r} is not KEY=USD with KEY one of "
                f"{', '.join(perf.API_PRICE_KEYS)}"
            )
        try:
            values[key] = float(value)
        except ValueError:
            raise ValueError(f"--api-price {args.api_price!r}: {key} = {value!r} is not a number") from None
        if not math.isfinite(values[key]) or values[key] < 0:
            raise ValueError(f"--api-price {args.api_price!r}: {key} = {value!r}; allowed: a finite number >= 0")
    return replace(price, **values, source=f"{price.source} with --api-price {args.api_price}")


def parse_sla(text: str) -> tuple[float, float]:
    allowed = ("ttft_ms", "tpot_ms")
    values: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise ValueError(f"--sla {text!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(allowed)}")
        if key in values:
            raise ValueError(f"--sla {text!r}: {key} is given twice; allowed: each of {', '.join(allowed)} once")
        try:
            values[key] = float(value)
        except ValueError:
            raise ValueError(f"--sla {text!r}: {key} = {value!r} is not a number") from None
        if not values[key] > 0 or values[key] == float("inf"):  # nan and inf pass a `<= 0` check
            raise ValueError(f"--sla {text!r}: {key} = {value.strip()!r} must be > 0; allowed: a finite number > 0")
    missing = [k for k in allowed if k not in values]
    if missing:
        raise ValueError(f"--sla {text!r}: missing {', '.join(missing)} (give ttft_ms=...,tpot_ms=...)")
    return values["ttft_ms"], values["tpot_ms"]


def workload(args: argparse.Namespace) -> perf.Workload:
    for name in ("isl", "osl"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} {getattr(args, name)}: must be >= 1")
    if args.concurrency is not None and args.concurrency < 1:
        raise ValueError(f"--concurrency {args.concurrency}: must be >= 1")
    if args.request_rate is not None and args.request_rate <= 0:
        raise ValueError(f"--request-rate {args.request_rate}: must be > 0")
    if args.request_rate is not None and not math.isfinite(args.request_rate):
        raise ValueError(f"--request-rate {args.request_rate}: must be a finite number")
    return perf.Workload(
        args.isl, args.osl, args.concurrency, args.request_rate, getattr(args, "cache_hit_rate", 0.0) or 0.0
    )


def speculation(
    args: argparse.Namespace, graph: Optional[ServingGraph] = None, spec_tokens: int = 0
) -> perf.Speculation:
    """What the decode workers run: a stack's own --speculative-config, or --speculation (with --spec-tokens
    draft tokens, default 7 as in the vLLM launch post's DSpark recipe) for --sla and ad hoc layouts."""
    tau = getattr(args, "acceptance_length", None)
    if graph is not None:
        if getattr(args, "speculation", None):
            raise ValueError(
                f"--speculation: stack {graph.stack}'s speculative decoding is its workers' "
                "--speculative-config (none in ours: their image cannot run DSpark); drop the flag"
            )
        return plan_perf.speculation_of(graph, tau)
    method = getattr(args, "speculation", None) or "none"
    if method == "none":
        if tau is not None:
            raise ValueError("--acceptance-length needs a layout that speculates (--speculation dspark)")
        return perf.PLAIN
    try:
        return perf.speculation_from_config({"method": method, "num_speculative_tokens": spec_tokens or 7}, tau)
    except perf.PerfError as e:
        raise ValueError(f"--acceptance-length: {e}") from None
