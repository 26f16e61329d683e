"""Renders shared by the whole test session: each distinct (stack, config) variant runs the program once.

A render under Pulumi's mocks costs ~1 s; the same variant is asked for by many tests (the stacks as committed,
and the same overrides across the bad-input tables, AWS, schema and autoscaling tests). The cache is keyed by the
variant's canonical config (every `kimi-k3:*` key and value as the engine would pass them, sorted, and which keys
are secret), so a new stack file or a new override costs one render, whoever asks for it first. Each caller gets
its own copy of the records (a test may edit what it is given); the frozen Blueprint is shared."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Mapping

from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.data import copy_plain
from kimi_k3.offline.synth import Rendered, RenderError, render_config

_RENDERS: dict[tuple, Rendered | RenderError] = {}
# A test that patches code (monkeypatch) renders something its config does not say: conftest turns sharing off.
bypass = {"on": False}
calls = {"renders": 0, "hits": 0}  # what the cache did this session (tests/unit/test_render_cache_t26.py reads it)


def variant_key(stack: str, config: Mapping[str, str], secrets, root: Path) -> tuple:
    """The variant's canonical config: Pulumi hands the program an unordered map, so order never matters."""
    return stack, str(Path(root).resolve()), tuple(sorted(config.items())), tuple(sorted(secrets))


def render_once(stack: str, config: Mapping[str, str], secrets, root: Path) -> Rendered:
    """render_config's result for this variant, rendered on first use; a refused variant raises its RenderError
    again (a fresh one, same message and registered urns)."""
    if bypass["on"]:
        return render_config(stack, dict(config), set(secrets), root)
    key = variant_key(stack, config, secrets, root)
    hit = _RENDERS.get(key)
    if hit is None:
        calls["renders"] += 1
        collecting = gc.isenabled()
        gc.disable()  # the full pass below collects this render's garbage: no collections during it
        try:
            hit = render_config(stack, dict(config), set(secrets), root)
        except RenderError as err:
            hit = err
        finally:
            if collecting:
                gc.enable()
        _RENDERS[key] = hit
        # Kept for the session: frozen (after this render's own garbage is gone), full collections stop walking it.
        gc.collect()
        gc.freeze()
    else:
        calls["hits"] += 1
    if isinstance(hit, RenderError):
        raise RenderError(str(hit), list(hit.registered))
    return Rendered(
        stack=hit.stack,
        resources=copy_plain(hit.resources),
        objects=copy_plain(hit.objects),
        outputs=copy_plain(hit.outputs),
        assumed=list(hit.assumed),
        blueprint=hit.blueprint,
    )


def render_stack_once(stack: str, root: Path) -> Rendered:
    """render_stack (the stack file as committed, its assumed per-user values listed) through the cache."""
    stack_file = read_stack_config(stack, root)
    rendered = render_once(stack, stack_file.config, stack_file.secrets, root)
    rendered.assumed = stack_file.assumed
    return rendered


def command_stub(bin_: Path, calls: Path):
    """A maker of fake commands in `bin_` (put first on PATH): each logs `name args` to `calls`, runs `body`, exits 0."""

    def stub(name: str, body: str = "") -> None:
        (bin_ / name).write_text(f'#!/bin/bash\necho "{name} $*" >> {calls}\n{body}\nexit 0\n')
        (bin_ / name).chmod(0o755)

    return stub


def pod_specs(objects):
    """(label, pod spec) of every pod the rendered objects start: DGD components and workload templates."""
    for o in objects:
        if o["kind"] == "DynamoGraphDeployment":
            for c in o["spec"]["components"]:
                yield f"{c['name']} (DGD)", c["podTemplate"]["spec"]
        elif o["kind"] in ("Job", "DaemonSet", "Deployment", "StatefulSet"):
            yield f"{o['metadata']['name']} ({o['kind']})", o["spec"]["template"]["spec"]


def sweep(cases, fast) -> list:
    """Parameters of a table-driven test: the cases named in `fast` (or the first `fast`) run in `make test`, the
    rest are marked `slow` (`make test-slow`; CI runs both lanes): a sweep of CLI runs stays out of the unit lane."""
    import pytest

    cases = list(cases)
    keep = set(cases[:fast]) if isinstance(fast, int) else set(fast)
    assert keep <= set(cases), sorted(keep - set(cases))
    return [c if c in keep else pytest.param(c, marks=pytest.mark.slow) for c in cases]
