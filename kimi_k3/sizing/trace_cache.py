"""A request trace in the `mooncake_trace` JSONL format (one JSON object a line: `timestamp` ms, `input_length`,
`output_length`, `hash_ids` of 512-token prefix blocks; kvcache-ai/Mooncake FAST25-release/traces, the format AIPerf
reads with `--custom-dataset-type mooncake_trace`): select a window or the first N requests as a copy of whole lines
(AIPerf replays that copy; nothing here rewrites a request), summarise it, and compute the best KV-cache hit rate any
cache could reach on it at a block size, from the prefix hashes alone. Pure functions; the shell reads the file."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

HASH_BLOCK = 512  # tokens per hash_ids entry in mooncake_trace (Mooncake FAST25-release/traces/README)
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace line that is not a mooncake_trace request, or a selection that is empty or too large."""


@dataclass(frozen=True)
class Request:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def parse_line(text: str, where: str) -> Request:
    """One trace line; `where` ("FILE line N") names it in the error."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceError(f"{where}: not JSON ({err.msg}); allowed: one mooncake_trace JSON object a line") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: a {type(obj).__name__}, not a JSON object; allowed: {{{', '.join(FIELDS)}}}")
    missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
    if missing:
        raise TraceError(f"{where}: no {', '.join(missing)}; a mooncake_trace request has {', '.join(FIELDS)}")
    ts, isl, osl, ids = obj["timestamp"], obj["input_length"], obj["output_length"], obj.get("hash_ids", [])
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise TraceError(f"{where}: timestamp {ts!r}; allowed: milliseconds >= 0")
    for key, value in (("input_length", isl), ("output_length", osl)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TraceError(f"{where}: {key} {value!r}; allowed: a whole number of tokens >= 1")
    if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in ids):
        raise TraceError(f"{where}: hash_ids {str(ids)[:60]}; allowed: a list of whole numbers")
    return Request(float(ts), isl, osl, tuple(ids))


def read_lines(path, flag: str, max_bytes: int) -> list[str]:
    """The lines of trace file `path` (given as `flag PATH`), refused past `max_bytes` before it is read."""
    from pathlib import Path

    path = Path(path)
    try:
        if not path.is_file():
            path.stat()  # no such file: the OSError below names it
            raise TraceError(f"{flag} {path}: not a file; allowed: a mooncake_trace JSONL file")
        size = path.stat().st_size
        if size > max_bytes:
            raise TraceError(
                f"{flag} {path}: {size:,} bytes; the limit is {max_bytes:,} bytes: cut the file to the window you want"
            )
        return path.read_text(encoding="utf-8").split("\n")  # JSON lines end at \n only (not at U+2028)
    except OSError as err:
        raise TraceError(f"{flag} {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise TraceError(
            f"{flag} {path}: not UTF-8 text ({err.reason} at byte {err.start}); allowed: a mooncake_trace JSONL file"
        ) from None


def select(
    lines: Iterable[str],
    source: str,
    *,
    first: Optional[int] = None,
    window: Optional[tuple[float, float]] = None,
    limit: int,
) -> tuple[list[str], list[Request]]:
    """The requests to replay, as (the original lines, unchanged, for AIPerf; their parsed form): those with
    window[0] <= timestamp/1000 <= window[1] seconds, then the first `first` of them. More than `limit` is refused
    (naming `source` and the limit) before anything runs."""
    kept_lines: list[str] = []
    kept: list[Request] = []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        r = parse_line(text, f"{source} line {n}")
        if window is not None and not window[0] <= r.timestamp_ms / 1000 <= window[1]:
            continue
        if first is not None and len(kept) >= first:
            break
        if len(kept) >= limit:
            raise TraceError(
                f"{source}: more than {limit:,} requests selected; the limit is {limit:,} requests a "
                "rehearsal: select fewer with --trace-first N or --trace-window START:END"
            )
        kept_lines.append(text if text.endswith("\n") else text + "\n")
        kept.append(r)
    if not kept:
        what = f" in --trace-window {window[0]:g}:{window[1]:g}" if window else ""
        raise TraceError(f"{source}: no requests{what}; allowed: a mooncake_trace JSONL file with at least one")
    return kept_lines, kept


def span_seconds(requests: Sequence[Request]) -> float:
    """Time from the first arrival to the last, in the trace's own seconds."""
    ts = [r.timestamp_ms for r in requests]
    return (max(ts) - min(ts)) / 1000 if ts else 0.0


def _pct(values: Sequence[int]) -> dict[str, float]:
    s = sorted(values)
    # nearest-rank percentiles: a value some request really had
    return {f"p{p}": float(s[max(0, math.ceil(p / 100 * len(s)) - 1)]) for p in (50, 90, 99)} | {
        "mean": round(sum(s) / len(s), 1),
        "max": float(s[-1]),
    }


def cacheable_tokens(requests: Sequence[Request], block_size: int) -> list[int]:
    """Per request, the prompt tokens an infinite, perfectly shared prefix cache with `block_size`-token blocks
    could serve: the longest run of whole leading blocks each of which some earlier request (in trace order) held
    whole with the same prefix. Two requests share their first L tokens when their hash_ids agree up to
    ceil(L / 512) (a hash covers a 512-token block and everything before it); a block is only cached whole."""
    if block_size < 1:
        raise ValueError(f"block size {block_size}: allowed: 1 or more tokens")
    trie: dict[tuple[int, int], int] = {}  # (node of hash_ids[:i], hash_ids[i]) -> node of hash_ids[:i+1]
    seen: set[tuple[int, int]] = set()  # (node of the hash prefix covering a block, that block's end)
    out = []
    for r in requests:
        nodes = [0]  # nodes[i]: the prefix hash_ids[:i]
        for h in r.hash_ids:
            nodes.append(trie.setdefault((nodes[-1], h), len(trie) + 1))
        keys = []
        for j in range(r.input_length // block_size):
            end = (j + 1) * block_size
            need = -(-end // HASH_BLOCK)
            if need >= len(nodes):  # the hashes do not cover the block: it cannot be matched
                break
            keys.append((nodes[need], end))
        hit = 0
        for key in keys:
            if key not in seen:
                break
            hit += block_size
        out.append(hit)
        seen.update(keys)
    return out


def best_hit_rate(requests: Sequence[Request], block_size: int) -> float:
    """Token-weighted: cacheable prompt tokens / all prompt tokens (the frontend's cached/input tokens)."""
    total = sum(r.input_length for r in requests)
    return sum(cacheable_tokens(requests, block_size)) / total if total else 0.0


def summary(requests: Sequence[Request], block_size: int) -> dict:
    """The report's `trace` section (what was replayed), before any measurement."""
    span = span_seconds(requests)
    return {
        "requests": len(requests),
        "duration_s": round(span, 3),
        "arrival_rate_per_s": None if span <= 0 else round((len(requests) - 1) / span, 3),
        "isl": _pct([r.input_length for r in requests]),
        "osl": _pct([r.output_length for r in requests]),
        "block_size": block_size,
        "best_hit_rate": round(best_hit_rate(requests, block_size), 4),
    }
