"""`kimi-k3 diff`'s platform upgrade section: when a stack's platform pins differ between base and head, the
steps the upgrade takes (recipes/platform/platform-set.yaml `upgradeOrder`; dynamo-platform only within a minor
or to the adjacent one) and what each replaces, or why it is refused. Read from each side's stack file, so it is
shown even when a side does not render (e.g. a head on a platform no stack may run yet)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

from kimi_k3.config.stack import addon_key, parse_stack_config
from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.errors import UserError
from kimi_k3.k8s import platform_set


def pins(stack: str, text: str) -> dict[str, str]:
    """The add-on versions a stack file's config selects (its set, then any explicit version); raises UserError."""
    with tempfile.TemporaryDirectory(prefix="kimi-k3-diff-pins-") as tmp:
        (Path(tmp) / f"Pulumi.{stack}.yaml").write_text(text)
        stack_file = read_stack_config(stack, Path(tmp))
    cfg = parse_stack_config(stack_file.config, stack_file.secrets)
    chosen = platform_set.set_versions(cfg.platform_set)
    return {addon_key(f): over.version or chosen[addon_key(f)] for f, over in cfg.platform}


def upgrade(before: dict[str, str], after: dict[str, str]) -> Optional[dict[str, Any]]:
    """None when the pins are equal; else {"steps": [{addon, from, to, replaces}]} or {"refused": why}."""
    if before == after:
        return None
    steps = []
    for key in platform_set.upgrade_order():  # each Ready before the next (docs/operating.md)
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if key != "dynamoPlatform" or old is None or new is None:
            steps.append({"addon": key, "from": old, "to": new, "replaces": [f"helm release {key}: {old} -> {new}"]})
            continue
        try:
            hops = platform_set.upgrade_steps(old, new)
        except UserError as err:
            return {"refused": str(err)}
        steps += [{"addon": key, "from": a, "to": b, "replaces": platform_set.step_changes(a, b)} for a, b in hops]
    return {"steps": steps}


def _show(root: Path, sha: Optional[str], stack: str) -> Optional[str]:
    if sha is None:
        path = root / f"Pulumi.{stack}.yaml"
        return path.read_text() if path.is_file() else None
    proc = subprocess.run(["git", "show", f"{sha}:./Pulumi.{stack}.yaml"], cwd=root, capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def platform_upgrades(
    root: Path, base_sha: str, head_sha: Optional[str], stacks: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """{stack: upgrade(...)} for the stacks on both sides whose pins differ (head None = the working tree)."""
    out: dict[str, dict[str, Any]] = {}
    for stack in stacks:
        texts = _show(root, base_sha, stack), _show(root, head_sha, stack)
        if None in texts:
            continue
        try:
            found = upgrade(pins(stack, texts[0]), pins(stack, texts[1]))
        except UserError as err:  # a side whose config does not parse: its render error says more
            found = {"refused": f"platform pins not readable: {err}"}
        if found:
            out[stack] = found
    return out


def markdown_lines(found: Optional[dict[str, Any]]) -> list[str]:
    if not found:
        return []
    if "refused" in found:
        return [f"**Platform upgrade refused**: {found['refused']}", ""]
    lines = ["**Platform upgrade** (one `make up` per step, each Ready before the next; docs/operating.md)", ""]
    for i, step in enumerate(found["steps"], 1):
        lines.append(f"{i}. `{step['addon']}` {step['from']} -> {step['to']}")
        lines += [f"   - {r}" for r in step["replaces"]]
    return [*lines, ""]
