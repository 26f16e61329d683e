"""`kimi-k3 diff [--base REF] [--head REF] [STACK...]`: what a change does to each stack, offline.

Renders every stack at both revisions and reports, per stack: resources added / removed / changed with
field-level diffs (Kubernetes objects as in manifests.yaml, Secret data redacted; other resources by their
inputs; resource options separately), GPU and node totals before -> after, and policy results before -> after
(new violations first). The base (and a --head REF) is rendered by its own code: `kimi-k3 render` run by this
venv's python in a temporary git worktree, with the worktree first on sys.path. Without --head, the head is
the working tree. Policy results come from this checkout's rules on both sides, so a change in the results is
a change in the deployment, not in the rules.

Field paths: `spec.components[DecodeWorker].podTemplate.spec.containers[main].args` (list items keyed by
their `name`, else by index); argv lists are compared flag by flag (`--max-num-seqs: 256 -> 128`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

from kimi_k3.commands import diff_upgrade
from kimi_k3.commands.diff_compare import ABSENT, diff_stack, load_render
from kimi_k3.config.stack_files import project_root, stack_names
from kimi_k3.offline.revisions import DiffError, default_base, render_commit, render_dirs, resolve, stacks_at

# ----------------------------------------------------------------------------------------- git + render


# ------------------------------------------------------------------------------------------- one render


# ------------------------------------------------------------------------------------------ field diffs


# ------------------------------------------------------------------------------------------ stack diffs


# ------------------------------------------------------------------------------------------ render cache


# ---------------------------------------------------------------------------------------------- report
def run_diff(root: Path, base_ref: str, head_ref: Optional[str], stacks: Sequence[str]) -> dict[str, Any]:
    base_sha = resolve(root, base_ref)
    head_sha = resolve(root, head_ref) if head_ref else None
    with tempfile.TemporaryDirectory(prefix="kimi-k3-diff-renders-") as tmp:
        present = {
            "base": stacks_at(root, base_sha),
            "head": stacks_at(root, head_sha) if head_sha else set(stack_names(root)),
        }
        wanted = list(stacks) or sorted(present["base"] | present["head"])
        missing = [s for s in wanted if s not in present["base"] | present["head"]]
        if missing:
            raise DiffError(f"no stack {', '.join(missing)} at either revision")
        on = {side: [s for s in wanted if s in present[side]] for side in ("base", "head")}
        with ThreadPoolExecutor(2) as pool:  # the two sides are independent processes: use both cores
            base_job = pool.submit(render_commit, root, base_sha, on["base"], Path(tmp) / "base")
            head_job = (
                pool.submit(render_commit, root, head_sha, on["head"], Path(tmp) / "head")
                if head_sha
                else pool.submit(render_dirs, root, on["head"], Path(tmp) / "head")
            )
            (base_dirs, base_errors), (head_dirs, head_errors) = base_job.result(), head_job.result()
        reports = []
        for stack in wanted:
            base = load_render(base_dirs[stack]) if stack in base_dirs else None
            head = load_render(head_dirs[stack]) if stack in head_dirs else None
            reports.append(
                diff_stack(stack, base, head, {"base": base_errors.get(stack), "head": head_errors.get(stack)})
            )
        for report in reports:  # the platform upgrade's steps, from the stack files (even if a side failed)
            report["platform"] = diff_upgrade.platform_upgrades(root, base_sha, head_sha, [report["stack"]]).get(
                report["stack"]
            )
    return {
        "base": {"ref": base_ref, "commit": base_sha},
        "head": {"ref": head_ref or "working tree", "commit": head_sha},
        "stacks": reports,
    }


def _value(v: Any) -> str:
    return json.dumps(v, sort_keys=True)


def _flag_values(values: Any) -> str:
    if values is ABSENT:
        return "(absent)"
    return ", ".join("(set)" if v is None else v for v in values)


def _change_lines(change: dict) -> list[str]:
    path, before, after = change["path"], change.get("before", ABSENT), change.get("after", ABSENT)
    if "flag" in change:
        flag = change["flag"]
        if before is ABSENT:
            return [f"- `{path}`: `+ {flag} {_flag_values(after)}`".replace(" (set)`", "`")]
        if after is ABSENT:
            return [f"- `{path}`: `- {flag} {_flag_values(before)}`".replace(" (set)`", "`")]
        return [f"- `{path}`: `{flag}: {_flag_values(before)} -> {_flag_values(after)}`"]
    if before is ABSENT:
        return [f"- `{path}`: added `{_value(after)}`"]
    if after is ABSENT:
        return [f"- `{path}`: removed `{_value(before)}`"]
    if isinstance(before, str) and isinstance(after, str) and ("\n" in before or "\n" in after):
        body = difflib.unified_diff(before.splitlines(), after.splitlines(), "before", "after", n=1, lineterm="")
        return [f"- `{path}`:", "  ```diff", *(f"  {line}" for line in body), "  ```"]
    return [f"- `{path}`: `{_value(before)} -> {_value(after)}`"]


_ACTION_TITLE = {
    "replace": "REPLACED",
    "update": "Updated in place",
    "same": "Not applied by pulumi up (ignoreChanges, or no provider diff)",
}


def _verdict(r: dict) -> str:
    """` - replaced: spec.storageClassName forces a new PVC` etc., from the classifier's reasons."""
    bits = list(r.get("reasons") or [])
    if r.get("replacedBy") and not bits:
        bits.append("replaced because of " + ", ".join(f"`{p}`" for p in r["replacedBy"]))
    if r.get("blocked"):
        bits.append("protected: `pulumi up` stops before this")
    if r.get("certain") is False:
        bits.append("update or replace: `pulumi preview` decides (provider rules not modelled)")
    return (" - " + "; ".join(bits)) if bits else ""


