"""Rules on what watches the graph: the smoke test's cache-hit probe against the KV block the workers run, and
alerts and dashboards against the metrics Dynamo really exports, in their real units (recipes/facts/metrics.yaml)."""

import contextlib
import io
import json
import re
from typing import Any, Iterator, Mapping, Optional, Sequence

from kimi_k3 import flags
from kimi_k3.pods import smoke
from policies.rules.base import (
    Context,
    Finding,
    Result,
    Skipped,
    all_containers,
    name_of,
    pod_specs,
    target_of,
    workers,
)

SMOKE_SCRIPT = "smoke.py"
# The probe must span this many blocks of the largest worker block: one to be cached, one of margin for the chat
# template's and the suffix's tokens (kimi_k3/pods/smoke.py makes PROBE_BLOCKS of them).
PROBE_MARGIN_BLOCKS = 2


def _smoke_args(container: Mapping) -> Optional[list[str]]:
    """The argv after kimi_k3/pods/smoke.py in a container's command + args, or None when it does not run it."""
    argv = flags.raw_argv(container)
    for i, token in enumerate(argv):
        if token.rsplit("/", 1)[-1] == SMOKE_SCRIPT:
            return argv[i + 1 :]
    return None


def _parse_smoke(argv: list[str]) -> tuple[Optional[Any], str]:
    """The script's own parser over the rendered args (what the pod does with them), or the error it would print;
    the parser lives with the pod program (a policy never builds one: pyproject.toml's argparse contract)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return smoke.parser().parse_args(argv), ""
    except SystemExit:
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argument error"


def _worker_blocks(objects: Sequence[Mapping], namespace: Optional[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """([(component, --block-size)], [components without one]) of the dynamo.vllm workers in `namespace`."""
    known, unknown = [], []
    for obj in objects:
        ns = (obj.get("metadata") or {}).get("namespace")
        if namespace and ns and ns != namespace:
            continue
        for comp, _, tokens in workers(obj):
            value = flags.flag_value(tokens, "--block-size")
            if value is None or not str(value).isdigit():
                unknown.append(name_of(comp))
            else:
                known.append((name_of(comp), int(value)))
    return known, unknown


def check_smoke_probe_spans_kv_block(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    """vLLM reuses whole KV blocks only: a repeated prompt shorter than one block reports cached_tokens 0 on a
    healthy graph, and a smoke Job asserting a cache hit then fails `pulumi up`. The rendered Job must size its
    probe from the block the workers run, with margin, and ask for no more than that probe can be cached."""
    for obj in objects:
        if obj.get("kind") not in ("Job", "CronJob", "Pod"):
            continue
        namespace = (obj.get("metadata") or {}).get("namespace")
        for _, spec in pod_specs(obj):
            for container in all_containers(spec):
                argv = _smoke_args(container)
                if argv is None:
                    continue
                where = f"container {name_of(container)} ({SMOKE_SCRIPT})"
                blocks, unknown = _worker_blocks(objects, namespace)
                if unknown or not blocks:
                    yield Skipped(
                        target_of(obj),
                        f"{where}: the workers' KV block is not known (no dynamo.vllm "
                        f"worker with --block-size beside it: {unknown or 'no workers'})",
                    )
                    continue
                largest = max(b for _, b in blocks)
                args, error = _parse_smoke(argv)
                if args is None:
                    yield Finding(target_of(obj), f"{where}: its args do not parse ({error})")
                    continue
                if args.kv_block_size is None:
                    yield Finding(
                        target_of(obj),
                        f"{where}: no --kv-block-size: the cache-hit probe is not sized "
                        f"to the workers' {largest}-token KV block (vLLM caches whole blocks only; a "
                        f"fixed prompt shorter than one block reports cached_tokens 0); allowed: "
                        f"--kv-block-size {largest}",
                    )
                    continue
                probe = args.cache_probe_tokens or smoke.probe_tokens(args.kv_block_size)
                if probe < PROBE_MARGIN_BLOCKS * largest:
                    yield Finding(
                        target_of(obj),
                        f"{where}: cache-hit probe of {probe} tokens (words) is shorter "
                        f"than {PROBE_MARGIN_BLOCKS} blocks of the largest worker block ({largest}, "
                        f"{dict(blocks)}); allowed: --cache-probe-tokens >= {PROBE_MARGIN_BLOCKS * largest}",
                    )
                for comp, block in blocks:
                    cacheable = probe // block * block
                    if cacheable < args.kv_block_size:
                        yield Finding(
                            target_of(obj),
                            f"{where}: asks for >= {args.kv_block_size} cached tokens, "
                            f"but a {probe}-token probe leaves only {cacheable} in whole {block}-token "
                            f"blocks of component {comp}; allowed: --kv-block-size <= {cacheable}",
                        )
                if args.kv_block_size < largest:
                    yield Finding(
                        target_of(obj),
                        f"{where}: --kv-block-size {args.kv_block_size} is below the "
                        f"largest worker block ({largest}): a hit of less than one block proves no "
                        f"block was reused; allowed: --kv-block-size {largest}",
                    )
                longest = probe * smoke.PROBE_MAX_TOKENS_PER_WORD + 64
                if longest > args.max_model_len:
                    yield Finding(
                        target_of(obj),
                        f"{where}: the probe may take up to {longest} tokens, over the "
                        f"--max-model-len {args.max_model_len} context",
                    )


# ------------------------------------------------------------------------------------------ alerts and panels
# PromQL words that are not metric names (keywords, and the label lists after them are stripped first).
_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}
# Functions that keep a series in its metric's range; any other one changes the unit (see _expr_unit).
_RANGE_KEEPING = {
    "max",
    "min",
    "avg",
    "histogram_quantile",
    "quantile",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "last_over_time",
    "topk",
    "bottomk",
    "abs",
    "clamp",
    "clamp_min",
    "clamp_max",
}
_COMPARISON = re.compile(r"(>=|<=|==|!=|>|<)\s*(?:bool\s+)?(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*$")
DASHBOARD_LABEL = "grafana_dashboard"


def metric_facts() -> Mapping[str, Any]:
    from kimi_k3.data import recipe_file

    return recipe_file("facts/metrics.yaml")


def _strip(expr: str) -> str:
    """An expression without strings, label matchers, range selectors and by/without/on label lists."""
    out = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    out = re.sub(r"\{[^}]*\}", " ", out)
    out = re.sub(r"\[[^\]]*\]", " ", out)
    return re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", out)


def expr_metrics(expr: str) -> tuple[list[str], set[str]]:
    """(metric names, function names) an expression uses."""
    stripped = _strip(expr)
    functions = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*\(", stripped))
    names = [
        n
        for n in re.findall(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![a-zA-Z0-9_:]|\s*\()", stripped)
        if n.lower() not in _PROMQL_WORDS
    ]
    return names, functions


def _fact(name: str, facts: Mapping[str, Any]) -> tuple[Optional[str], Optional[Mapping[str, Any]]]:
    """(table name, entry) for a metric as queried (a histogram's _bucket/_sum/_count series map to it)."""
    metrics = facts.get("metrics") or {}
    if name in metrics:
        return name, metrics[name]
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and (metrics.get(base) or {}).get("type") == "histogram":
            return base, metrics[base]
    return None, None


def _exporter(name: str, facts: Mapping[str, Any]) -> Optional[str]:
    return next(
        (
            ex
            for ex, e in (facts.get("exporters") or {}).items()
            if any(name.startswith(p) for p in e.get("prefixes") or [])
        ),
        None,
    )


def _expr_unit(units: list[str], functions: set[str]) -> Optional[str]:
    """The unit of an expression over metrics of `units`, or None when it cannot be told (mixed units)."""
    if len(set(units)) != 1:
        return None
    unit = units[0]
    if "histogram_quantile" in functions:
        return unit  # a quantile of a histogram is in the unit of its buckets (le)
    if functions & {"absent", "absent_over_time"}:
        return "boolean"
    if functions & {"rate", "irate"}:
        return "per_second"
    if functions & {"increase", "count", "count_over_time", "changes", "resets"}:
        return "count"
    if "sum" in functions:
        return "count" if unit in ("count", "boolean") else None  # a sum of ratios or latencies has no range
    return unit if functions <= _RANGE_KEEPING else None


def _check_expr(expr: str, where: str, facts: Mapping[str, Any], panel_unit: Optional[str] = None) -> Iterator[str]:
    names, functions = expr_metrics(expr)
    units = []
    for name in names:
        table_name, fact = _fact(name, facts)
        exporter = _exporter(name, facts)
        if fact is None:
            if exporter:
                yield (
                    f"{where}: {name} is not a metric {exporter} exports "
                    f"({facts['exporters'][exporter]['source']}; recipes/facts/metrics.yaml)"
                )
            continue
        units.append(fact["unit"])
    if not units:
        return
    unit = _expr_unit(units, functions)
    spec = (facts.get("units") or {}).get(unit or "", {})
    m = _COMPARISON.search(expr)
    if m and unit and spec:
        op, value = m.group(1), float(m.group(2))
        low, high = spec.get("min"), spec.get("max")
        never = (
            (op in (">",) and high is not None and value >= high)
            or (op in (">=", "==") and high is not None and value > high)
            or (op in ("<",) and low is not None and value <= low)
            or (op in ("<=", "==") and low is not None and value < low)
        )
        if never:
            yield (
                f"{where}: compares a {unit} ({low}..{high if high is not None else 'inf'}: "
                f"{', '.join(sorted(set(names)))}) with {op} {m.group(2)}, which it can never pass; allowed: a "
                f"threshold in the metric's own unit (recipes/facts/metrics.yaml)"
            )
    if panel_unit is not None and unit and spec and panel_unit not in spec.get("grafana", []):
        yield (
            f"{where}: shows a {unit} ({', '.join(sorted(set(names)))}) in Grafana unit {panel_unit!r}; "
            f"allowed: {', '.join(spec.get('grafana', []))}"
        )


def _dashboards(obj: Mapping) -> Iterator[tuple[str, Mapping]]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if obj.get("kind") != "ConfigMap" or str(labels.get(DASHBOARD_LABEL, "")) != "1":
        return
    for key, text in (obj.get("data") or {}).items():
        try:
            dashboard = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(dashboard, dict):
            yield key, dashboard


def check_alerts_match_metric_units(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Alert rules and dashboard panels query metrics their exporter really exports, against thresholds and in
    display units of the metric's real unit (recipes/facts/metrics.yaml, with sources)."""
    facts = metric_facts()
    if obj.get("kind") == "PrometheusRule":
        for group in (obj.get("spec") or {}).get("groups") or []:
            for rule in group.get("rules") or []:
                name = rule.get("alert") or rule.get("record") or "(unnamed)"
                for message in _check_expr(str(rule.get("expr", "")), f"rule {name}", facts):
                    yield Finding(target_of(obj), message)
    for key, dashboard in _dashboards(obj):
        for panel in dashboard.get("panels") or []:
            unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
            for target in panel.get("targets") or []:
                where = f"{key} panel {panel.get('title', panel.get('id'))!r}"
                for message in _check_expr(str(target.get("expr", "")), where, facts, unit):
                    yield Finding(target_of(obj), message)
