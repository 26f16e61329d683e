"""Addons: the GPU Operator, EFA device plugin, NVIDIA DRA driver and Dynamo platform as helm releases."""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from kimi_k3.k8s.addons import AddonSpec, release_args


class AddonsArgs:
    def __init__(self, specs: Sequence[AddonSpec], wait_for: Sequence[pulumi.Resource] = ()):
        """
        :param specs: every add-on (kimi_k3.k8s.addons.addon_specs): chart, pinned version, values, install or assumed.
        :param wait_for: what every release needs first (in eks mode: the system node group, where controllers run).
        """
        self.specs = list(specs)
        self.wait_for = list(wait_for)


class Addons(pulumi.ComponentResource):
    """One `helm.v3.Release` per installed add-on; `releases[key]` is what the serving graph waits on.

    An add-on assumed present (existing clusters) registers nothing and is not waited on."""

    releases: dict[str, k8s.helm.v3.Release]

    def __init__(self, name: str, args: AddonsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:platform:Addons", name, None, opts)
        self.releases = {}
        for a in args.specs:
            if not a.install:
                continue
            deps = args.wait_for + [self.releases[d] for d in a.depends_on if d in self.releases]
            self.releases[a.key] = k8s.helm.v3.Release(
                f"{name}-{a.release}", **release_args(a), opts=pulumi.ResourceOptions(parent=self, depends_on=deps)
            )
        self.register_outputs({k: r.version for k, r in self.releases.items()})
