"""diff.py -> diff_compare.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Optional

from kimi_k3 import flags
from kimi_k3.commands import check_targets
from kimi_k3.offline import replacement
from policies import rules
from policies.rules import base as rules_base
from policies.rules import upgrades

ABSENT = object()  # a field on one side only


OPTION_FIELDS = ("parent", "provider", "dependsOn", "protect", "retainOnDelete")


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclasses.dataclass
class Render:
    resources: dict[str, dict]  # urn -> resource; a Kubernetes object's inputs are its manifests.yaml entry
    outputs: dict[str, Any]
    violations: list[rules_base.Violation]
    not_evaluated: list[rules_base.NotEvaluated]
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)  # figures.json: cost/h, TTFT (absent: {})
    records: list[dict] = dataclasses.field(default_factory=list)  # resources.json as rendered (classifier)


def _identity(obj: dict) -> tuple:
    meta = obj.get("metadata") or {}
    return obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name")


def load_render(directory: Path) -> Render:
    objects = check_targets.yaml_objects((directory / "manifests.yaml").read_text())
    doc = json.loads((directory / "resources.json").read_text())
    violations, skipped = rules.run_all(objects, check_targets.resource_infos(doc["resources"]))
    manifests = {_identity(o): o for o in objects}
    resources = {}
    for r in doc["resources"]:
        inputs = r.get("inputs") or {}
        if r["type"].startswith("kubernetes:") and "kind" in inputs:
            inputs = manifests.get(_identity(inputs), inputs)  # the redacted copy: Secret data never shown
        resources[r["urn"]] = {**r, "inputs": inputs}
    figures_file = directory / "figures.json"
    figures = json.loads(figures_file.read_text()) if figures_file.is_file() else {}
    return Render(resources, doc.get("outputs") or {}, sorted(violations), sorted(skipped), figures, doc["resources"])


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
    out = [
        Change(path, b_flags.get(f, ABSENT), a_flags.get(f, ABSENT), flag=f)
        for f in [*b_flags, *(f for f in a_flags if f not in b_flags)]
        if b_flags.get(f, ABSENT) != a_flags.get(f, ABSENT)
    ]
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


def _label(resource: dict) -> dict[str, str]:
    return {"urn": resource["urn"], "type": resource["type"], "name": resource["name"]}


def _violation(v: rules_base.Violation) -> dict[str, str]:
    return dataclasses.asdict(v)


def diff_stack(
    stack: str, base: Optional[Render], head: Optional[Render], errors: dict[str, Optional[str]]
) -> dict[str, Any]:
    """One stack's report. A side is None where the stack is absent or (with its reason in `errors`) failed."""
    out: dict[str, Any] = {"stack": stack}
    for side, render in (("base", base), ("head", head)):
        if errors.get(side):
            out[side] = {"error": errors[side]}
        elif render is not None:
            out[side] = {
                "gpus": render.outputs.get("gpus"),
                "nodes": render.outputs.get("nodes"),
                "resources": len(render.resources),
                "violations": len(render.violations),
                **{k: render.figures.get(k) for k in FIGURES},
            }
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
            changed.append(
                {
                    **_label(h),
                    **_action(actions.get(urn)),
                    "inputs": [c.as_json() for c in inputs],
                    "options": [c.as_json() for c in options],
                }
            )
    out["resources"] = {
        "added": [{**_label(h_res[u]), **_action(actions.get(u))} for u in sorted(set(h_res) - set(b_res))],
        "removed": [{**_label(b_res[u]), **_action(actions.get(u))} for u in sorted(set(b_res) - set(h_res))],
        "changed": changed,
    }
    b_v = set(base.violations) if base else set()
    h_v = set(head.violations) if head else set()
    b_s = set(base.not_evaluated) if base else set()
    h_s = set(head.not_evaluated) if head else set()
    # Upgrade rules read the change itself (policies/rules/upgrades.py): a replaced graph or cache is new by nature.
    upgrade = upgrades.run_transition_rules(list(b_res.values()), list(h_res.values()))[1] if base and head else []
    out["policy"] = {
        "new": [_violation(v) for v in upgrade + sorted(h_v - b_v)],
        "resolved": [_violation(v) for v in sorted(b_v - h_v)],
        "unchanged": [_violation(v) for v in sorted(b_v & h_v)],
        "newly_not_evaluated": [dataclasses.asdict(s) for s in sorted(h_s - b_s)],
        "no_longer_not_evaluated": [dataclasses.asdict(s) for s in sorted(b_s - h_s)],
    }
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
    for action, word in (
        ("replace", "REPLACED"),
        ("update", "updated"),
        ("create", "created"),
        ("delete", "deleted"),
        ("changed", "changed"),
    ):
        names = counts.get(action)
        if names:
            shown = ", ".join(names[:4]) + (f", +{len(names) - 4} more" if len(names) > 4 else "")
            parts.append(f"{len(names)} {word}" + (f" ({shown})" if action in ("replace", "delete") else ""))
    return ", ".join(parts) or "no resource changes"


def summary_line(out: dict) -> str:
    stack, status, res, pol = out["stack"], out["status"], out["resources"], out["policy"]
    if status == "error":
        return f"{stack}: " + "; ".join(
            f"{side} did not render: {out[side]['error']}"
            for side in ("base", "head")
            if out[side] and "error" in out[side]
        )
    what = {"added": "new stack", "removed": "stack removed", "unchanged": "no changes"}.get(
        status
    ) or _actions_summary(res)
    counts = f"violations {_totals(out, 'violations')}"
    if pol["new"] or pol["resolved"]:
        counts += f" ({len(pol['new'])} new, {len(pol['resolved'])} resolved)"
    return (
        f"{stack}: {what}; GPUs {_totals(out, 'gpus')}; nodes {_totals(out, 'nodes')}; "
        f"cost/h {_totals(out, 'costPerHourUsd')} (its nodes {_totals(out, 'usedCostPerHourUsd')}); "
        f"time to first token {_totals(out, 'ttftSeconds')}; {counts}"
    )
