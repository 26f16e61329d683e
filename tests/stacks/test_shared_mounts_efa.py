"""Issue 19 finding 10: a stack installs an EFA component (the device plugin, the nodes' EFA-only interfaces) only
where KV moves over EFA. KV over NVLink inside one ComputeDomain (every shipped stack) and TP inside one NVLink
domain use no EFA; the device plugin crash-loops on a node without an EFA device (aws/eks-charts#1239)."""

from __future__ import annotations

import pytest
from conftest import STACKS

from kimi_k3.aws import nodes as aws
from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.graph.build import build_graph
from kimi_k3.k8s.addons import addon_specs

EFA_CHART = "aws-efa-k8s-device-plugin"


def cfg_of(stack, **platform):
    f = read_stack_config(stack)
    config = dict(f.config)
    if platform:
        import json

        config["kimi-k3:platform"] = json.dumps(platform)
    return parse_stack_config(config, f.secrets)


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_installs_efa_only_where_kv_moves_over_it(stack, rendered):
    r = rendered[stack]
    cfg = cfg_of(stack)
    graph = build_graph(stack, cfg)
    needs = graph.kv_transport == "efa"
    assert not needs, f"{stack}: {graph.kv_transport_reason}"  # every shipped stack keeps KV on NVLink
    releases = [
        x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release" and x["inputs"]["name"] == EFA_CHART
    ]
    assert bool(releases) is needs
    assert r.outputs["addons"]["efaDevicePlugin"]["installed"] is needs
    (lt,) = [
        x for x in r.resources if x["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and x["name"].endswith("-gpu-lt")
    ]
    efa_nics = [n for n in lt["inputs"]["networkInterfaces"] if n["interfaceType"] == "efa-only"]
    assert bool(efa_nics) is needs
    assert "vpc.amazonaws.com/efa" not in str(r.objects), "no pod asks for an EFA device"


@pytest.mark.parametrize(
    "stack, instance", [("gb200-disagg", "p6e-gb200.36xlarge"), ("gb300-disagg", "p6e-gb300.36xlarge")]
)
def test_a_graph_that_moves_kv_over_efa_gets_the_plugin_and_the_interfaces(stack, instance):
    cfg = cfg_of(stack)
    specs = {a.key: a for a in addon_specs(cfg, instance, kv_over_efa=True)}
    assert specs["efaDevicePlugin"].install is True
    assert {a.key: a for a in addon_specs(cfg, instance, kv_over_efa=False)}["efaDevicePlugin"].install is False
    graph = build_graph(stack, cfg)
    plan = aws.gpu_node_plan(cfg, graph.platform.name, graph.nodes, efa=True)
    nics = aws.gpu_launch_template(plan, ["sg"], 200, {})["network_interfaces"]
    assert [(n["network_card_index"], n["interface_type"]) for n in nics] == [
        (0, "interface"),
        (1, "efa-only"),
        (5, "efa-only"),
        (9, "efa-only"),
        (13, "efa-only"),
    ]
    plan = aws.gpu_node_plan(cfg, graph.platform.name, graph.nodes)
    assert [n["interface_type"] for n in aws.gpu_launch_template(plan, ["sg"], 200, {})["network_interfaces"]] == [
        "interface"
    ]


def test_turning_the_plugin_off_where_kv_needs_it_is_refused():
    cfg = cfg_of("gb200-disagg", efaDevicePlugin={"install": False})
    with pytest.raises(
        ConfigError, match=r"efaDevicePlugin.install = false: the graph moves KV over EFA.*allowed: true"
    ):
        addon_specs(cfg, "p6e-gb200.36xlarge", kv_over_efa=True)
    # asked for explicitly, it is installed (and still checked against the instance type)
    cfg = cfg_of("gb300", efaDevicePlugin={"install": True})
    assert {a.key: a for a in addon_specs(cfg, "p6e-gb300.36xlarge")}["efaDevicePlugin"].install is True
