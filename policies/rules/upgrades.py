"""Upgrade rules: what a change does to a running stack (family `upgrades`).

These rules read a transition, not a state: the classification of every resource between the deployed side and
the new side (kimi_k3.replacement: create / update / replace / delete / same, from pulumi-kubernetes' and the
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

from kimi_k3 import replacement as R
from kimi_k3.graph import GRAPH_NAME

from .base import ADVISORY, MANDATORY, Finding, Result, Violation, target_of

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
    check: Callable[[Sequence[R.Classification]], Iterable[Result]]


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
            yield Finding(_target(c), f"would be REPLACED, not patched ({_why(c)}): a re-created graph loses the "
                          "operator's worker-hash annotations and leaves the previous worker generation running "
                          "(ai-dynamo/dynamo#13495). Keep its name and namespace; to move it, stage it "
                          "(docs/operating.md#moving-the-graph)")
        elif c.moved:
            yield Finding(_target(c), f"changes its Pulumi URN ({c.action}, other side {c.moved}): Pulumi deletes "
                          "and re-creates the graph; keep the resource name and parent (or add an alias)")
        elif c.action == R.DELETE:
            yield Finding(_target(c), "would be DELETED by an update; to tear down keeping the weights use "
                          "`make park` (docs/aws.md, Teardown), which does not go through this check")


def check_model_cache_kept(classes: Sequence[R.Classification]) -> Iterator[Result]:
    for c in classes:
        if not (_kind(c) in CACHE_KINDS or c.type in CACHE_TYPES) or c.action not in (R.REPLACE, R.DELETE):
            continue
        if c.action == R.DELETE and c.retained and not c.moved:
            continue  # dropped from the stack, left in place (retainOnDelete): the weights stay
        stop = " `pulumi up` would stop here (protect), after creating what comes before it." if c.blocked else ""
        yield Finding(_target(c), f"holds the model cache and would be {c.action.upper()}D ({_why(c)}).{stop} "
                      "Weights are never re-downloaded by accident: revert the change, or follow "
                      "docs/operating.md#moving-the-cache")


def check_replacement_certain(classes: Sequence[R.Classification]) -> Iterator[Result]:
    for c in classes:
        if not c.certain and c.action != R.SAME:
            changed = ", ".join(ch.path for ch in c.changes[:4])
            yield Finding(_target(c), f"{c.action} of {changed}: whether the provider replaces this is not modelled "
                          "offline (recipes/aws-force-new.yaml); read `pulumi preview --diff` before `up`")


TRANSITION_RULES: tuple[TransitionRule, ...] = (
    TransitionRule("graph-updated-in-place", "A change patches the DynamoGraphDeployment; it is never replaced.",
                   MANDATORY, check_graph_updated_in_place),
    TransitionRule("model-cache-kept", "A change never replaces or deletes the model cache or its namespace.",
                   MANDATORY, check_model_cache_kept),
    TransitionRule("replacement-certain", "Every changed resource's update-vs-replace is known offline.",
                   ADVISORY, check_replacement_certain),
)


def run_transition_rules(base: Iterable[Mapping], head: Iterable[Mapping]
                         ) -> tuple[list[R.Classification], list[Violation]]:
    """Classify base -> head (resource records) and run every transition rule on the result."""
    classes = R.classify(base, head)
    violations = [Violation(rule.name, f.target, f.message, rule.level)
                  for rule in TRANSITION_RULES for f in rule.check(classes) if isinstance(f, Finding)]
    return classes, sorted(violations)


# ------------------------------------------------------------------ what a stateless pack can check
def check_graph_named_stably(obj: Mapping, ctx) -> Iterator[Result]:
    """This program's graph is named GRAPH_NAME whatever the recipe: a name derived from config renames (and so
    replaces) the graph when that config changes. Graphs not made by this program are left alone."""
    meta = obj.get("metadata") or {}
    if obj.get("kind") != DGD_KIND or (meta.get("labels") or {}).get(PART_OF[0]) != PART_OF[1]:
        return
    if meta.get("name") != GRAPH_NAME:
        yield Finding(target_of(obj), f"named {meta.get('name')!r}, not {GRAPH_NAME!r}: a graph name that follows "
                      "the recipe or other config replaces the graph when that config changes (dynamo#13495)")
