"""Existing clusters that bring their rack's ComputeDomain (issue 24): the shipped CoreWeave CKS stack claims the
provider's ComputeDomain and creates none; `up` reads it first and stops, in one line, when it cannot hold the graph.

The provided domain's facts are read from the stack file (the input), never from the code under test."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import ROOT, STACKS, by_kind, main_container, render_with, stack_config, workers
from support import render_stack_once as render_stack  # one render per stack per session

from kimi_k3.offline.synth import RenderError, render_config
from policies import rules

STACK = "cks-gb300-disagg"
CD_TYPE = "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain"  # the DRA driver's CRD as a Pulumi type token
RULE = "nvlink-roles-in-provided-compute-domain"
PROVIDED = yaml.safe_load((ROOT / f"Pulumi.{STACK}.yaml").read_text())["config"]["kimi-k3:cluster"]["computeDomain"][
    "provided"
]
DOMAIN_ID = f"{PROVIDED['namespace']}/{PROVIDED['name']}"


@pytest.fixture(scope="module")
def cks():
    return render_stack(STACK, ROOT)


def dgd_of(objects):
    return next(o for o in objects if o["kind"] == "DynamoGraphDeployment")


def pod_claims(pod_spec, container):
    """(template names the pod's claims map to, claim names the container uses)."""
    templates = {c["name"]: c.get("resourceClaimTemplateName") for c in pod_spec.get("resourceClaims", [])}
    used = [c["name"] for c in container.get("resources", {}).get("claims", [])]
    return sorted(templates.get(n) for n in used), used


def fired(objects, rule=RULE):
    return [v.message for v in rules.run_all(objects)[0] if v.rule == rule]


def test_creates_no_compute_domain_of_its_own(cks):
    assert by_kind(cks.objects, "ComputeDomain") == []
    # Under Pulumi's mocks: every registration the program made; a read is not one.
    assert [r["name"] for r in cks.resources if r["type"] == CD_TYPE] == []
    assert cks.outputs["nodes"] == 6 and cks.outputs["gpus"] == 24


def test_every_role_claims_the_provided_channel_in_its_namespace(cks):
    dgd = dgd_of(cks.objects)
    assert dgd["metadata"]["namespace"] == PROVIDED["namespace"]  # the DRA driver refuses a claim from another
    roles = workers(dgd)
    assert sorted(c["type"] for c in roles) == ["decode", "prefill"]
    for comp in roles:
        templates, used = pod_claims(comp["podTemplate"]["spec"], main_container(comp))
        assert used and templates == [PROVIDED["channelTemplate"]], comp["name"]
    jobs = [j for j in by_kind(cks.objects, "Job") if "preflight" in j["metadata"]["name"]]
    assert len(jobs) == 2  # the fabric check tests the same domain the workers get
    for job in jobs:
        spec = job["spec"]["template"]["spec"]
        templates, _ = pod_claims(spec, spec["containers"][0])
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert templates == [PROVIDED["channelTemplate"]] and env["COMPUTE_DOMAIN"] == PROVIDED["name"]


def test_the_graph_waits_for_the_read_of_the_provided_domain(cks):
    """The namespace (everything else waits for it), the graph and the preflights depend on the read."""
    by_name = {r["name"]: r for r in cks.resources}
    for name in ("kimi-k3-cluster-namespace", "kimi-k3-serving-deployment", "kimi-k3-serving-prefill-preflight"):
        assert any(u.endswith("::kimi-k3-cluster-provided-compute-domain") for u in by_name[name]["dependsOn"]), name


def test_kimi_k3_check_passes(cks):
    assert rules.run_all(cks.objects)[0] == []


def good_domain(**spec):
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": PROVIDED["name"], "namespace": PROVIDED["namespace"], **spec.pop("meta", {})},
        "spec": {
            "numNodes": spec.get("numNodes", PROVIDED["nodes"]),
            "channel": {
                "allocationMode": "Single",
                "resourceClaimTemplate": {"name": spec.get("template", PROVIDED["channelTemplate"])},
            },
        },
    }


def up_with(objects):
    config, secrets = stack_config(STACK)
    return render_config(STACK, config, secrets, ROOT, cluster={CD_TYPE: objects})


def test_up_reads_that_domain_and_goes_on_when_it_holds_the_graph():
    # numNodes 0: the driver's on-demand mode (IMEX daemons join where the claiming pods land)
    for domain in (good_domain(), good_domain(numNodes=0)):
        assert dgd_of(up_with({DOMAIN_ID: domain}).objects)


