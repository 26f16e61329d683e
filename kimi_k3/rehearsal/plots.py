"""PNG plots of a rehearsal (matplotlib): latency percentiles per AIPerf run, requests per worker, and the
agentic run's time to first token against prompt length (what prefix caching buys a growing conversation)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kimi_k3.atomic import write_with

ROLE_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]


def draw(report: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    runs = {k: v for k, v in report["runs"].items() if v["requests"]}
    if runs:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, title in (
            (axes[0], "ttft_ms", "time to first token (ms)"),
            (axes[1], "itl_ms", "inter-token latency (ms)"),
        ):
            width = 0.8 / len(runs)
            for i, (name, run) in enumerate(runs.items()):
                vals = [run[key][p] or 0 for p in ("p50", "p90", "p99")]
                xs = [j + i * width for j in range(3)]
                bars = ax.bar(xs, vals, width, label=name)
                ax.bar_label(bars, fmt="%.0f" if key == "ttft_ms" else "%.1f", fontsize=7)
            ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(3)], ["p50", "p90", "p99"])
            ax.set_title(title)
            ax.legend(fontsize=8)
        fig.suptitle(f"{report['stack']}: AIPerf against the local Dynamo frontend (mocker engines)")
        fig.tight_layout()
        write_with(out / "latency.png", lambda tmp: fig.savefig(tmp, dpi=110))  # never a half-written PNG
        plt.close(fig)
        files.append("latency.png")

    if report["worker_requests"]:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        roles = list(report["roles"])
        names = list(report["worker_requests"])
        colors = [ROLE_COLORS[roles.index(n.rsplit("-", 1)[0]) % len(ROLE_COLORS)] for n in names]
        bars = ax.bar(names, [report["worker_requests"][n] for n in names], color=colors)
        ax.bar_label(bars, fontsize=8)
        ax.set_ylabel("requests handled")
        ax.set_title(f"{report['stack']}: load per worker (Dynamo's dynamo_component_requests_total)")
        fig.tight_layout()
        write_with(out / "workers.png", lambda tmp: fig.savefig(tmp, dpi=110))  # never a half-written PNG
        plt.close(fig)
        files.append("workers.png")

    records = out / "aiperf" / "agentic" / "profile_export.jsonl"
    points = []
    if records.is_file():
        for line in records.read_text().splitlines():
            rec = json.loads(line)
            m = rec.get("metrics") or {}
            isl, ttft = (
                (m.get("input_sequence_length") or {}).get("value"),
                (m.get("time_to_first_token") or {}).get("value"),
            )
            turn = (rec.get("metadata") or {}).get("turn_index", 0)
            if isl is not None and ttft is not None:
                points.append((isl, ttft, turn))
    if points:
        fig, ax = plt.subplots(figsize=(7, 4))
        sc = ax.scatter([p[0] for p in points], [p[1] for p in points], c=[p[2] for p in points], cmap="viridis")
        fig.colorbar(sc, ax=ax, label="turn in conversation")
        ax.set_xlabel("prompt tokens (fixture tokenizer)")
        ax.set_ylabel("time to first token (ms)")
        ax.set_title(f"{report['stack']}: agentic run, TTFT vs growing context")
        fig.tight_layout()
        write_with(out / "agentic_ttft.png", lambda tmp: fig.savefig(tmp, dpi=110))  # never a half-written PNG
        plt.close(fig)
        files.append("agentic_ttft.png")

    def save(fig, name: str, figures: dict) -> None:  # the figures shown, as JSON in the PNG's Description chunk
        meta = {"Description": json.dumps(figures, sort_keys=True)}
        write_with(out / name, lambda tmp: fig.savefig(tmp, dpi=110, format="png", metadata=meta))
        plt.close(fig)

    from kimi_k3.rehearsal import trace_sections

    return files + trace_sections.draw(report, out, plt, save)
