"""Offline synth: run the real `__main__.py` in-process under Pulumi's mock engine.

Faithful: every resource the program registers, with its inputs, parent, provider, protect/retain options and
dependencies (explicit `depends_on` and those implied by inputs, as the engine records them). Placeholders:
whatever a cloud or cluster would compute (resource ids are `<name>-id`, outputs echo inputs) and secret
values, which render never sees (stack-file secrets are encrypted; each one becomes `[secret]`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from kimi_k3.atomic import write_text
from kimi_k3.blueprint import Blueprint
from kimi_k3.config.stack_files import (
    StackError,
    StackFile,
    project_root,
    read_stack_config,
    stack_name_problem,
)
from kimi_k3.errors import UserError, check_writable_dir
from kimi_k3.offline.synth import Rendered, render_stack


def render_shared_stack(stack: str, root: Path | None = None, stack_file: StackFile | None = None) -> Rendered:
    """render_stack for the commands CI runs without make: the shared file's own mistakes refused, as make does."""
    from kimi_k3.commands.shared_values import refuse_literal_secrets, refuse_per_user_values

    rendered = render_stack(stack, root, stack_file)  # its config errors first
    refuse_per_user_values(stack, root or project_root())
    refuse_literal_secrets(stack, rendered.objects)  # before anything is written
    return rendered


def blueprint_of(rendered: Rendered) -> Blueprint:
    """The Blueprint the program itself resolved while it rendered: the figures read that, never a second one."""
    if not isinstance(rendered.blueprint, Blueprint):
        raise UserError(f"{rendered.stack}: the program left no `blueprint` (__main__.py resolves one); a kimi-k3 bug")
    return rendered.blueprint


# ------------------------------------------------------------------------------------------- the command
RENDER_HELP = """\
Run the real __main__.py in-process under Pulumi's mock engine with Pulumi.STACK.yaml and write
DIR/manifests.yaml (every Kubernetes object, deterministic order, Secret data redacted) and
DIR/resources.json (every registered resource: urn, type, name, parent, provider, dependsOn, protect,
retainOnDelete, inputs; plus the stack outputs).
Faithful: resource inputs, options and dependencies. Placeholders: computed cloud/cluster outputs
(ids are NAME-id; in eks mode also the EKS endpoint/CA/cluster security group, launch template version,
FSx DNS/mount names and provider-generated names, see COMPUTED_PLACEHOLDERS/AUTONAMED in kimi_k3/offline/synth.py)
and secret values (shown as [secret]; render never decrypts them).

Then prints the critical path to the serving graph being Ready, computed from resources.json (dependsOn and
provider edges) with duration estimates from recipes/facts/durations.yaml (sources in its comments) overridden by
kimi-k3:estimates; the download and the workers' weight load come from the planner. --no-critical-path skips it."""


def run(args: argparse.Namespace) -> int:
    outs = {
        stack: Path(args.out) if args.out and len(args.stacks) == 1 else Path(args.out or "build") / stack
        for stack in args.stacks
    }
    for out in outs.values():  # before the first render: a bad --out fails fast and leaves nothing behind
        check_writable_dir(out, "--out")
    stack_files = {}  # each stack file read once: the render resolves its Blueprint from this
    for stack in args.stacks:  # every name checked before any is rendered or written
        problem = stack_name_problem(stack)
        try:
            if problem:
                raise StackError(problem)
            stack_files[stack] = read_stack_config(stack)
        except StackError as err:
            print(f"kimi-k3 render {stack}: {err}", file=sys.stderr)
            return 2
    renders = {}
    for stack in args.stacks:  # every stack rendered before any is written: one refused leaves nothing behind
        try:
            renders[stack] = render_shared_stack(stack, stack_file=stack_files[stack])
        except StackError as err:
            print(f"kimi-k3 render {stack}: {err}", file=sys.stderr)
            return 2
    for stack in args.stacks:
        out, rendered = outs[stack], renders[stack]
        created = not out.exists()
        try:
            from kimi_k3.offline.figures import (
                stack_figures,  # GPUs, cost/h, time to first token: what `kimi-k3 diff` compares
            )

            figures = json.dumps(stack_figures(blueprint_of(rendered), rendered.resources), indent=2, sort_keys=True)
            figures += "\n"
            rendered.write(out)
            write_text(out / "figures.json", figures)
        except OSError as exc:
            if created:  # a directory this run made and could not fill is not left behind
                shutil.rmtree(out, ignore_errors=True)
            raise UserError(f"--out {out}: cannot write ({exc.strerror or exc})") from None
        print(
            f"{stack}: {len(rendered.objects)} Kubernetes objects, {len(rendered.resources)} resources, "
            f"{rendered.outputs.get('gpus')} GPUs on {rendered.outputs.get('nodes')} nodes -> {out}/"
        )
        if rendered.assumed:
            print(
                f"  assumed (per-user values, kept in .pulumi-user/Pulumi.{stack}.yaml, never read offline): "
                + "; ".join(rendered.assumed)
            )
        from kimi_k3.k8s.provided_domain import assumption

        cluster_fact = assumption(blueprint_of(rendered).graph)  # read from the cluster at `up`, never offline
        if cluster_fact:
            print(f"  {cluster_fact}")
        if args.critical_path:
            from kimi_k3.offline import critical_path

            bp = blueprint_of(rendered)
            print("\n".join(critical_path.report(rendered.resources, bp.config, bp.graph, bp.durations)))
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    r = subparsers.add_parser("render", description=RENDER_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("stacks", nargs="+", metavar="STACK")
    r.add_argument("--out", help="output directory (default build/STACK)")
    r.add_argument(
        "--no-critical-path",
        dest="critical_path",
        action="store_false",
        help="do not print the estimated critical path",
    )
    r.set_defaults(func=run)
    return r
