"""Engine awareness: vLLM-only rules report SGLang workers as not applicable (never a silent pass), and the rules
SGLang workers need (recipes/facts/sglang.yaml: page-based KV block, disaggregation transfer, TP over whole nodes)."""

from __future__ import annotations

from functools import wraps
from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence

from kimi_k3 import flags
from kimi_k3.facts.sglang import load_sglang_facts
from policies.rules.base import (
    Context,
    Finding,
    Result,
    Skipped,
    components,
    frontends,
    gpus,
    main_container,
    name_of,
    node_count,
    serving,
    shown,
    target_of,
)

# Rules that read dynamo.vllm workers' flags only (base.workers): policies/rules/__init__.py wraps them in vllm_only.
VLLM_ONLY_RULES = frozenset(
    {
        "disagg-roles-use-nixl",
        "efa-uses-libfabric",
        "frontend-block-size-matches-workers",
        "kv-router-has-kv-events",
        "kv-transport-consistent",
        "no-removed-flags",
        "nvlink-kv-roles-share-compute-domain",
        "worker-block-size-is-vllms",
        "frontend-reads-model-path",
        "model-cache-read-only",
        "multinode-args-survive-operator-rewrite",
        "roles-agree-on-model",
        "startup-budget-covers-load",
        "model-fits-at-tp",
        "pods-take-whole-nodes",
        "tp-spans-whole-nodes",
        "frontend-migrates-requests",
        "smoke-probe-spans-kv-block",
    }
)


def _component_type(comp: Mapping) -> str:
    return str(comp.get("type") or comp.get("componentType") or "").lower()


def sglang_workers(obj: Mapping) -> Iterator[tuple[Mapping, Mapping, list[str]]]:
    """(component, main container, tokens) for every component that runs dynamo.sglang."""
    module = load_sglang_facts().module
    for comp in components(obj):
        container = main_container(comp)
        tokens, mod = serving(container)
        if mod == module:
            yield comp, container, tokens


def vllm_only(check: Callable[[Mapping, Context], Iterable[Result]]) -> Callable[[Mapping, Context], Iterator[Result]]:
    """A rule that reads vLLM's flags: its findings on vLLM workers, and "not applicable" for each SGLang worker
    (the rule never looked at it, so it must not count as passing it)."""

    @wraps(check)
    def gated(obj, ctx: Context) -> Iterator[Result]:
        yield from check(obj, ctx)
        for one in [obj] if isinstance(obj, Mapping) else obj:  # object- or stack-scoped
            for comp, _, _ in sglang_workers(one):
                yield Skipped(
                    target_of(one),
                    f"component {name_of(comp)} runs {load_sglang_facts().module}: not applicable (this rule reads "
                    "vLLM's flags; SGLang's are checked by the sglang-* rules)",
                )

    return gated


def _value(tokens: Sequence[str], *names: str) -> Optional[str]:
    for name in names:
        value = flags.flag_value(tokens, name)
        if value is not None:
            return value
    return None


def router_block(tokens: Sequence[str]) -> Optional[int]:
    """The block an SGLang worker registers with the KV router: --page-size x --dcp-size (dynamo/sglang/capacity.py);
    None when no page size is stated (SGLang then picks one per attention backend: not provable)."""
    facts = load_sglang_facts()
    page = _value(tokens, facts.flag("page_size"))
    if page is None:
        return None
    return facts.router_block(int(page), int(_value(tokens, facts.flag("dcp")) or 1))


def check_sglang_router_block_is_page(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """The frontend's --kv-cache-block-size equals the page x DCP block of the SGLang workers the KV router routes to
    (prefill when disaggregated), which they register and emit KV events in."""
    disagg = {"prefill", "decode"} <= {_component_type(c) for c in components(obj)}
    for fe, fe_container, fe_tokens in frontends(obj):
        mode = flags.flag_value(fe_tokens, "--router-mode") or flags.container_env(fe_container).get("DYN_ROUTER_MODE")
        fe_block = flags.flag_value(fe_tokens, "--kv-cache-block-size")
        if mode != "kv" or fe_block is None:
            continue
        for comp, _, tokens in sglang_workers(obj):
            if disagg and _component_type(comp) != "prefill":
                continue
            block = router_block(tokens)
            where = f"component {name_of(comp)}"
            if block is None:
                yield Finding(
                    target_of(obj),
                    f"{where}: no --page-size while frontend {name_of(fe)} routes with --kv-cache-block-size "
                    f"{fe_block}; SGLang's page then depends on the attention backend and cannot be proven equal",
                )
            elif str(block) != fe_block:
                yield Finding(
                    target_of(obj),
                    f"{where}: SGLang registers {block}-token KV blocks (--page-size x --dcp-size, "
                    f"dynamo/sglang/capacity.py) but frontend {name_of(fe)} has --kv-cache-block-size {fe_block}; "
                    f"allowed: {block}",
                )


def check_sglang_disagg_roles_agree(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """SGLang prefill and decode run --disaggregation-mode of their role and one transfer backend (both ends of a KV
    handoff speak it; SGLang's default is mooncake, recipes/facts/sglang.yaml)."""
    facts = load_sglang_facts()
    roles = [(c, t) for c, _, t in sglang_workers(obj) if _component_type(c) in ("prefill", "decode")]
    if not roles:
        return
    backends: dict[str, str] = {}
    for comp, tokens in roles:
        role = _component_type(comp)
        where = f"component {name_of(comp)} ({role})"
        mode = flags.flag_value(tokens, facts.flag("disaggregation_mode"))
        if mode != role:
            yield Finding(target_of(obj), f"{where}: --disaggregation-mode is {shown(mode)}, expected {role!r}")
        backend = flags.flag_value(tokens, facts.flag("transfer_backend")) or facts.default_transfer_backend
        if backend not in facts.transfer_backends:
            yield Finding(
                target_of(obj),
                f"{where}: --disaggregation-transfer-backend {backend!r}; allowed: {', '.join(facts.transfer_backends)}",
            )
        backends[name_of(comp)] = backend
    if len(set(backends.values())) > 1:
        listed = ", ".join(f"{k}: {v}" for k, v in sorted(backends.items()))
        yield Finding(
            target_of(obj),
            f"prefill and decode use different --disaggregation-transfer-backend ({listed}); KV cannot be handed over",
        )


def check_sglang_tp_spans_whole_nodes(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """An SGLang worker's --tp-size is its pods' GPUs (nodeCount x GPUs per pod), and it leaves --nnodes,
    --node-rank and --dist-init-addr to the operator, which appends them to every multinode pod (backend_sglang.go)."""
    facts = load_sglang_facts()
    for comp, container, tokens in sglang_workers(obj):
        where = f"component {name_of(comp)}"
        tp = _value(tokens, facts.flag("tp"), "--tensor-parallel-size")
        have = node_count(comp) * gpus(container)
        if tp is None or int(tp) != have:
            yield Finding(
                target_of(obj),
                f"{where}: --tp-size {tp or '(unset: 1)'} but its {node_count(comp)} pod(s) hold {have} GPUs; "
                f"allowed: {have}",
            )
        for flag in facts.operator_injected:
            if node_count(comp) > 1 and flags.has_flag(tokens, flag):
                yield Finding(
                    target_of(obj),
                    f"{where}: sets {flag}, which the Dynamo operator appends to every multinode SGLang pod "
                    "(deploy/operator backend_sglang.go); remove it",
                )
