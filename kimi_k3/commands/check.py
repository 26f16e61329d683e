"""`kimi-k3 check TARGET...`: the policy pack's rules, offline.

TARGET is a stack name (rendered with kimi_k3.commands.render.render_stack), a `kimi-k3 render` output directory
(manifests.yaml, optionally resources.json) or any YAML file of Kubernetes objects, such as an upstream
Dynamo recipe. Exit status 1 when a mandatory rule fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import yaml

from policies import rules

from kimi_k3.stacks import StackError


@dataclasses.dataclass(frozen=True)
class Loaded:
    objects: list[dict]
    resources: Optional[list[rules.ResourceInfo]]  # None: manifests only


def yaml_objects(text: str) -> list[dict]:
    """Kubernetes objects of a multi-document YAML stream; `kind: List` documents are flattened."""
    out: list[dict] = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        elif isinstance(doc, dict):
            out.append(doc)
    return out


def resource_infos(resources: Iterable[Mapping[str, Any]]) -> list[rules.ResourceInfo]:
    return [rules.resource_info(r["type"], r["name"], r.get("inputs") or {}, bool(r.get("protect")),
                                bool(r.get("retainOnDelete"))) for r in resources]


def load(target: str) -> Loaded:
    path = Path(target)
    if path.is_dir():
        manifests = path / "manifests.yaml"
        if not manifests.is_file():
            raise FileNotFoundError(f"{target}: a render directory needs manifests.yaml")
        res_file = path / "resources.json"
        resources = resource_infos(json.loads(res_file.read_text())["resources"]) if res_file.is_file() else None
        return Loaded(yaml_objects(manifests.read_text()), resources)
    if path.is_file():
        return Loaded(yaml_objects(path.read_text()), None)
    from .render import render_stack  # imported here: rendering needs the whole Pulumi program, a file does not

    rendered = render_stack(target)
    return Loaded(list(rendered.objects), resource_infos(rendered.resources))


def load_config(path: Optional[str]) -> dict[str, dict[str, Any]]:
    """Policy config in the shape of `pulumi preview --policy-pack-config`: rule -> {key: value}."""
    if not path:
        return {}
    raw = yaml.safe_load(Path(path).read_text()) or {}
    return {name: {k: v for k, v in value.items() if k != "enforcementLevel"}
            for name, value in raw.items() if isinstance(value, dict)}


def format_lines(violations: Sequence[rules.Violation], skipped: Sequence[rules.NotEvaluated]) -> list[str]:
    lines = [f"{v.rule}  {v.target}  {v.message}" + ("  [advisory]" if v.level == rules.ADVISORY else "")
             for v in violations]
    lines += [f"{s.rule}  {s.target}  not evaluated: {s.reason}" for s in skipped]
    return lines


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="+", metavar="TARGET")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of lines")
    parser.add_argument("--config", metavar="FILE", help="policy config (JSON/YAML, rule -> {key: value})")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    reports = []
    failed = False
    for target in args.targets:
        try:
            loaded = load(target)
        except (FileNotFoundError, yaml.YAMLError, json.JSONDecodeError, StackError) as exc:
            print(f"kimi-k3 check: {exc}", file=sys.stderr)
            return 2
        violations, skipped = rules.run_all(loaded.objects, loaded.resources, config)
        failed |= any(v.level == rules.MANDATORY for v in violations)
        reports.append((target, violations, skipped))
    if args.json:
        print(json.dumps([{"target": t, "violations": [dataclasses.asdict(v) for v in vs],
                           "not_evaluated": [dataclasses.asdict(s) for s in ss]} for t, vs, ss in reports], indent=2))
    else:
        for target, violations, skipped in reports:
            if len(reports) > 1:
                print(f"# {target}")
            for line in format_lines(violations, skipped):
                print(line)
    return 1 if failed else 0
