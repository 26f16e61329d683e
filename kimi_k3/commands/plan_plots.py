"""`kimi-k3 plan`'s figures: capacity and cost per slot (--plot), the Pareto frontier (--pareto) and the cost
against the API by load (--cost-plot). matplotlib is imported only when one is drawn."""

from __future__ import annotations

from kimi_k3.commands import plan_perf
from kimi_k3.facts import model
from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import perf


def plan_figure(stack: planner.StackPlan, title: str):
    """The capacity and cost-per-slot figure: titled with the stack, one line per distinct curve (roles that
    draw the same curve share it and its label), the legend below both axes so it never covers data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contexts = list(model.CONTEXTS)
    fig, (cap, cost) = plt.subplots(1, 2, figsize=(12, 5.6))
    # Roles with the same topology draw identical curves: one line, labelled with every role it stands for.
    curves: dict[tuple, list] = {}
    for r in stack.roles:
        counts = tuple(r.plan.vllm_max_concurrency(c) for c in contexts)
        slot_cost = None
        if stack.pricing is not None:
            role_hour = r.gpus * stack.pricing.instance_hour_usd / stack.pricing.gpus_per_instance
            slot_cost = tuple(role_hour / (n * r.spec.replicas) if n > 0 else float("nan") for n in counts)
        curves.setdefault((counts, slot_cost), []).append(r)
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]
    for i, ((counts, slot_cost), roles) in enumerate(curves.items()):
        line, marker = styles[i % len(styles)]
        p = roles[0].plan
        names = " = ".join(r.spec.name for r in roles)
        label = (
            f"{names}: {p.gpu} TP{p.tp}"
            + (f" DCP{p.dcp}" if p.dcp > 1 else "")
            + (" (same curve)" if len(roles) > 1 else "")
        )
        cap.plot(contexts, counts, linestyle=line, marker=marker, label=label)
        if slot_cost is not None:
            cost.plot(contexts, slot_cost, linestyle=line, marker=marker, label=label)
    for ax in (cap, cost):
        ax.set_xscale("log", base=2)
        ax.set_xlim(contexts[0] / 1.4, contexts[-1] * 1.4)
        ax.set_xticks(contexts, [f"{c // 2**20}M" if c >= 2**20 else f"{c // 1024}k" for c in contexts])
        ax.set_xlabel("context length per request (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    cap.set_yscale("log")
    cap.set_ylabel("requests at once per replica (vLLM max concurrency)")
    cap.set_title("requests that fit together in one replica")
    cost.set_title("cost per request slot")
    if stack.pricing is None:
        cost.text(0.5, 0.5, "no price configured", ha="center", va="center", transform=cost.transAxes)
    else:
        cost.set_yscale("log")
        cost.set_ylabel("$ per slot-hour")
    handles, labels = cap.get_legend_handles_labels()
    fig.suptitle(f"Kimi K3 plan: {title}")
    rows = 1 + (len(labels) - 1) // 3
    fig.legend(
        handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.035), ncol=min(len(labels), 3), frameon=False
    )
    if stack.pricing is not None:
        fig.text(
            0.5,
            0.005,
            f"price: {stack.pricing.source} ({stack.pricing.as_of})",
            ha="center",
            va="bottom",
            fontsize="small",
            wrap=True,
        )
    fig.tight_layout(rect=(0, 0.07 + 0.045 * rows, 1, 0.95))
    return fig


def plot(stack: planner.StackPlan, path: str, title: str = "") -> None:
    import matplotlib.pyplot as plt

    fig = plan_figure(stack, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pareto_plot(stack: planner.StackPlan, title: str, path: str, w: perf.Workload) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layout = plan_perf.layout_of(stack)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    # Every layout we rank on this platform at the requested context, grey: the frontier to beat.
    for other in perf.candidate_layouts():
        if other.gpu != layout.gpu or other == layout.unit()[0]:
            continue
        pts = [
            (p["tokens_per_second_per_user"], p["tokens_per_second_per_gpu"])
            for p in perf.curves(other, osl=w.osl)
            if "error" not in p and p["isl"] == plan_perf.nearest_context(w.isl)
        ]
        if pts:
            ax.plot(*zip(*pts), color="0.8", marker=".", linewidth=1)
    ax.plot(
        [],
        [],
        color="0.8",
        marker=".",
        label=f"other {layout.gpu} layouts @ {plan_perf.nearest_context(w.isl) // 1024}k",
    )
    cmap = plt.get_cmap("viridis")
    for i, isl in enumerate(aic.CONTEXTS):
        pts = [
            (p["tokens_per_second_per_user"], p["tokens_per_second_per_gpu"], p["kv_fits"])
            for p in perf.curves(layout, osl=w.osl)
            if "error" not in p and p["isl"] == isl
        ]
        if not pts:
            continue
        color = cmap(i / (len(aic.CONTEXTS) - 1))
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            color=color,
            label=f"{isl // 1024:,}k context" if isl < 2**20 else "1M context",
        )
        for x, y, fits in pts:
            if not fits:
                ax.plot(x, y, marker="x", color="red", markersize=9)
    ax.plot([], [], "rx", label="KV cache cannot hold that batch")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(
        f"Kimi K3 {title}: {layout.describe()}, OSL {w.osl:,}\n"
        "calibrated aiconfigurator estimates; points = 1, 4, 16, 64 requests per worker",
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cost_plot(
    stack: planner.StackPlan, est: perf.Estimate, title: str, path: str, w: perf.Workload, price: perf.ApiPrice
) -> None:
    """Per cost basis, one panel: self-hosted $/Mtok of output against requests/s (up to what the stack carries
    at that context), and the API's bill for the same requests as a dashed line of the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bases = plan_perf.cost_bases(stack)
    if not bases:
        raise ValueError("--cost-plot: the stack has no price configured (kimi-k3:pricing)")
    util = min(r.spec.gpu_memory_utilization for r in stack.roles)
    fig, axes = plt.subplots(1, len(bases), figsize=(6.5 * len(bases), 5.6), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, (basis, per_hour) in zip(axes[0], bases.items()):
        for i, isl in enumerate(aic.CONTEXTS):
            e, _ = plan_perf.at_context(est, isl, w, util)
            if e is None:
                continue
            color = cmap(i / (len(aic.CONTEXTS) - 1))
            label = f"{isl // 1024:,}k" if isl < 2**20 else "1M"
            cap = e.requests_per_second_capacity
            rates = [cap * 10 ** (k / 20) for k in range(-40, 1)]  # two decades below what it carries
            mtok = [per_hour / 3600 / r / w.osl * 1e6 for r in rates]
            ax.plot(rates, mtok, color=color, label=f"{label} context (carries up to {cap:.3g} req/s)")
            ax.plot(rates[-1], mtok[-1], "o", color=color)
            api_req = price.per_request(perf.Workload(isl, w.osl, cache_hit_rate=w.cache_hit_rate))
            ax.axhline(api_req / w.osl * 1e6, color=color, linestyle="--", linewidth=1)
            even = per_hour / 3600 / api_req
            if even <= cap:  # the break-even load, where the curve meets the API's line
                ax.plot(even, api_req / w.osl * 1e6, "X", color="red", markersize=9)
        ax.plot([], [], "X", color="red", label="break-even (cheaper than the API to its right)")
        ax.plot([], [], color="0.4", linestyle="--", label=f"API {price.model} for the same requests")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("load (requests/s)")
        ax.set_ylabel("$ per million output tokens (input included)")
        ax.set_title(f"{plan_perf.BASIS_LABELS[basis]}: ${per_hour:,.2f}/h", fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small", loc="lower left")
    fig.suptitle(
        f"Kimi K3 {title}: {est.layout.describe()}, OSL {w.osl:,}, "
        f"{w.cache_hit_rate:.0%} of input cached; a solid line below its dashed line = cheaper than the API\n"
        f"API price: {price.source}, {price.as_of}",
        fontsize="medium",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=120)
    plt.close(fig)
