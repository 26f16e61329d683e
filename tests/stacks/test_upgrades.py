"""Day-two changes under the mocks: every change a user makes to a running stack patches the
DynamoGraphDeployment in place and never touches the model cache (render both sides, classify with
kimi_k3.offline.replacement, which follows pulumi-kubernetes' and the engine's own rules)."""

from __future__ import annotations

import pytest
from conftest import ROOT, render_with
from support import render_stack_once as render_stack  # one render per stack per session

from kimi_k3.offline import replacement as R

pytestmark = pytest.mark.slow  # ~13 renders: `make test-slow`

DGD = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
CACHE_TYPES = (
    "kubernetes:core/v1:PersistentVolumeClaim",
    "kubernetes:core/v1:PersistentVolume",
    "aws:fsx/lustreFileSystem:LustreFileSystem",
    "kubernetes:core/v1:Namespace",
)

# (stack, what a user changes, config overrides); each must be an in-place update of the graph.
CHANGE_KINDS = [
    ("gb300-disagg", "image", {"serving": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0"}}),
    ("gb300-disagg", "flags", {"serving": {"roles": {"decode": {"extraArgs": {"--max-num-seqs": "128"}}}}}),
    ("gb300-disagg", "env", {"serving": {"roles": {"prefill": {"env": {"NCCL_DEBUG": "INFO"}}}}}),
    ("gb300-disagg", "replicas", {"serving": {"pdRatio": "1:1"}}),
    ("gb300-disagg", "tp", {"serving": {"roles": {"decode": {"tp": 16}}}}),
    ("gb300-disagg", "frontend replicas", {"serving": {"frontend": {"replicas": 2}}}),
    ("gb300-disagg", "recipe switch (disaggregated -> aggregated)", {"recipe": "gb300"}),
    ("gb300", "recipe switch (aggregated -> disaggregated)", {"recipe": "gb300-disagg"}),
    ("gb200-disagg", "recipe switch (gb200 disaggregated -> aggregated)", {"recipe": "gb200"}),
    ("gb300-disagg", "startup budget", {"serving": {"startupProbeSeconds": 5400}}),
]


@pytest.fixture(scope="module")
def bases():
    return {}


def _base(bases, stack):
    if stack not in bases:
        bases[stack] = render_stack(stack, ROOT)
    return bases[stack]


@pytest.mark.parametrize("stack,what,overrides", CHANGE_KINDS, ids=[c[1] for c in CHANGE_KINDS])
def test_change_updates_the_graph_in_place(bases, stack, what, overrides):
    base = _base(bases, stack)
    head = render_with(stack, **overrides)
    out = R.classify(base.resources, head.resources)
    graph = [c for c in out if c.type == DGD]
    assert [c.action for c in graph] == [R.UPDATE], f"{what}: {[c.as_json() for c in graph]}"
    assert not any(c.action in (R.REPLACE, R.DELETE) and c.type in CACHE_TYPES for c in out)
    # The smoke test Job and the graph-ready Job are the replacements by design: their pod templates carry the
    # graph's hash, so a changed graph is waited for and smoke-tested again (a Job's template is immutable:
    # re-running is replacing).
    reruns = [c for c in out if c.type == "kubernetes:batch/v1:Job" and c.name.endswith(("-smoke-test", "-ready"))]
    assert sorted((c.name, c.action) for c in reruns) == [
        ("kimi-k3-serving-ready", R.REPLACE),
        ("kimi-k3-serving-smoke-test", R.REPLACE),
    ], f"{what}: up must wait for the changed graph and smoke-test it again"
    assert not [c.as_json() for c in out if c.action == R.REPLACE and c not in reruns], f"{what} replaces something"


def test_old_recipe_derived_graph_name_would_have_replaced_the_graph(bases):
    """The form this guards against: the graph was named kimi-k3-<recipe>, so a recipe switch renamed it."""
    base = _base(bases, "gb300-disagg")
    head = render_with("gb300-disagg", recipe="gb300")
    old_form = [
        dict(r, inputs={**r["inputs"], "metadata": {**r["inputs"]["metadata"], "name": "kimi-k3-gb300"}})
        if r["type"] == DGD
        else r
        for r in head.resources
    ]
    graph = next(c for c in R.classify(base.resources, old_form) if c.type == DGD)
    assert graph.action == R.REPLACE and graph.replace_paths == ("metadata.name",)


def test_namespace_change_would_replace_graph_and_is_blocked_on_the_cache(bases):
    base = _base(bases, "gb300-disagg")
    head = render_with("gb300-disagg", serving={"namespace": "kimi-prod"})
    out = {c.type: c for c in R.classify(base.resources, head.resources)}
    assert out[DGD].action == R.REPLACE
    pvc = out["kubernetes:core/v1:PersistentVolumeClaim"]
    # Retained, not protected (teardown must pass): Pulumi would leave the old claim with its weights and create an
    # empty one; the upgrade rule stops `make up` before that.
    assert pvc.action == R.REPLACE and pvc.retained and not pvc.blocked
    from policies.rules.upgrades import run_transition_rules

    _, violations = run_transition_rules(base.resources, head.resources)
    assert "PersistentVolumeClaim" in " ".join(v.target for v in violations if v.rule == "model-cache-kept")


REV_A = "0123456789abcdef0123456789abcdef01234567"
REV_B = "fedcba9876543210fedcba9876543210fedcba98"


def _model_path(r):
    dgd = next(x for x in r.resources if x["type"] == DGD)["inputs"]
    env = next(c for c in dgd["spec"]["components"] if c["type"] != "frontend")["podTemplate"]["spec"]["containers"][0][
        "env"
    ]
    return next(e["value"] for e in env if e["name"] == "MODEL_PATH")


def test_model_upgrade_downloads_beside_switches_after_verify_and_reverts():
    a = render_with("gb300-disagg", model={"revision": REV_A})
    b = render_with("gb300-disagg", model={"revision": REV_B})
    assert _model_path(a).endswith(f"/moonshotai/Kimi-K3@{REV_A}") and _model_path(b).endswith(f"@{REV_B}")
    out = {c.name: c for c in R.classify(a.resources, b.resources)}
    job = out["kimi-k3-model-cache-download"]
    assert job.action == R.REPLACE and job.delete_before_replace, "a new Job downloads and verifies the new revision"
    assert out["kimi-k3-serving-deployment"].action == R.UPDATE, "the graph is patched to the new path"
    dgd = next(x for x in b.resources if x["type"] == DGD)
    job_urn = next(x["urn"] for x in b.resources if x["name"] == "kimi-k3-model-cache-download")
    assert job_urn in dgd["dependsOn"], "...only after the Job completed (verified every shard)"
    assert not any(c.action in (R.REPLACE, R.DELETE) and c.type in CACHE_TYPES for c in out.values())
    # rollback is a config revert: back to the first revision's directory, again in place
    back = {c.name: c for c in R.classify(b.resources, a.resources)}
    assert back["kimi-k3-serving-deployment"].action == R.UPDATE and _model_path(a) != _model_path(b)


def test_surge_that_does_not_fit_the_capacity_block_is_refused_before_anything_is_registered():
    from kimi_k3.offline.synth import RenderError

    with pytest.raises(RenderError) as err:
        render_with("gb200-disagg", serving={"rollout": {"surge": 2}})
    assert "ultraServerNodes = 18" in str(err.value) and "needs 24 GPU nodes" in str(err.value)
    assert err.value.registered == []
    surged = render_with("gb300-disagg", serving={"rollout": {"surge": 1}})
    out = {c.type: c for c in R.classify(render_stack("gb300-disagg", ROOT).resources, surged.resources)}
    assert out[DGD].action == R.UPDATE
