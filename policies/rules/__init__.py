"""Deployment rules for Dynamo + vLLM graphs: pure functions over Kubernetes objects, one module per family
(topology, model_path, kv_transport, safety, secrets, upgrades, autoscaling, storage, qos, observability, placement,
access, portability, sglang, provided_domain, gke, gke_pool; shared helpers in base, resource inputs as objects
in engine_form). This module is the registry; `catalogue` lists the rules in their report order.

One implementation, two front ends: the CrossGuard pack (`policies/__main__.py`) and the offline
checker (`kimi-k3 check`). Importing this module has no side effects.

A rule is either object-scoped (looks at one object at a time; the pack runs it in `Analyze`) or
stack-scoped (needs several objects or Pulumi resource options; the pack runs it in `AnalyzeStack`).
Each check yields `Finding` (a violation) or `Skipped` (the rule could not be evaluated, with why).
Transition rules (`TRANSITION_RULES`, family upgrades) read a change between two states instead of one state;
no policy pack can run them (no old state in the analyzer protocol): `kimi-k3 check --against` and `kimi-k3 diff` do.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from kimi_k3 import shape
from policies.rules.base import (  # the vocabulary the pack, `kimi-k3 check` and tests use
    ADVISORY,
    DEFAULT_MIN_STARTUP_SECONDS,
    MANDATORY,
    SHAPE_RULE,
    Context,
    Finding,
    NotEvaluated,
    ResourceInfo,
    Result,
    Rule,
    Skipped,
    Violation,
    check_object_shape,
    evaluate,
    safe_target,
    target_of,
)
from policies.rules.catalogue import RULES
from policies.rules.engine_form import object_from_resource, resource_info  # noqa: F401 (re-exported)
from policies.rules.upgrades import (  # noqa: F401 (re-exported)
    TRANSITION_RULES,
    TransitionRule,
    check_frontend_migrates_requests,
    check_graph_named_stably,
    run_transition_rules,
)

RULES_BY_NAME = {r.name: r for r in RULES}


def run_all(
    objects: Sequence[Mapping],
    resources: Optional[Sequence[ResourceInfo]] = None,
    config: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> tuple[list[Violation], list[NotEvaluated]]:
    """Every rule over a set of objects; config maps rule name -> that rule's policy config."""
    violations: list[Violation] = []
    skipped: list[NotEvaluated] = []
    well_formed = [o for o in objects if not shape.problems(o)]  # once, not once per rule
    for rule in RULES:
        subset = objects if rule.name == SHAPE_RULE else well_formed
        v, s = evaluate(rule, subset, Context((config or {}).get(rule.name, {}), resources), well_formed=True)
        violations += v
        skipped += s
    return violations, skipped