@pytest.mark.parametrize(
    "cluster, expected",
    [
        ({}, ["is not in the cluster", PROVIDED["name"], PROVIDED["namespace"]]),
        ({f"other/{PROVIDED['name']}": good_domain()}, ["is not in the cluster"]),
        ({DOMAIN_ID: good_domain(numNodes=4)}, ["spec.numNodes = 4", "take 6 nodes"]),
        ({DOMAIN_ID: good_domain(template="rack-7-channel")}, ["'rack-7-channel'", "channelTemplate"]),
        ({DOMAIN_ID: good_domain(meta={"deletionTimestamp": "2026-12-01T00:00:00Z"})}, ["is being deleted"]),
    ],
    ids=["absent", "other-namespace", "too-small", "other-template", "terminating"],
)
def test_up_stops_in_one_line_before_anything_exists_in_the_cluster(cluster, expected):
    with pytest.raises(RenderError) as info:
        up_with(cluster)
    message = str(info.value)
    assert message.startswith(f"Pulumi.{STACK}.yaml: kimi-k3:cluster.computeDomain.provided: ")
    for part in expected:
        assert part in message, message
    assert len(message.splitlines()) == 1, message
    # Only components and the Kubernetes provider: no object of the graph's was sent to the cluster.
    sent = [u for u in info.value.registered if "::kubernetes:" in u and "::pulumi:providers:" not in u]
    assert sent == [], sent


def test_render_states_the_assumption(tmp_path, capsys):
    from kimi_k3.commands.main import main

    assert main(["render", STACK, "--out", str(tmp_path / "out"), "--no-critical-path"]) == 0
    out = capsys.readouterr().out
    assert (
        f"assumes ComputeDomain {PROVIDED['name']} in namespace {PROVIDED['namespace']} exists, spanning "
        f"{PROVIDED['nodes']} nodes, with channel template {PROVIDED['channelTemplate']}"
    ) in out
    assert "checked at `up`" in out
    manifests = (tmp_path / "out" / "manifests.yaml").read_text()
    assert "kind: ComputeDomain" not in manifests


# ------------------------------------------------------------------------------------------- the rule
def test_rule_catches_the_old_form_and_planted_violations(cks):
    assert fired(cks.objects) == []
    annotations = dgd_of(cks.objects)["metadata"]["annotations"]
    # The old form: before issue 24, this stack's config rendered a ComputeDomain of its own and claimed that.
    old = render_with(STACK, cluster={"mode": "existing"}).objects
    assert by_kind(old, "ComputeDomain")
    dgd_of(old)["metadata"].setdefault("annotations", {}).update(
        {k: v for k, v in annotations.items() if k.startswith("kimi-k3.io/provided-compute-domain")}
    )
    messages = fired(old)
    assert any("also creates ComputeDomain" in m for m in messages), messages
    assert sum("not 's0-011-us-west-01-channel'" in m for m in messages) == 2, messages

    def planted(change):
        objects = copy.deepcopy(cks.objects)
        change(objects)
        return fired(objects)

    decode = lambda o: next(c for c in workers(dgd_of(o)) if c["type"] == "decode")  # noqa: E731
    no_channel = planted(lambda o: decode(o)["podTemplate"]["spec"].pop("resourceClaims"))
    assert len(no_channel) == 1 and "claims no channel" in no_channel[0] and "DecodeWorker" in no_channel[0]
    other = planted(
        lambda o: decode(o)["podTemplate"]["spec"]["resourceClaims"][0].update(
            resourceClaimTemplateName="kimi-k3-nvlink-channel"
        )
    )
    assert len(other) == 1 and "kimi-k3-nvlink-channel" in other[0]
    moved = planted(lambda o: dgd_of(o)["metadata"].update(namespace="serving"))
    assert len(moved) == 1 and "refuses a channel claim from another namespace" in moved[0]


def test_seed_stacks_keep_their_own_compute_domain(rendered):
    for stack in STACKS:
        objects = rendered[stack].objects
        assert len(by_kind(objects, "ComputeDomain")) == 1, stack
        annotations = dgd_of(objects)["metadata"]["annotations"]
        assert not [k for k in annotations if "provided-compute-domain" in k], stack
        assert fired(objects) == [], stack
