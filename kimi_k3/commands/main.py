"""`kimi-k3`: the offline commands. A shell over the same modules `pulumi up` uses, never a second implementation."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kimi_k3 import critical_path
from kimi_k3.stacks import StackError, load_stack

from . import check, diff, plan
from .render import render_stack

RENDER_HELP = """\
Run the real __main__.py in-process under Pulumi's mock engine with Pulumi.STACK.yaml and write
DIR/manifests.yaml (every Kubernetes object, deterministic order, Secret data redacted) and
DIR/resources.json (every registered resource: urn, type, name, parent, provider, dependsOn, protect,
retainOnDelete, inputs; plus the stack outputs).
Faithful: resource inputs, options and dependencies. Placeholders: computed cloud/cluster outputs
(ids are NAME-id; in eks mode also the EKS endpoint/CA/cluster security group, launch template version,
FSx DNS/mount names and provider-generated names, see COMPUTED_PLACEHOLDERS/AUTONAMED in kimi_k3/commands/render.py)
and secret values (shown as [secret]; render never decrypts them).

Then prints the critical path to the serving graph being Ready, computed from resources.json (dependsOn and
provider edges) with duration estimates from recipes/durations.yaml (sources in its comments) overridden by
kimi-k3:estimates; the download and the workers' weight load come from the planner. --no-critical-path skips it."""


def _render(args: argparse.Namespace) -> int:
    for stack in args.stacks:
        out = Path(args.out) if args.out and len(args.stacks) == 1 else Path(args.out or "build") / stack
        try:
            rendered = render_stack(stack)
        except StackError as err:
            print(f"kimi-k3 render {stack}: {err}", file=sys.stderr)
            return 2
        rendered.write(out)
        print(f"{stack}: {len(rendered.objects)} Kubernetes objects, {len(rendered.resources)} resources, "
              f"{rendered.outputs.get('gpus')} GPUs on {rendered.outputs.get('nodes')} nodes -> {out}/")
        if rendered.assumed:
            print(f"  assumed (set per user, not in Pulumi.{stack}.yaml): " + "; ".join(rendered.assumed))
        if args.critical_path:
            cfg, graph = load_stack(stack)
            path = critical_path.critical_path(rendered.resources, critical_path.estimates(cfg, graph))
            print("\n".join(path.lines()))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kimi-k3", description="Offline tools for the kimi-k3 Pulumi program.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="render stacks to manifests.yaml + resources.json without a cluster",
                       description=RENDER_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("stacks", nargs="+", metavar="STACK")
    r.add_argument("--out", help="output directory (default build/STACK)")
    r.add_argument("--no-critical-path", dest="critical_path", action="store_false",
                   help="do not print the estimated critical path")
    r.set_defaults(func=_render)
    check.register(sub)
    diff.register(sub)
    plan.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