def _violation_line(v: dict) -> str:
    return f"- `{v['rule']}` ({v['level']}) `{v['target']}`: {v['message']}"


def markdown(report: dict[str, Any]) -> str:
    base, head = report["base"], report["head"]
    head_label = f"`{head['ref']}` ({head['commit'][:12]})" if head["commit"] else "working tree"
    lines = [f"## kimi-k3 diff: `{base['ref']}` ({base['commit'][:12]}) -> {head_label}", ""]
    lines += [f"- {s['summary']}" for s in report["stacks"]]
    lines += ["", "Policy results: this checkout's rules (policies/rules/) on both sides."]
    for s in report["stacks"]:
        if s["status"] == "unchanged":
            continue
        lines += ["", f"### {s['stack']}", "", *diff_upgrade.markdown_lines(s.get("platform"))]
        pol = s["policy"]
        for title, items in (("New violations", pol["new"]), ("Resolved violations", pol["resolved"])):
            if items:
                lines += [f"**{title}**", "", *map(_violation_line, items), ""]
        for title, items in (
            ("Newly not evaluated", pol["newly_not_evaluated"]),
            ("No longer not evaluated", pol["no_longer_not_evaluated"]),
        ):
            if items:
                lines += [f"**{title}**", "", *(f"- `{i['rule']}` `{i['target']}`: {i['reason']}" for i in items), ""]
        if pol["unchanged"]:
            lines += [f"Unchanged violations: {len(pol['unchanged'])}", ""]
        res = s["resources"]
        for title, items in (("Added", res["added"]), ("Removed", res["removed"])):
            if items:
                lines += [f"**{title}**", "", *(f"- `{r['type']}` `{r['name']}`{_verdict(r)}" for r in items), ""]
        for r in sorted(res["changed"], key=lambda r: r.get("action") != "replace"):  # replacements first
            lines += [
                f"**{_ACTION_TITLE.get(r.get('action'), 'Changed')}** `{r['type']}` `{r['name']}`{_verdict(r)}",
                "",
            ]
            for change in r["inputs"]:
                lines += _change_lines(change)
            for change in r["options"]:
                lines += _change_lines({**change, "path": f"(option) {change['path']}"})
            lines.append("")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"  # one blank line between blocks


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("diff", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stacks", nargs="*", metavar="STACK", help="default: every stack at either revision")
    parser.add_argument("--base", help="base revision (default origin/main, else main)")
    parser.add_argument("--head", help="head revision (default the working tree)")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    root = project_root()
    try:
        report = run_diff(root, args.base or default_base(root), args.head, args.stacks)
    except DiffError as err:
        print(f"kimi-k3 diff: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(report, indent=2, sort_keys=True) + "\n" if args.format == "json" else markdown(report))
    return 0
