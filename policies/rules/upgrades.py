"""Upgrade rules: what a change does to a running stack (family `upgrades`).

These rules read a transition, not a state: the classification of every resource between the deployed side and
the new side (kimi_k3.offline.replacement: create / update / replace / delete / same, from pulumi-kubernetes' and the
engine's own rules). A CrossGuard pack cannot run them: the analyzer protocol (pulumi/proto analyzer.proto:
AnalyzeRequest / AnalyzerResource carry type, properties, urn, name, options {protect, ignoreChanges,
deleteBeforeReplace, aliases, customTimeouts, parent}, provider; AnalyzerStackConfigure carries stack, project,
config, dry_run) has no old state and no planned step. They run offline instead, before anything is created:
`kimi-k3 check STACK --against PREVIOUS` (PREVIOUS: a render directory or `pulumi stack export` output; `make up`
does this with the stack's real state) and `kimi-k3 diff` (base render -> head render). What the pack can see
statelessly is checked there too: `graph-named-stably` (an object rule in the registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from kimi_k3 import flags
from kimi_k3.names import GRAPH_NAME
from kimi_k3.offline import replacement as R
from policies.rules.base import (
    ADVISORY,
    MANDATORY,
    Finding,
    Result,
    Skipped,
    Violation,
    frontends,
    name_of,
    target_of,
    workers,
)

DGD_KIND = "DynamoGraphDeployment"
# Resources that hold the ~1.5 TB of weights, or hold what holds them (deleting a namespace deletes its PVCs).
CACHE_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "Namespace")
CACHE_TYPES = ("aws:fsx/lustreFileSystem:LustreFileSystem", "aws:efs/fileSystem:FileSystem")
PART_OF = ("app.kubernetes.io/part-of", "kimi-k3")


@dataclass(frozen=True)
class TransitionRule:
    name: str
    description: str
    level: str
    check: Callable[..., Iterable[Result]]
    on_records: bool = False  # check(base records, head records) instead of check(classifications)


def _kind(c: R.Classification) -> str:
    return c.identity.split("/")[1] if c.identity else c.type.rsplit(":", 1)[-1]


def _target(c: R.Classification) -> str:
    if c.identity:
        _, kind, ns, name = c.identity.split("/", 3)
        return f"{kind}/{name}" + (f" (namespace {ns})" if ns else "")
    return f"{c.type}/{c.name}"


def _why(c: R.Classification) -> str:
    return "; ".join(c.reasons) or ", ".join(c.replace_paths) or c.action


def check_graph_updated_in_place(classes: Sequence[R.Classification]) -> Iterator[Result]:
    for c in classes:
        if _kind(c) != DGD_KIND:
            continue
        if c.action == R.REPLACE:
            yield Finding(
                _target(c),
                f"would be REPLACED, not patched ({_why(c)}): a re-created graph loses the "
                "operator's worker-hash annotations and leaves the previous worker generation running "
                "(ai-dynamo/dynamo#13495). Keep its name and namespace; to move it, stage it "
                "(docs/operating.md#moving-the-graph)",
            )
        elif c.moved:
            yield Finding(
                _target(c),
                f"changes its Pulumi URN ({c.action}, other side {c.moved}): Pulumi deletes "
                "and re-creates the graph; keep the resource name and parent (or add an alias)",
            )
        elif c.action == R.DELETE:
            yield Finding(
                _target(c),
                "would be DELETED by an update; to tear down keeping the weights use "
                "`make park` (docs/aws.md, Teardown), which does not go through this check",
            )


def check_model_cache_kept(classes: Sequence[R.Classification]) -> Iterator[Result]:
    for c in classes:
        if not (_kind(c) in CACHE_KINDS or c.type in CACHE_TYPES) or c.action not in (R.REPLACE, R.DELETE):
            continue
        if c.action == R.DELETE and c.retained and not c.moved:
            continue  # dropped from the stack, left in place (retainOnDelete): the weights stay
        stop = " `pulumi up` would stop here (protect), after creating what comes before it." if c.blocked else ""
        yield Finding(
            _target(c),
            f"holds the model cache and would be {c.action.upper()}D ({_why(c)}).{stop} "
            "Weights are never re-downloaded by accident: revert the change, or follow "
            "docs/operating.md#moving-the-cache",
        )


CLUSTER_TYPE = "aws:eks/cluster:Cluster"


def check_cluster_kept(classes: Sequence[R.Classification]) -> Iterator[Result]:
    """The EKS cluster is never replaced or deleted by an update: replacing it re-creates every node, add-on and
    in-cluster object (the Capacity Block's GPU nodes included) and needs a new kubeconfig."""
    for c in classes:
        if c.type == CLUSTER_TYPE and c.action in (R.REPLACE, R.DELETE):
            yield Finding(
                _target(c),
                f"the EKS cluster would be {c.action.upper()}D ({_why(c)}): every node, add-on "
                "and object in it would be re-created. Revert the change, or add the input to the "
                "cluster's ignore_changes (components/aws/cluster.py) so existing clusters keep theirs",
            )


def check_replacement_certain(classes: Sequence[R.Classification]) -> Iterator[Result]:
    for c in classes:
        if not c.certain and c.action != R.SAME:
            changed = ", ".join(ch.path for ch in c.changes[:4])
            yield Finding(
                _target(c),
                f"{c.action} of {changed}: whether the provider replaces this is not modelled "
                "offline (recipes/facts/aws-force-new.yaml, gcp-force-new.yaml); "
                "read `pulumi preview --diff` before `up`",
            )


def _graph_components(records: Iterable[Mapping]) -> dict[str, Mapping]:
    """This program's graph's components by name, from resource records (a render or the stack's state)."""
    for r in records:
        if r.get("type", "").endswith(f":{DGD_KIND}"):
            comps = ((r.get("inputs") or {}).get("spec") or {}).get("components") or []
            return {c.get("name"): c for c in comps if isinstance(c, Mapping)}
    return {}


def check_planner_takes_over_single_replicas(base: Sequence[Mapping], head: Sequence[Mapping]) -> Iterator[Result]:
    """A worker this program ran at N > 1 replicas, handed to the planner (no replicas, scalingAdapter) by this
    change: the count drops to the operator's default 1, which its admission webhook refuses to anyone but the
    operator and planner-serviceaccount (docs/operating.md#autoscaling), so `pulumi up` would fail at the graph."""
    old = _graph_components(base)
    for name, comp in _graph_components(head).items():
        before = old.get(name)
        if before is None or "replicas" in comp or "scalingAdapter" not in comp or "scalingAdapter" in before:
            continue
        n = int(before.get("replicas", 1))
        if n != 1:
            yield Finding(
                f"{DGD_KIND}/{GRAPH_NAME} component {name}",
                f"runs {n} replicas that this program set; "
                "handing it to the planner drops the count to the operator's default 1, which the "
                "operator's webhook refuses (a scaling-adapter component's count changes only through its "
                "adapter), so `pulumi up` would fail at the graph. Set that role to 1 replica first "
                "(`make up`), then enable kimi-k3:serving.autoscaling; the planner raises it to its floor",
            )


TRANSITION_RULES: tuple[TransitionRule, ...] = (
    TransitionRule(
        "graph-updated-in-place",
        "A change patches the DynamoGraphDeployment; it is never replaced.",
        MANDATORY,
        check_graph_updated_in_place,
    ),
    TransitionRule(
        "model-cache-kept",
        "A change never replaces or deletes the model cache or its namespace.",
        MANDATORY,
        check_model_cache_kept,
    ),
    TransitionRule(
        "cluster-kept", "A change never replaces or deletes the EKS cluster.", MANDATORY, check_cluster_kept
    ),
    TransitionRule(
        "replacement-certain",
        "Every changed resource's update-vs-replace is known offline.",
        ADVISORY,
        check_replacement_certain,
    ),
    TransitionRule(
        "planner-takes-over-single-replicas",
        "Switching the SLA planner on hands it only worker roles "
        "this program ran at 1 replica (the operator's webhook refuses any other count change).",
        MANDATORY,
        check_planner_takes_over_single_replicas,
        on_records=True,
    ),
)


def run_transition_rules(
    base: Iterable[Mapping], head: Iterable[Mapping]
) -> tuple[list[R.Classification], list[Violation]]:
    """Classify base -> head (resource records) and run every transition rule on the result."""
    base, head = list(base), list(head)
    classes = R.classify(base, head)
    violations = [
        Violation(rule.name, f.target, f.message, rule.level)
        for rule in TRANSITION_RULES
        for f in (rule.check(base, head) if rule.on_records else rule.check(classes))
        if isinstance(f, Finding)
    ]
    return classes, sorted(violations)


# ------------------------------------------------------------------ what a stateless pack can check
def check_graph_named_stably(obj: Mapping, ctx) -> Iterator[Result]:
    """This program's graph is named GRAPH_NAME whatever the recipe: a name derived from config renames (and so
    replaces) the graph when that config changes. Graphs not made by this program are left alone."""
    meta = obj.get("metadata") or {}
    if obj.get("kind") != DGD_KIND or (meta.get("labels") or {}).get(PART_OF[0]) != PART_OF[1]:
        return
    if meta.get("name") != GRAPH_NAME:
        yield Finding(
            target_of(obj),
            f"named {meta.get('name')!r}, not {GRAPH_NAME!r}: a graph name that follows "
            "the recipe or other config replaces the graph when that config changes (dynamo#13495)",
        )


def check_frontend_migrates_requests(obj: Mapping, ctx) -> Iterator[Result]:
    """A frontend routing to workers runs with request migration on: --migration-limit (else its environment form
    DYN_MIGRATION_LIMIT, dynamo/frontend/frontend_args.py) above 0. With Dynamo's default 0, every response streaming
    from a worker whose pod a rolling update terminates ends with an error at the client."""
    routed = list(workers(obj))
    if not routed:
        return
    for comp, _, tokens in routed:
        # dynamo.vllm read it up to 0.9.1; from 1.0.0 it passes unknown flags to vLLM's parser, which exits
        if flags.has_flag(tokens, "--migration-limit") or flags.has_flag(tokens, "--migration-max-seq-len"):
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: --migration-limit/--migration-max-seq-len on a "
                "dynamo.vllm worker: a frontend flag since Dynamo 1.0.0, and an unknown flag stops the "
                "worker at startup (vLLM's argument parser); set it on the frontend",
            )
    for fe, container, tokens in frontends(obj):
        raw = flags.flag_value(tokens, "--migration-limit")
        where = "--migration-limit"
        if raw is None and not flags.has_flag(tokens, "--migration-limit"):
            env = flags.container_env(container)
            if "DYN_MIGRATION_LIMIT" in env and env["DYN_MIGRATION_LIMIT"] is None:
                yield Skipped(
                    target_of(obj),
                    f"frontend {name_of(fe)}: DYN_MIGRATION_LIMIT comes from a reference "
                    "(valueFrom): its value cannot be read here",
                )
                continue
            raw, where = env.get("DYN_MIGRATION_LIMIT"), "DYN_MIGRATION_LIMIT"
        if raw is None:
            yield Finding(
                target_of(obj),
                f"frontend {name_of(fe)}: no --migration-limit, so Dynamo's default 0: "
                "request migration is off and every response streaming from a worker that a rollout "
                "terminates (or that dies) fails at the client; set --migration-limit N > 0 on the frontend",
            )
            continue
        try:
            limit = int(raw)
        except ValueError:
            yield Finding(
                target_of(obj),
                f"frontend {name_of(fe)}: {where} {raw!r} is not an integer (the frontend exits at startup)",
            )
            continue
        if limit <= 0:
            yield Finding(
                target_of(obj),
                f"frontend {name_of(fe)}: {where} {limit} turns request migration off: "
                "every response streaming from a worker that a rollout terminates (or that dies) fails at "
                "the client; set it above 0",
            )
