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
import contextlib
import dataclasses
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from policies import rules

from kimi_k3 import flags, replacement

from . import check
from kimi_k3.stacks import project_root, stack_names

ABSENT = object()  # a field on one side only
OPTION_FIELDS = ("parent", "provider", "dependsOn", "protect", "retainOnDelete")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


class DiffError(Exception):
    """A revision that git cannot resolve, or a stack that exists on neither side."""


# ----------------------------------------------------------------------------------------- git + render
def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DiffError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def resolve(root: Path, ref: str) -> str:
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except DiffError:
        raise DiffError(f"unknown revision {ref!r} (in CI, fetch it: actions/checkout with fetch-depth: 0)") from None


def default_base(root: Path) -> str:
    for ref in ("origin/main", "main"):
        with contextlib.suppress(DiffError):
            resolve(root, ref)
            return ref
    raise DiffError("neither origin/main nor main exists; pass --base REF")


@contextlib.contextmanager
def worktree(root: Path, sha: str) -> Iterator[Path]:
    """The project directory inside a temporary detached worktree of `sha`, removed afterwards."""
    prefix = _git(root, "rev-parse", "--show-prefix")  # the project may sit below the repository root
    tmp = Path(tempfile.mkdtemp(prefix="kimi-k3-diff-"))
    tree = tmp / "tree"
    _git(root, "worktree", "add", "--detach", "--quiet", str(tree), sha)
    try:
        yield tree / prefix
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def cli_module(project: Path) -> str:
    """The CLI's module at that revision (commands moved from kimi_k3/cli.py to kimi_k3/commands/)."""
    return "kimi_k3" if (project / "kimi_k3" / "__main__.py").is_file() else "kimi_k3.cli"


