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
from typing import Any, Mapping, Sequence

from kimi_k3.commands.check_config import level_of, load_config, rule_settings
from kimi_k3.commands.check_targets import Loaded, load, previous_records
from kimi_k3.config.stack_files import StackError
from kimi_k3.errors import UserError
from policies import rules
from policies.rules import base, upgrades


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
