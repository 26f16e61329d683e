"""The one place that calls NVIDIA aiconfigurator (optional extra `kimi-k3[perf]`, pinned 0.12.0).

Everything else reads aiconfigurator's numbers through `recipes/facts/perf-raw.yaml`, a table this module writes
(`python -m kimi_k3.sizing.aiconfigurator regenerate`) and a test regenerates and compares where the tool is installed.
aiconfigurator 0.12.0 is deprecated upstream in favour of `aisimulate` (same CLI names); aisimulate's PyPI
package downloads at install time and fails offline, so this project stays on 0.12.0.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path
from typing import Any, Iterable

MODEL = "moonshotai/Kimi-K3"
BACKEND = "vllm"
VERSION = "0.12.0"
INSTALL_HINT = "pip install 'kimi-k3[perf]' (aiconfigurator==0.12.0), or: make perf-venv"
RAW_TABLE = Path(__file__).resolve().parent.parent.parent / "recipes" / "facts" / "perf-raw.yaml"

# The grid the committed table covers: the planner's context lengths, agentic output length, batch sizes
# per worker, every TP our platforms fit, and the disaggregated prefill:decode worker counts we rank.
CONTEXTS = (8192, 32768, 131072, 262144, 524288, 1048576)
OSL = 1024
BATCHES = (1, 4, 16, 64)
AGG_LAYOUTS = (("gb200", 16), ("gb300", 8), ("gb300", 16))
DISAGG_LAYOUTS = (("gb200", 16, 16), ("gb300", 8, 8))
DISAGG_WORKERS = ((1, 1), (1, 2), (2, 1))


def available() -> tuple[bool, str]:
    """(installed at the pinned version, why not)."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("aiconfigurator")
        except PackageNotFoundError:
            return False, f"aiconfigurator is not installed ({INSTALL_HINT})"
        if found != VERSION:
            return False, f"aiconfigurator {found} is installed, this project pins {VERSION} ({INSTALL_HINT})"
        import aiconfigurator.cli.api  # noqa: F401

        return True, ""
    except Exception as e:  # a broken install is "not available", with its reason
        return False, f"aiconfigurator does not import: {e}"


@contextlib.contextmanager
def _quiet():
    # aiconfigurator logs deprecation and low-fidelity-data warnings on every call; keep our output readable.
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.disable(previous)


def point_key(point: dict[str, Any]) -> str:
    """A stable, human-readable key for one configuration."""
    if point["mode"] == "agg":
        return f"agg {point['system']} tp{point['tp']} isl{point['isl']} osl{point['osl']} bs{point['batch']}"
    return (
        f"disagg {point['system']} p{point['prefill_workers']}xtp{point['prefill_tp']} "
        f"d{point['decode_workers']}xtp{point['decode_tp']} isl{point['isl']} osl{point['osl']} "
        f"bs{point['decode_batch']}"
    )


def _num(x: Any) -> float:
    return round(float(x), 4)


def estimate(point: dict[str, Any]) -> dict[str, Any]:
    """aiconfigurator's estimate for one configuration (vLLM backend, FP8 KV, MoE TP = TP, like our stacks)."""
    ok, why = available()
    if not ok:
        raise RuntimeError(why)
    from aiconfigurator.cli.api import cli_estimate

    common = dict(backend_name=BACKEND, isl=point["isl"], osl=point["osl"], kvcache_quant_mode="fp8")
    try:
        with _quiet():
            if point["mode"] == "agg":
                r = cli_estimate(
                    MODEL,
                    point["system"],
                    mode="agg",
                    batch_size=point["batch"],
                    tp_size=point["tp"],
                    moe_tp_size=point["tp"],
                    **common,
                )
            else:
                r = cli_estimate(
                    MODEL,
                    point["system"],
                    mode="disagg",
                    tp_size=point["prefill_tp"],
                    prefill_tp_size=point["prefill_tp"],
                    prefill_moe_tp_size=point["prefill_tp"],
                    prefill_batch_size=1,
                    prefill_num_workers=point["prefill_workers"],
                    decode_tp_size=point["decode_tp"],
                    decode_moe_tp_size=point["decode_tp"],
                    decode_batch_size=point["decode_batch"],
                    decode_num_workers=point["decode_workers"],
                    **common,
                )
    except (RuntimeError, ValueError) as e:  # OOM and unsupported layouts are answers, not crashes
        return {"error": str(e).split(". ")[0]}
    raw = r.raw
    out = {
        "ttft_ms": _num(raw["ttft"]),
        "tpot_ms": _num(raw["tpot"]),
        "tokens_per_second": _num(raw["tokens/s"]),
        "tokens_per_second_per_gpu": _num(raw["tokens/s/gpu"]),
        "tokens_per_second_per_user": _num(raw["tokens/s/user"]),
        "concurrency": int(raw["concurrency"]),
        "gpus": int(raw["num_total_gpus"]),
        "backend_version": str(raw.get("version", raw.get("(d)version"))),
    }
    if point["mode"] == "agg":
        out["memory_gb_per_gpu"] = _num(raw["memory"])
    else:
        out.update(
            prefill_memory_gb_per_gpu=_num(raw["(p)memory"]),
            decode_memory_gb_per_gpu=_num(raw["(d)memory"]),
            prefill_requests_per_second_per_worker=_num(raw["(p)seq/s/worker"]),
            decode_requests_per_second_per_worker=_num(raw["(d)seq/s/worker"]),
        )
    if r.kv_cache_warning:
        out["kv_cache_warning"] = str(r.kv_cache_warning).split("\n")[0]
    return out


