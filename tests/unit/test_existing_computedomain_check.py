"""The check `up` runs on the provider's ComputeDomain read from the cluster (kimi_k3/k8s/provided_domain.py), on
objects shaped as the DRA driver's CRD defines them (shared/reference/dra/crds), and the state render assumes."""

from __future__ import annotations

import yaml
from conftest import ROOT

from kimi_k3.blueprint import load_stack
from kimi_k3.k8s import provided_domain

STACK = "cks-gb300-disagg"


def graph():
    return load_stack(STACK, ROOT)[1]


def domain(num_nodes, template="s0-011-us-west-01-channel", **meta):
    return {
        "metadata": {"name": "s0-011-us-west-01", "namespace": "kimi-k3", **meta},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": template}}},
    }


def test_the_check_accepts_a_rack_and_the_on_demand_mode():
    g = graph()
    assert provided_domain.domain_problem(domain(18), g) is None
    assert provided_domain.domain_problem(domain(18.0), g) is None  # protobuf numbers arrive as doubles
    assert provided_domain.domain_problem(domain(0), g) is None  # 0: daemons join where claiming pods land


def test_the_check_refuses_what_cannot_hold_the_graph():
    g = graph()
    cases = {
        "absent": (None, "is not in the cluster"),
        "empty read": ({}, "is not in the cluster"),
        "too small": (domain(5), "spec.numNodes = 5 nodes, but the graph's roles take 6"),
        "other span": (domain(9), "spec.numNodes = 9 nodes, not nodes = 18"),
        "other template": (domain(18, template="x-channel"), "makes channel template 'x-channel'"),
        "terminating": (domain(18, deletionTimestamp="2026-12-01T00:00:00Z"), "is being deleted"),
    }
    for case, (state, expected) in cases.items():
        problem = provided_domain.domain_problem(state, g)
        assert problem and expected in problem, (case, problem)
        assert problem.startswith("kimi-k3:cluster.computeDomain.provided: ComputeDomain s0-011-us-west-01"), case


def test_render_assumes_the_stated_domain_and_it_fits_the_crd(shared_reference):
    g = graph()
    config = {
        "kimi-k3:cluster": '{"computeDomain": {"provided": {"name": "s0-011-us-west-01", "namespace": '
        '"kimi-k3", "channelTemplate": "s0-011-us-west-01-channel", "nodes": 18}}}'
    }
    assumed = provided_domain.assumed_from_config(config, "kimi-k3/s0-011-us-west-01")
    assert provided_domain.domain_problem(assumed, g) is None
    assert provided_domain.assumed_from_config(config, "other/s0-011-us-west-01") == {}
    crd = yaml.safe_load((shared_reference / "dra/crds/resource.nvidia.com_computedomains.yaml").read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert crd["spec"]["group"] + "/v1beta1" == assumed["apiVersion"]
    assert set(assumed["spec"]) <= set(spec)  # numNodes, channel: the fields the check reads exist upstream
    assert "name" in spec["channel"]["properties"]["resourceClaimTemplate"]["properties"]
