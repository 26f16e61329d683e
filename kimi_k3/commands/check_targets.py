"""What `kimi-k3 check` reads: a stack's render, a render directory, a YAML file, and the previous side's records."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import yaml

from kimi_k3 import shape
from kimi_k3.config.stack_files import project_root, stack_names, unknown_stack_message
from kimi_k3.errors import UserError, did_you_mean, read_text, yaml_error_message
from kimi_k3.shape import records as record_shapes
from policies.rules import base, engine_form


@dataclasses.dataclass(frozen=True)
class Loaded:
    objects: list[dict]
    resources: Optional[list[base.ResourceInfo]]  # None: manifests only
    records: Optional[list[dict]] = None  # resources.json records, where known
    malformed: tuple[base.Violation, ...] = ()  # documents that are not well-formed objects (kimi_k3.shape)


def yaml_objects(text: str, source: str = "input") -> list[dict]:
    """Kubernetes objects of a multi-document YAML stream; `kind: List` documents are flattened.

    A syntax error is a UserError naming `source` and the line."""
    return [obj for _, obj in _flattened(_documents(text, source), source) if isinstance(obj, dict)]


def _documents(text: str, source: str) -> list[Any]:
    try:  # libyaml's parser (same SafeConstructor) is ~5x faster on a stack's manifests: diff parses eight
        return list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except yaml.YAMLError:
        try:  # the pure-Python parser's message, the one users and tests know, for the same error
            return list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise UserError(yaml_error_message(source, exc)) from None


def shape_violation(where: str, obj: Any, problem: Any) -> base.Violation:
    return base.Violation(base.SHAPE_RULE, f"{where} ({base.safe_target(obj)})", str(problem), base.MANDATORY)


def located_objects(docs: Sequence[Any], source: str) -> tuple[list[dict], list[base.Violation]]:
    """(well-formed objects, a violation per shape problem naming the file, document number and JSON path).

    Empty documents are skipped (as kubectl does); a `kind: List` contributes its items."""
    objects: list[dict] = []
    malformed: list[base.Violation] = []
    for where, obj in _flattened(docs, source):
        problems = shape.problems(obj) if not isinstance(obj, _BadItems) else [obj.problem]
        if problems:
            malformed.extend(
                shape_violation(where, obj.doc if isinstance(obj, _BadItems) else obj, p) for p in problems
            )
        else:
            objects.append(obj)
    return objects, malformed


@dataclasses.dataclass(frozen=True)
class _BadItems:
    """A `kind: List` whose items are not a list."""

    doc: Any
    problem: shape.Problem


def _flattened(docs: Sequence[Any], source: str) -> Iterable[tuple[str, Any]]:
    """(where, document) for every document of a stream, a `kind: List`'s items in its place; empty ones skipped
    (as kubectl does). The one reading loop behind yaml_objects and located_objects."""
    for index, doc in enumerate(docs, 1):
        where = f"{source}: document {index}"
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items = doc.get("items")
            if not isinstance(items, list):
                problem = shape.Problem("items", f"{shape.found(items)}; allowed: a list of Kubernetes objects")
                yield where, _BadItems(doc, problem)
                continue
            for i, item in enumerate(items):
                yield f"{where} items[{i}]", item
        else:
            yield where, doc


def _kubernetes_objects(text: str, source: str) -> tuple[list[dict], list[base.Violation]]:
    """The objects of a file given to check (at least one document with apiVersion and kind) and its malformed
    documents."""
    docs = _documents(text, source)
    mappings = [d for d in docs if isinstance(d, dict)]
    if not any(d.get("apiVersion") is not None and d.get("kind") is not None for d in mappings):
        found = (
            f"{len(mappings)} mapping(s) without apiVersion/kind"
            if mappings
            else f"{len(docs) - docs.count(None)} non-mapping document(s)"
            if len(docs) > docs.count(None)
            else "no YAML documents"
        )
        raise UserError(
            f"{source}: no Kubernetes objects ({found}); allowed: YAML documents with apiVersion and "
            "kind, e.g. a Dynamo recipe's deploy.yaml, or a stack name"
        )
    return located_objects(docs, source)


def resource_infos(resources: Iterable[Mapping[str, Any]]) -> list[base.ResourceInfo]:
    return [
        engine_form.resource_info(
            r["type"], r["name"], r.get("inputs") or {}, bool(r.get("protect")), bool(r.get("retainOnDelete"))
        )
        for r in resources
    ]


def _records(doc: Any, t: shape.T, where: str, allowed: str) -> None:
    """A UserError naming the first shape problem of a resources.json / state export (then the count)."""
    problems = shape.check_type(doc, t)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{where}: {problems[0]}{more}; allowed: {allowed}")


def _looks_like_path(target: str) -> bool:
    return "/" in target or target.endswith((".yaml", ".yml", ".json")) or target.startswith(".")


def load(target: str) -> Loaded:
    path = Path(target)
    if path.is_dir():
        manifests = path / "manifests.yaml"
        if not manifests.is_file():
            raise UserError(
                f"{target}: a directory, but not a render directory (no manifests.yaml); allowed: the "
                "output of `kimi-k3 render` (build/STACK), a YAML file or a stack name"
            )
        res_file = path / "resources.json"
        resources = records = None
        if res_file.is_file():
            try:
                doc = json.loads(read_text(res_file, "resources"))
            except json.JSONDecodeError as exc:
                raise UserError(f"{res_file}: not a kimi-k3 render's resources.json ({exc})") from None
            _records(doc, record_shapes.RENDER_RESOURCES, str(res_file), "a kimi-k3 render's resources.json")
            records = doc["resources"]
            try:
                resources = resource_infos(records)
            except (KeyError, TypeError, ValueError) as exc:
                raise UserError(f"{res_file}: not a kimi-k3 render's resources.json ({exc})") from None
        objects, malformed = _kubernetes_objects(read_text(manifests, "manifests"), str(manifests))
        return Loaded(objects, resources, records, tuple(malformed))
    root = project_root()
    if path.is_file():
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        if path.name == f"Pulumi.{stack}.yaml" and stack in stack_names(path.parent):
            raise UserError(
                f"{target}: a stack file, not Kubernetes objects; give the stack name to check its "
                f"render: kimi-k3 check {stack}"
            )
        objects, malformed = _kubernetes_objects(read_text(path, "file"), target)
        return Loaded(objects, None, None, tuple(malformed))
    if _looks_like_path(target) or target not in stack_names(root):
        stacks = ", ".join(stack_names(root))
        if _looks_like_path(target):
            near = did_you_mean(path.name, [p.name for p in path.parent.glob("*")]) if path.parent.is_dir() else ""
            raise UserError(
                f"{target}: no such file or directory{near}; allowed: a YAML file of Kubernetes objects, "
                f"a render directory or a stack ({stacks})"
            )
        raise UserError(unknown_stack_message(target, root) + "; or a YAML file or render directory")
    from kimi_k3.commands.render import (
        render_shared_stack,  # imported here: rendering needs the whole Pulumi program, a file does not
    )

    rendered = render_shared_stack(target)
    objects, malformed = located_objects(rendered.objects, f"{target} (rendered)")
    return Loaded(objects, resource_infos(rendered.resources), list(rendered.resources), tuple(malformed))


def previous_records(path: str) -> list[dict]:
    """Resource records of the deployed side: a render directory's resources.json, or `pulumi stack export`."""
    from kimi_k3.offline.state import records_from_state

    p = Path(path)
    if p.is_dir():
        p = p / "resources.json"
    if not p.is_file():
        raise UserError(
            f"--against {path}: no such file; allowed: a render directory with resources.json or a "
            "`pulumi stack export` file"
        )
    try:
        doc = json.loads(read_text(p, "--against"))
    except json.JSONDecodeError as exc:
        raise UserError(
            f"--against {p}: not JSON ({exc}); allowed: resources.json or `pulumi stack export` output"
        ) from None
    if isinstance(doc, dict) and "deployment" in doc:
        _records(
            doc, record_shapes.STATE_EXPORT, f"--against {p}", "`pulumi stack export` output (deployment.resources)"
        )
        return records_from_state(doc)
    if not isinstance(doc, dict) or "resources" not in doc:
        raise UserError(f"--against {p}: no `resources` (render) or `deployment` (state export) in it")
    _records(doc, record_shapes.RENDER_RESOURCES, f"--against {p}", "a kimi-k3 render's resources.json")
    return doc["resources"]
