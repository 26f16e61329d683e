"""Bad input for kimi-k3:cluster.computeDomain.provided (issue 24): one line naming the key, the value and what is
allowed, and nothing registered."""

from __future__ import annotations

import pytest
from conftest import assert_one_clear_error

STACK = "cks-gb300-disagg"
GOOD = {
    "name": "s0-011-us-west-01",
    "namespace": "kimi-k3",
    "channelTemplate": "s0-011-us-west-01-channel",
    "nodes": 18,
}


def cluster(mode="existing", **provided):
    return {"mode": mode, "computeDomain": {"provided": {**GOOD, **provided}}}


@pytest.mark.parametrize(
    "overrides, expected",
    [
        # a provider's domain only where the cluster is the provider's: eks and render create their own
        ({"cluster": cluster("render")}, ["kimi-k3:cluster.computeDomain.provided", "mode existing", "'render'"]),
        # the DRA driver refuses a channel claim from another namespace than the ComputeDomain's
        (
            {"cluster": cluster(namespace="rack-7")},
            ["kimi-k3:cluster.computeDomain.provided.namespace = 'rack-7'", "kimi-k3:serving.namespace = 'kimi-k3'"],
        ),
        ({"cluster": cluster(nodes=19)}, ["kimi-k3:cluster.computeDomain.provided.nodes = 19", "allowed: 1 to 18"]),
        # the graph's 6 nodes must all fit inside the one domain every role claims
        ({"cluster": cluster(nodes=4)}, ["provided.nodes = 4", "take 6 GPU nodes", "6 nodes or more"]),
        ({"cluster": cluster(name="S0_011")}, ["computeDomain.provided.name", "S0_011", "lower-case"]),
        (
            {"cluster": cluster(channelTemplate="")},
            ["computeDomain.provided.channelTemplate", "a Kubernetes object name"],
        ),
        ({"cluster": cluster(nodes=0)}, ["computeDomain.provided.nodes", "0"]),
    ],
    ids=[
        "render-mode",
        "other-namespace",
        "more-than-a-rack",
        "smaller-than-graph",
        "bad-name",
        "empty-template",
        "zero",
    ],
)
def test_bad_provided_domain_is_one_clear_error(overrides, expected):
    assert_one_clear_error(STACK, overrides, expected)


def test_missing_and_misspelt_keys_are_named():
    incomplete = {"mode": "existing", "computeDomain": {"provided": {k: v for k, v in GOOD.items() if k != "nodes"}}}
    assert_one_clear_error(STACK, {"cluster": incomplete}, ["computeDomain.provided.nodes"])
    typo = {"mode": "existing", "computeDomain": {"provided": {**GOOD, "chanelTemplate": "x"}}}
    assert_one_clear_error(STACK, {"cluster": typo}, ["chanelTemplate"])


def test_eks_stack_with_a_provided_domain_is_refused():
    provided = {"computeDomain": {"provided": GOOD}}
    assert_one_clear_error(
        "gb300-disagg",
        {"cluster": {"mode": "eks", "region": "us-east-1", **provided}},
        ["kimi-k3:cluster.computeDomain.provided", "mode existing", "'eks'"],
    )
