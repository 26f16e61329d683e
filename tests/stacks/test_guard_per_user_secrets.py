"""`make up`'s guard (`kimi-k3 check STACK --against` the exported state) on a stack whose per-user kubeconfig
secret the offline render never reads: the state holds its ciphertext, the render has none. An unchanged stack
must pass (found by the fault lane: every second `make up` of an existing-cluster stack was refused, "its provider
kimi-k3-cluster-provider is replaced", 29 replaces)."""

from __future__ import annotations

from conftest import render_with

from kimi_k3.offline import replacement as R
from kimi_k3.offline import state as offline_state

EXISTING = dict(
    cluster={"mode": "existing", "context": "gb300-prod"},
    storage={"kind": "existing", "storageClass": "fsx-lustre", "provisioner": "fsx.csi.aws.com"},
)
CIPHERTEXT = {offline_state.SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "ciphertext": "v1:abc"}


def as_exported_state(resources: list[dict]) -> dict:
    """The render as `pulumi stack export` writes it after `up`: secrets as ciphertext, provider references as
    `URN::ID`."""

    def enc(value):
        if value == "[secret]":
            return CIPHERTEXT
        if isinstance(value, dict):
            return {k: enc(v) for k, v in value.items()}
        if isinstance(value, list):
            return [enc(v) for v in value]
        return value

    out = [
        {
            **r,
            "inputs": enc(r.get("inputs") or {}),
            "provider": r["provider"] + "::04da6b54" if r.get("provider") else "",
        }
        for r in resources
    ]
    return {"version": 3, "deployment": {"resources": out}}


def test_unchanged_stack_passes_with_a_per_user_kubeconfig_only_the_state_has():
    deployed = render_with("gb300", kubeconfig="apiVersion: v1\nkind: Config\n", **EXISTING).resources
    checked = render_with("gb300", **EXISTING).resources  # the shared stack file: no per-user secret
    old = offline_state.records_from_state(as_exported_state(deployed))
    out = R.classify(old, checked)
    changed = [c for c in out if c.action != R.SAME]
    # At most the provider's own (unknowable) kubeconfig input differs: nothing it manages is replaced.
    assert [(c.name, c.action) for c in changed] in ([], [("kimi-k3-cluster-provider", R.UPDATE)]), [
        c.as_json() for c in changed
    ][:3]


def test_a_changed_context_still_replaces_what_the_provider_manages():
    deployed = render_with("gb300", kubeconfig="apiVersion: v1\nkind: Config\n", **EXISTING).resources
    moved = dict(EXISTING, cluster={"mode": "existing", "context": "gb300-other"})
    checked = render_with("gb300", **moved).resources
    out = R.classify(offline_state.records_from_state(as_exported_state(deployed)), checked)
    graph = next(c for c in out if c.type.endswith(":DynamoGraphDeployment"))
    assert graph.action == R.REPLACE and any("provider" in r for r in graph.reasons), graph.as_json()