def memory(system: str, tp: int) -> dict[str, Any]:
    """aiconfigurator's per-GPU memory breakdown (GiB) for one TP worker at batch 1, 8k context, and its HBM size."""
    ok, why = available()
    if not ok:
        raise RuntimeError(why)
    from aiconfigurator.cli.api import cli_estimate

    with _quiet():
        r = cli_estimate(
            MODEL,
            system,
            mode="static",
            backend_name=BACKEND,
            isl=8192,
            osl=2,
            batch_size=1,
            tp_size=tp,
            moe_tp_size=tp,
            kvcache_quant_mode="fp8",
        )
    out = {k: _num(v) for k, v in sorted(r.summary.get_memory().items())}
    out["hbm_bytes"] = int(r.summary.get_mem_capacity_bytes())
    return out


def grid() -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    for system, tp in AGG_LAYOUTS:
        points += [
            dict(mode="agg", system=system, tp=tp, isl=isl, osl=OSL, batch=b) for isl in CONTEXTS for b in BATCHES
        ]
    for system, ptp, dtp in DISAGG_LAYOUTS:
        for pw, dw in DISAGG_WORKERS:
            points += [
                dict(
                    mode="disagg",
                    system=system,
                    prefill_tp=ptp,
                    prefill_workers=pw,
                    decode_tp=dtp,
                    decode_workers=dw,
                    isl=isl,
                    osl=OSL,
                    decode_batch=b,
                )
                for isl in CONTEXTS
                for b in BATCHES
            ]
    return points


def calibration_points(measurements: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The configurations of the public measurements (recipes/facts/perf-measurements.yaml), as estimate() points."""
    return [dict(m["config"]) for m in measurements]


def regenerate(points: list[dict[str, Any]], progress=print) -> dict[str, dict[str, Any]]:
    table = {}
    for i, p in enumerate(points, 1):
        key = point_key(p)
        table[key] = {"point": p, "estimate": estimate(p)}
        progress(f"[{i}/{len(points)}] {key}: {table[key]['estimate']}")
    return table


def write_table(table: dict[str, dict[str, Any]], mem: dict[str, Any], path: Path = RAW_TABLE) -> None:
    import yaml

    header = (
        f"# GENERATED by `python -m kimi_k3.sizing.aiconfigurator regenerate` from aiconfigurator=={VERSION}\n"
        f"# (NVIDIA's perf database, {BACKEND} backend, {MODEL}, FP8 KV, MoE TP = TP). Do not edit: the perf-tool\n"
        "# test lane regenerates it and fails on any difference. Raw numbers, before calibration.\n"
    )
    body = yaml.safe_dump(
        {"aiconfigurator": VERSION, "memory_gib_per_gpu": mem, "points": table}, sort_keys=True, width=120
    )
    path.write_text(header + body)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m kimi_k3.sizing.aiconfigurator")
    p.add_argument("command", choices=("regenerate", "check"))
    args = p.parse_args(argv)
    ok, why = available()
    if not ok:
        print(why, file=sys.stderr)
        return 2
    from kimi_k3.data import recipe_file

    points = grid() + calibration_points(recipe_file("facts/perf-measurements.yaml")["measurements"])
    unique = {point_key(p): p for p in points}
    table = regenerate(list(unique.values()), progress=lambda s: print(s, file=sys.stderr, flush=True))
    mem = {f"{system} tp{tp}": memory(system, tp) for system, tp in AGG_LAYOUTS}
    if args.command == "regenerate":
        write_table(table, mem)
        print(f"wrote {len(table)} points to {RAW_TABLE}")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
