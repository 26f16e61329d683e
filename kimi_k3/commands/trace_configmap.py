"""`kimi-k3 trace-configmap FILE`: the ConfigMap the in-cluster benchmark Job replays a trace from
(`kimi-k3:serving.benchmark.trace`, docs/traces.md), selected as `kimi-k3 rehearse --trace` selects, refused before
anything is written when it cannot fit in a ConfigMap. The manifest goes to stdout (or --out), for
`kubectl create -f -`; the trace never enters the repository or the Pulumi state."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kimi_k3.commands.argtypes import seconds_window, whole
from kimi_k3.config.base import DNS_LABEL
from kimi_k3.config.trace import CONFIGMAP_MAX_BYTES, JOB_TRACE_MAX_REQUESTS
from kimi_k3.errors import UserError

TRACE_MAX_BYTES = 64 << 20  # read whole; as `rehearse --trace`


def _dns_label(text: str) -> str:
    import re

    if not re.match(DNS_LABEL, text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: allowed: a ConfigMap name of lower-case letters, digits and '-', at most 63"
        )
    return text


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("trace-configmap", help="the benchmark Job's trace as a ConfigMap", description=__doc__)
    p.add_argument("file", metavar="FILE", help="a mooncake_trace JSONL file")
    p.add_argument("--name", type=_dns_label, default="kimi-k3-trace", help="ConfigMap name (kimi-k3-trace)")
    p.add_argument("--namespace", type=_dns_label, default="kimi-k3", help="the graph's namespace (kimi-k3)")
    p.add_argument("--key", default="trace.jsonl", help="data key (trace.jsonl)")
    p.add_argument("--first", type=whole(1, JOB_TRACE_MAX_REQUESTS), metavar="N", help="only the first N requests")
    p.add_argument("--window", type=seconds_window, metavar="START:END", help="only timestamps in [START, END] s")
    p.add_argument("--out", metavar="FILE", help="write the manifest here instead of stdout")
    p.set_defaults(func=run)
    return p


def manifest(name: str, namespace: str, key: str, text: str) -> str:
    import yaml

    class Literal(str):
        pass

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(Literal, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|"))
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "kimi-k3"}},
        "data": {key: Literal(text)},
    }
    return yaml.dump(obj, Dumper=Dumper, sort_keys=False, width=1 << 30, allow_unicode=True)


def run(args: argparse.Namespace) -> int:
    from kimi_k3.atomic import write_text
    from kimi_k3.sizing import trace_cache

    if not all(c.isalnum() or c in "-._" for c in args.key) or not args.key:
        raise UserError(f"--key {args.key!r}: allowed: a ConfigMap key of letters, digits, '-', '_' and '.'")
    try:
        lines = trace_cache.read_lines(args.file, "trace-configmap", TRACE_MAX_BYTES)
        kept, requests = trace_cache.select(
            lines, f"trace-configmap {args.file}", first=args.first, window=args.window, limit=JOB_TRACE_MAX_REQUESTS
        )
    except trace_cache.TraceError as err:
        raise UserError(str(err)) from None
    text = "".join(kept)
    size = len(text.encode())
    if size > CONFIGMAP_MAX_BYTES:
        per = size / len(kept)
        raise UserError(
            f"trace-configmap {args.file}: the {len(kept):,} selected requests are {size:,} bytes; a ConfigMap holds "
            f"at most {CONFIGMAP_MAX_BYTES:,} bytes of data (the API server's limit): select at most "
            f"~{int(CONFIGMAP_MAX_BYTES / per):,} with --first N, or a shorter --window START:END"
        )
    out = manifest(args.name, args.namespace, args.key, text)
    if args.out:
        write_text(args.out, out)
    else:
        sys.stdout.write(out)
    print(
        f"trace-configmap: {len(kept):,} requests over {trace_cache.span_seconds(requests):,.0f} s, {size:,} bytes "
        f"of {CONFIGMAP_MAX_BYTES:,}; create it with `kubectl create -f {args.out or '-'}` (a plain "
        "`kubectl apply` keeps a copy in an annotation limited to 256 KiB: use `kubectl apply --server-side`), then "
        f"set kimi-k3:serving.benchmark.trace: {{configMap: {args.name}, key: {args.key}, sizeBytes: {size}}}",
        file=sys.stderr,
    )
    return 0