def render_dirs(project: Path, stacks: Sequence[str], out: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Render `stacks` with the code at `project`: ({stack: render dir}, {stack: why it did not render})."""
    # Worktree first on sys.path: its kimi_k3/components/policies win over this venv's editable install.
    env = {**os.environ, "PYTHONPATH": str(project), "PYTHONDONTWRITEBYTECODE": "1"}
    done: dict[str, Path] = {}
    errors: dict[str, str] = {}
    pending = [s for s in stacks if (project / f"Pulumi.{s}.yaml").is_file()]
    while pending:  # one process for all stacks (imports dominate); `render` stops at the first failure
        target = out / pending[0] if len(pending) == 1 else out  # `render --out` is the dir itself for one stack
        proc = subprocess.run([sys.executable, "-m", cli_module(project), "render", *pending, "--out", str(target)],
                              cwd=project, env=env, capture_output=True, text=True)
        rendered = [s for s in pending if (out / s / "manifests.yaml").is_file()]
        done.update((s, out / s) for s in rendered)
        rest = [s for s in pending if s not in rendered]
        if rest and proc.returncode == 0:
            raise DiffError(f"render at {project} exited 0 without writing {', '.join(rest)}")
        if rest:
            lines = (proc.stderr or proc.stdout).strip().splitlines() or [f"exit status {proc.returncode}"]
            errors[rest[0]] = lines[-1]
        pending = rest[1:]
    return done, errors


# ------------------------------------------------------------------------------------------- one render
@dataclasses.dataclass
class Render:
    resources: dict[str, dict]  # urn -> resource; a Kubernetes object's inputs are its manifests.yaml entry
    outputs: dict[str, Any]
    violations: list[rules.Violation]
    not_evaluated: list[rules.NotEvaluated]
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)  # figures.json: cost/h, TTFT (absent: {})
    records: list[dict] = dataclasses.field(default_factory=list)      # resources.json as rendered (classifier)


def _identity(obj: dict) -> tuple:
    meta = obj.get("metadata") or {}
    return obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name")


def load_render(directory: Path) -> Render:
    objects = check.yaml_objects((directory / "manifests.yaml").read_text())
    doc = json.loads((directory / "resources.json").read_text())
    violations, skipped = rules.run_all(objects, check.resource_infos(doc["resources"]))
    manifests = {_identity(o): o for o in objects}
    resources = {}
    for r in doc["resources"]:
        inputs = r.get("inputs") or {}
        if r["type"].startswith("kubernetes:") and "kind" in inputs:
            inputs = manifests.get(_identity(inputs), inputs)  # the redacted copy: Secret data never shown
        resources[r["urn"]] = {**r, "inputs": inputs}
    figures_file = directory / "figures.json"
    figures = json.loads(figures_file.read_text()) if figures_file.is_file() else {}
    return Render(resources, doc.get("outputs") or {}, sorted(violations), sorted(skipped), figures,
                  doc["resources"])


# ------------------------------------------------------------------------------------------ field diffs
@dataclasses.dataclass(frozen=True)
class Change:
    path: str
    before: Any = ABSENT
    after: Any = ABSENT
    flag: Optional[str] = None  # an argv flag whose values changed (before/after: its value list)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.flag:
            out["flag"] = self.flag
        out.update({k: v for k, v in (("before", self.before), ("after", self.after)) if v is not ABSENT})
        return out


def _join(path: str, key: str) -> str:
    if _IDENT.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _named(items: list) -> bool:
    names = [i.get("name") for i in items if isinstance(i, dict)]
    return len(names) == len(items) and all(isinstance(n, str) for n in names) and len(set(names)) == len(names)


def _is_argv(items: list) -> bool:
    return all(isinstance(i, str) for i in items) and any(i.startswith("--") for i in items)


def _argv_parts(tokens: list[str]) -> tuple[dict[str, list[Optional[str]]], list[str]]:
    """({flag: its values in order, None for a bare flag}, positional tokens), via kimi_k3.flags."""
    names = list(dict.fromkeys(t.split("=", 1)[0] for t in tokens if t.startswith("--")))
    values = {n: flags.flag_values(tokens, n) for n in names}
    taken = set()
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            taken.add(i)
            if "=" not in tok and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                taken.add(i + 1)
    return values, [t for i, t in enumerate(tokens) if i not in taken]


def _diff_argv(path: str, before: list[str], after: list[str]) -> list[Change]:
    (b_flags, b_pos), (a_flags, a_pos) = _argv_parts(before), _argv_parts(after)
    out = [Change(path, b_flags.get(f, ABSENT), a_flags.get(f, ABSENT), flag=f)
           for f in [*b_flags, *(f for f in a_flags if f not in b_flags)] if b_flags.get(f, ABSENT) != a_flags.get(f, ABSENT)]
    if b_pos != a_pos:
        out.append(Change(path + " (positional)", b_pos, a_pos))
    if not out:  # same flags and values, another order
        out.append(Change(path, before, after))
    return out


def diff_values(before: Any, after: Any, path: str = "") -> list[Change]:
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[Change] = []
        for key in sorted(set(before) | set(after)):
            out += diff_values(before.get(key, ABSENT), after.get(key, ABSENT), _join(path, str(key)))
        return out
    if isinstance(before, list) and isinstance(after, list):
        if before and after and _named(before) and _named(after):
            b, a = {i["name"]: i for i in before}, {i["name"]: i for i in after}
            keys = [*b, *(k for k in a if k not in b)]
            return [c for k in keys for c in diff_values(b.get(k, ABSENT), a.get(k, ABSENT), f"{path}[{k}]")]
        if _is_argv(before) or _is_argv(after):
            return _diff_argv(path, before, after)
        if all(not isinstance(i, (dict, list)) for i in before + after):
            removed = [i for i in before if i not in after]
            added = [i for i in after if i not in before]
            if removed or added:  # membership lists (dependsOn, label values): show what came and went
                return [*(Change(path, i) for i in removed), *(Change(path, after=i) for i in added)]
            return [Change(path, before, after)]
        common = min(len(before), len(after))
        out = [c for i in range(common) for c in diff_values(before[i], after[i], f"{path}[{i}]")]
        out += [Change(f"{path}[{i}]", before[i]) for i in range(common, len(before))]
        out += [Change(f"{path}[{i}]", after=after[i]) for i in range(common, len(after))]
        return out
    return [Change(path, before, after)]


# ------------------------------------------------------------------------------------------ stack diffs
def _label(resource: dict) -> dict[str, str]:
    return {"urn": resource["urn"], "type": resource["type"], "name": resource["name"]}


def _violation(v: rules.Violation) -> dict[str, str]:
    return dataclasses.asdict(v)


def diff_stack(stack: str, base: Optional[Render], head: Optional[Render],
               errors: dict[str, Optional[str]]) -> dict[str, Any]:
    """One stack's report. A side is None where the stack is absent or (with its reason in `errors`) failed."""
    out: dict[str, Any] = {"stack": stack}
    for side, render in (("base", base), ("head", head)):
        if errors.get(side):
            out[side] = {"error": errors[side]}
        elif render is not None:
            out[side] = {"gpus": render.outputs.get("gpus"), "nodes": render.outputs.get("nodes"),
                         "resources": len(render.resources), "violations": len(render.violations),
                         **{k: render.figures.get(k) for k in FIGURES}}
        else:
            out[side] = None
    b_res = base.resources if base else {}
    h_res = head.resources if head else {}
    # What `pulumi up` would do to each resource (create/update/replace/delete), by the one classifier.
    actions = {c.urn: c for c in replacement.classify(base.records if base else [], head.records if head else [])}
    changed = []
    for urn in sorted(set(b_res) & set(h_res)):
        b, h = b_res[urn], h_res[urn]
        inputs = diff_values(b["inputs"], h["inputs"])
        options = diff_values({k: b.get(k) for k in OPTION_FIELDS}, {k: h.get(k) for k in OPTION_FIELDS})
        if inputs or options:
            changed.append({**_label(h), **_action(actions.get(urn)), "inputs": [c.as_json() for c in inputs],
                            "options": [c.as_json() for c in options]})
    out["resources"] = {"added": [{**_label(h_res[u]), **_action(actions.get(u))} for u in sorted(set(h_res) - set(b_res))],
                        "removed": [{**_label(b_res[u]), **_action(actions.get(u))} for u in sorted(set(b_res) - set(h_res))],
                        "changed": changed}
    b_v = set(base.violations) if base else set()
    h_v = set(head.violations) if head else set()
    b_s = set(base.not_evaluated) if base else set()
    h_s = set(head.not_evaluated) if head else set()
    # Upgrade rules read the change itself (policies/rules/upgrades.py): a replaced graph or cache is new by nature.
    upgrade = rules.run_transition_rules(list(b_res.values()), list(h_res.values()))[1] if base and head else []
    out["policy"] = {"new": [_violation(v) for v in upgrade + sorted(h_v - b_v)],
                     "resolved": [_violation(v) for v in sorted(b_v - h_v)],
                     "unchanged": [_violation(v) for v in sorted(b_v & h_v)],
                     "newly_not_evaluated": [dataclasses.asdict(s) for s in sorted(h_s - b_s)],
                     "no_longer_not_evaluated": [dataclasses.asdict(s) for s in sorted(b_s - h_s)]}
    touched = any(out["resources"].values()) or any(v for k, v in out["policy"].items() if k != "unchanged")
    if any(errors.values()):
        out["status"] = "error"
    elif base is None or head is None:
        out["status"] = "added" if base is None else "removed"
    else:
        out["status"] = "changed" if touched else "unchanged"
    out["summary"] = summary_line(out)
    return out


FIGURES = ("costPerHourUsd", "usedCostPerHourUsd", "ttftSeconds")


def _action(c: Optional[replacement.Classification]) -> dict[str, Any]:
    """The classifier's verdict for one resource, as the report shows it."""
    if c is None:
        return {}
    out: dict[str, Any] = {"action": c.action}
    if c.replace_paths:
        out["replacedBy"] = list(c.replace_paths)
    if c.reasons:
        out["reasons"] = list(c.reasons)
    if c.blocked:
        out["blocked"] = True  # protected: `pulumi up` stops before replacing or deleting it
    if not c.certain:
        out["certain"] = False  # provider rules for this type not modelled: `pulumi preview` decides
    return out


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith("Usd"):
        return f"${value:,.2f}"
    if key == "ttftSeconds":
        h, rest = divmod(int(value), 3600)
        return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"
    return str(value)


def _totals(out: dict, key: str) -> str:
    b, h = ("-" if not out[s] or out[s].get(key) is None else _fmt(key, out[s][key]) for s in ("base", "head"))
    return h if b == h else f"{b} -> {h}"


def _actions_summary(res: dict) -> str:
    """`2 updated, 1 REPLACED (DynamoGraphDeployment kimi-k3-...)`: what `pulumi up` would do, replacements named."""
    counts: dict[str, list[str]] = {}
    # Replacements of what users fear losing first: the serving graph and the model cache.
    key = lambda r: (not r["type"].endswith((":DynamoGraphDeployment", ":PersistentVolumeClaim")), r["name"])  # noqa: E731
    for r in sorted(res["changed"] + res["added"] + res["removed"], key=key):
        counts.setdefault(r.get("action", "changed"), []).append(f"{r['type'].rsplit(':', 1)[-1]} {r['name']}")
    parts = []
    for action, word in (("replace", "REPLACED"), ("update", "updated"), ("create", "created"), ("delete", "deleted"),
                         ("changed", "changed")):
        names = counts.get(action)
        if names:
            shown = ", ".join(names[:4]) + (f", +{len(names) - 4} more" if len(names) > 4 else "")
            parts.append(f"{len(names)} {word}" + (f" ({shown})" if action in ("replace", "delete") else ""))
    return ", ".join(parts) or "no resource changes"


def summary_line(out: dict) -> str:
    stack, status, res, pol = out["stack"], out["status"], out["resources"], out["policy"]
    if status == "error":
        return f"{stack}: " + "; ".join(f"{side} did not render: {out[side]['error']}"
                                        for side in ("base", "head") if out[side] and "error" in out[side])
    what = {"added": "new stack", "removed": "stack removed", "unchanged": "no changes"}.get(status) or \
        _actions_summary(res)
    counts = f"violations {_totals(out, 'violations')}"
    if pol["new"] or pol["resolved"]:
        counts += f" ({len(pol['new'])} new, {len(pol['resolved'])} resolved)"
    return (f"{stack}: {what}; GPUs {_totals(out, 'gpus')}; nodes {_totals(out, 'nodes')}; "
            f"cost/h {_totals(out, 'costPerHourUsd')} (its nodes {_totals(out, 'usedCostPerHourUsd')}); "
            f"time to first token {_totals(out, 'ttftSeconds')}; {counts}")


# ------------------------------------------------------------------------------------------ render cache
def environment_fingerprint() -> str:
    """Python and every installed distribution's version: a render depends on them as much as on the code."""
    from importlib import metadata
    dists = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    return sys.version + "\n" + "\n".join(dists)


def cache_dir(root: Path, sha: str) -> Path:
    """Where renders of commit `sha` are kept: keyed by the project's tree (code + stacks + recipes) and the
    environment, so a diff against the same base re-renders nothing."""
    prefix = _git(root, "rev-parse", "--show-prefix")
    tree = _git(root, "rev-parse", f"{sha}:{prefix}")
    key = hashlib.sha256(f"{tree}\n{environment_fingerprint()}".encode()).hexdigest()[:20]
    return root / "build" / "render-cache" / key


def stacks_at(root: Path, sha: str) -> set[str]:
    """Stack names at commit `sha`, read from git (no checkout needed)."""
    prefix = _git(root, "rev-parse", "--show-prefix")
    names = _git(root, "ls-tree", "--name-only", f"{sha}:{prefix}").splitlines()
    return {n[len("Pulumi."):-len(".yaml")] for n in names if n.startswith("Pulumi.") and n.endswith(".yaml")
            and n != "Pulumi.yaml"}


def render_commit(root: Path, sha: str, stacks: Sequence[str], out: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """render_dirs for a commit, through the render cache (a checkout is made only for what is not cached)."""
    cache = cache_dir(root, sha)
    done = {s: cache / s for s in stacks if (cache / s / "resources.json").is_file()}
    todo = [s for s in stacks if s not in done]
    errors: dict[str, str] = {}
    if todo:
        with worktree(root, sha) as project:
            rendered, errors = render_dirs(project, todo, out)
        for stack, directory in rendered.items():
            staging = Path(tempfile.mkdtemp(prefix=f".{stack}-", dir=_mkdir(cache)))
            shutil.copytree(directory, staging, dirs_exist_ok=True)
            with contextlib.suppress(OSError):  # another diff stored it first: theirs is the same bytes
                staging.rename(cache / stack)
            shutil.rmtree(staging, ignore_errors=True)
            done[stack] = cache / stack if (cache / stack).is_dir() else directory
    return done, errors


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------------------------------------- report
def run_diff(root: Path, base_ref: str, head_ref: Optional[str], stacks: Sequence[str]) -> dict[str, Any]:
    base_sha = resolve(root, base_ref)
    head_sha = resolve(root, head_ref) if head_ref else None
    with tempfile.TemporaryDirectory(prefix="kimi-k3-diff-renders-") as tmp:
        present = {"base": stacks_at(root, base_sha),
                   "head": stacks_at(root, head_sha) if head_sha else set(stack_names(root))}
        wanted = list(stacks) or sorted(present["base"] | present["head"])
        missing = [s for s in wanted if s not in present["base"] | present["head"]]
        if missing:
            raise DiffError(f"no stack {', '.join(missing)} at either revision")
        on = {side: [s for s in wanted if s in present[side]] for side in ("base", "head")}
        with ThreadPoolExecutor(2) as pool:  # the two sides are independent processes: use both cores
            base_job = pool.submit(render_commit, root, base_sha, on["base"], Path(tmp) / "base")
            head_job = (pool.submit(render_commit, root, head_sha, on["head"], Path(tmp) / "head") if head_sha
                        else pool.submit(render_dirs, root, on["head"], Path(tmp) / "head"))
            (base_dirs, base_errors), (head_dirs, head_errors) = base_job.result(), head_job.result()
        reports = []
        for stack in wanted:
            base = load_render(base_dirs[stack]) if stack in base_dirs else None
            head = load_render(head_dirs[stack]) if stack in head_dirs else None
            reports.append(diff_stack(stack, base, head, {"base": base_errors.get(stack),
                                                          "head": head_errors.get(stack)}))
    return {"base": {"ref": base_ref, "commit": base_sha},
            "head": {"ref": head_ref or "working tree", "commit": head_sha},
            "stacks": reports}


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


_ACTION_TITLE = {"replace": "REPLACED", "update": "Updated in place",
                 "same": "Not applied by pulumi up (ignoreChanges, or no provider diff)"}


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
        lines += ["", f"### {s['stack']}", ""]
        pol = s["policy"]
        for title, items in (("New violations", pol["new"]), ("Resolved violations", pol["resolved"])):
            if items:
                lines += [f"**{title}**", "", *map(_violation_line, items), ""]
        for title, items in (("Newly not evaluated", pol["newly_not_evaluated"]),
                             ("No longer not evaluated", pol["no_longer_not_evaluated"])):
            if items:
                lines += [f"**{title}**", "", *(f"- `{i['rule']}` `{i['target']}`: {i['reason']}" for i in items), ""]
        if pol["unchanged"]:
            lines += [f"Unchanged violations: {len(pol['unchanged'])}", ""]
        res = s["resources"]
        for title, items in (("Added", res["added"]), ("Removed", res["removed"])):
            if items:
                lines += [f"**{title}**", "", *(f"- `{r['type']}` `{r['name']}`{_verdict(r)}" for r in items), ""]
        for r in sorted(res["changed"], key=lambda r: r.get("action") != "replace"):  # replacements first
            lines += [f"**{_ACTION_TITLE.get(r.get('action'), 'Changed')}** `{r['type']}` `{r['name']}`{_verdict(r)}", ""]
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
