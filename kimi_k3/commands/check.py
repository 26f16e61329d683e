"""`kimi-k3 check TARGET...`: the policy pack's rules, offline.

TARGET is a stack name (rendered with kimi_k3.offline.synth.render_stack), a `kimi-k3 render` output directory
(manifests.yaml, optionally resources.json) or any YAML file of Kubernetes objects, such as an upstream
Dynamo recipe. Exit status 1 when a mandatory rule fails, 0 otherwise.

`--against PREVIOUS` also runs the upgrade rules (policies/rules/upgrades.py) on the change from PREVIOUS to the
target: PREVIOUS is a `kimi-k3 render` directory or a `pulumi stack export` file. What Pulumi would do to each
resource is classified by kimi_k3.offline.replacement; a replaced or deleted graph or model cache fails the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import yaml

from kimi_k3 import shape
from kimi_k3.config.stack_files import StackError, project_root, stack_names, unknown_stack_message
from kimi_k3.errors import UserError, did_you_mean, read_text, yaml_error_message
from kimi_k3.shape import records as record_shapes
from policies import rules
from policies.rules import base, upgrades


@dataclasses.dataclass(frozen=True)
class Loaded:
    objects: list[dict]
    resources: Optional[list[base.ResourceInfo]]  # None: manifests only
    records: Optional[list[dict]] = None  # resources.json records, where known
    malformed: tuple[base.Violation, ...] = ()  # documents that are not well-formed objects (kimi_k3.shape)


def yaml_objects(text: str, source: str = "input") -> list[dict]:
    """Kubernetes objects of a multi-document YAML stream; `kind: List` documents are flattened.

    A syntax error is a UserError naming `source` and the line."""
    out: list[dict] = []
    for doc in _documents(text, source):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend(i for i in doc.get("items") or [] if isinstance(i, dict))
        elif isinstance(doc, dict):
            out.append(doc)
    return out


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

    def add(obj: Any, where: str) -> None:
        problems = shape.problems(obj)
        if problems:
            malformed.extend(shape_violation(where, obj, p) for p in problems)
        else:
            objects.append(obj)

    for index, doc in enumerate(docs, 1):
        where = f"{source}: document {index}"
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items = doc.get("items")
            if not isinstance(items, list):
                malformed.append(
                    shape_violation(
                        where,
                        doc,
                        shape.Problem("items", f"{shape.found(items)}; allowed: a list of Kubernetes objects"),
                    )
                )
                continue
            for i, item in enumerate(items):
                add(item, f"{where} items[{i}]")
        else:
            add(doc, where)
    return objects, malformed


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
        base.resource_info(
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
        _records(doc, record_shapes.STATE_EXPORT, f"--against {p}", "`pulumi stack export` output (deployment.resources)")
        return records_from_state(doc)
    if not isinstance(doc, dict) or "resources" not in doc:
        raise UserError(f"--against {p}: no `resources` (render) or `deployment` (state export) in it")
    _records(doc, record_shapes.RENDER_RESOURCES, f"--against {p}", "a kimi-k3 render's resources.json")
    return doc["resources"]


LEVELS = ("advisory", "mandatory", "remediate", "disabled")  # Pulumi's enforcement levels


def _check_value(where: str, value: Any, schema: Mapping[str, Any]) -> None:
    kind = schema.get("type")
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        raise UserError(
            f"{where} = {json.dumps(value)}: allowed: a whole number"
            + (f" >= {schema['minimum']}" if "minimum" in schema else "")
        )
    if kind == "integer" and "minimum" in schema and value < schema["minimum"]:
        raise UserError(f"{where} = {value}: allowed: a whole number >= {schema['minimum']}")


def load_config(path: Optional[str]) -> dict[str, dict[str, Any]]:
    """Policy config in the shape of `pulumi preview --policy-pack-config`: rule -> {key: value} or a level.

    Every rule name, key, level and value is checked (a misspelt rule would otherwise be ignored)."""
    if not path:
        return {}
    try:
        raw = yaml.safe_load(read_text(path, "--config")) or {}
    except yaml.YAMLError as exc:
        raise UserError(yaml_error_message(f"--config {path}", exc)) from None
    if not isinstance(raw, dict):
        raise UserError(f"--config {path}: allowed: a mapping of rule name -> {{key: value}} or an enforcement level")
    names = [r.name for r in rules.RULES]
    out: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        where = f"--config {path}: {name}"
        if name != "all" and name not in rules.RULES_BY_NAME:
            raise UserError(f"{where}: unknown rule{did_you_mean(str(name), names)}; allowed: all, {', '.join(names)}")
        if isinstance(value, str):
            value = {"enforcementLevel": value}
        if not isinstance(value, dict):
            raise UserError(
                f"{where} = {json.dumps(value, default=str)}: allowed: an enforcement level "
                f"({', '.join(LEVELS)}) or a mapping of settings"
            )
        schema = {} if name == "all" else dict(rules.RULES_BY_NAME[name].config_schema)
        for key, v in value.items():
            if key == "enforcementLevel":
                if v not in LEVELS:
                    raise UserError(
                        f"{where}.enforcementLevel = {json.dumps(v, default=str)}: allowed: {', '.join(LEVELS)}"
                    )
            elif key not in schema:
                allowed = ", ".join(["enforcementLevel", *schema])
                raise UserError(f"{where}.{key}: unknown setting{did_you_mean(str(key), schema)}; allowed: {allowed}")
            else:
                _check_value(f"{where}.{key}", v, schema[key])
        out[name] = dict(value)
    return out


def rule_settings(config: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the rules read: each rule's settings, without enforcement levels."""
    return {n: {k: v for k, v in c.items() if k != "enforcementLevel"} for n, c in config.items() if n != "all"}


def level_of(rule: str, default: str, config: Mapping[str, Mapping[str, Any]]) -> str:
    """The enforcement level a policy config gives a rule (its own entry, then `all`, then the rule's)."""
    return config.get(rule, {}).get("enforcementLevel") or config.get("all", {}).get("enforcementLevel") or default


def format_lines(violations: Sequence[base.Violation], skipped: Sequence[base.NotEvaluated]) -> list[str]:
    lines = [
        f"{v.rule}  {v.target}  {v.message}" + ("  [advisory]" if v.level == base.ADVISORY else "") for v in violations
    ]
    lines += [f"{s.rule}  {s.target}  not evaluated: {s.reason}" for s in skipped]
    return lines


def _counts(classes) -> dict[str, int]:
    from kimi_k3.offline.replacement import summary as action_counts

    return action_counts(classes)


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="+", metavar="TARGET")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of lines")
    parser.add_argument("--config", metavar="FILE", help="policy config (JSON/YAML, rule -> {key: value})")
    parser.add_argument(
        "--against",
        metavar="PREVIOUS",
        help="also check the change from PREVIOUS (a render "
        "directory or `pulumi stack export` output) to TARGET: the graph and the cache must not be "
        "replaced",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    settings = rule_settings(config)
    reports = []
    failed = False
    against = getattr(args, "against", None)
    if against and len(args.targets) != 1:
        raise UserError("kimi-k3 check --against compares one TARGET with its previous state; give one TARGET")
    for target in args.targets:
        try:
            loaded = load(target)
        except StackError as exc:
            print(f"kimi-k3 check {target}: {exc}", file=sys.stderr)
            return 2
        violations, skipped = rules.run_all(loaded.objects, loaded.resources, settings)
        violations = [*loaded.malformed, *violations]  # shape problems first, by file and document
        if against:
            if loaded.records is None:
                raise UserError(
                    f"kimi-k3 check --against: {target} has no Pulumi resources (resources.json); "
                    "allowed: a stack or a render directory"
                )
            previous = previous_records(against)
            try:
                classes, changes = upgrades.run_transition_rules(previous, loaded.records)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:  # inputs of a shape no rule expects
                raise UserError(
                    f"--against {against}: its resources cannot be compared with {target}'s "
                    f"({type(exc).__name__}: {str(exc)[:200]}); allowed: resources.json of a kimi-k3 "
                    "render or `pulumi stack export` output of this program"
                ) from None
            violations = sorted(violations + changes)
            counts = ", ".join(f"{n} {a}" for a, n in _counts(classes).items() if n)
            print(f"# {target} against {against}: {counts}", file=sys.stderr)
        levels = {r.name: level_of(r.name, r.level, config) for r in rules.RULES}
        levels.update({r.name: level_of(r.name, r.level, config) for r in upgrades.TRANSITION_RULES})
        violations = [
            dataclasses.replace(v, level=base.ADVISORY if levels[v.rule] == "advisory" else base.MANDATORY)
            for v in violations
            if levels[v.rule] != "disabled"
        ]
        skipped = [s for s in skipped if levels[s.rule] != "disabled"]
        failed |= any(v.level == base.MANDATORY for v in violations)
        reports.append((target, loaded, violations, skipped, levels))
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "target": t,
                        "violations": [dataclasses.asdict(v) for v in vs],
                        "not_evaluated": [dataclasses.asdict(s) for s in ss],
                        "checked": checked(loaded, vs, ss, levels),
                    }
                    for t, loaded, vs, ss, levels in reports
                ],
                indent=2,
            )
        )
    else:
        for target, loaded, violations, skipped, levels in reports:
            if len(reports) > 1:
                print(f"# {target}")
            for line in format_lines(violations, skipped):
                print(line)
            print(summary(target, checked(loaded, violations, skipped, levels)))
    return 1 if failed else 0


def checked(
    loaded: Loaded,
    violations: Sequence[base.Violation],
    skipped: Sequence[base.NotEvaluated],
    levels: Mapping[str, str],
) -> dict[str, Any]:
    """What a check looked at: objects, resources, and per rule whether it passed, failed or was not evaluated."""
    enabled = [r.name for r in rules.RULES if levels[r.name] != "disabled"]
    failing = {v.rule for v in violations}
    not_evaluated = {s.rule for s in skipped} - failing
    return {
        "objects": len(loaded.objects),
        "malformed": len({v.target for v in loaded.malformed}),
        "resources": None if loaded.resources is None else len(loaded.resources),
        "rules": len(enabled),
        "passed": sorted(set(enabled) - failing - not_evaluated),
        "failed": sorted(failing),
        "not_evaluated": sorted(not_evaluated),
        "disabled": sorted(r.name for r in rules.RULES if levels[r.name] == "disabled"),
    }


def summary(target: str, c: Mapping[str, Any]) -> str:
    """The closing line: what was checked, so a clean result says what it covers."""
    kinds = (
        f"{c['objects']} Kubernetes objects"
        + (f" and {c['malformed']} malformed documents" if c["malformed"] else "")
        + ("" if c["resources"] is None else f", {c['resources']} Pulumi resources")
    )
    line = (
        f"{target}: {kinds}; {c['rules']} rules: {len(c['passed'])} passed, {len(c['failed'])} with violations, "
        f"{len(c['not_evaluated'])} not evaluated"
    )
    if c["not_evaluated"]:
        line += f" ({', '.join(c['not_evaluated'])}; reasons above)"
    if c["disabled"]:
        line += f"; disabled by --config: {', '.join(c['disabled'])}"
    if c["resources"] is None:
        line += "; stack rules saw manifests only (no resources.json)"
    return line
