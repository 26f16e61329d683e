"""The pinned platform set: checked before anything is registered, and true to the upstream charts and CRDs."""

from __future__ import annotations

import pytest
import yaml
from conftest import render_with

from kimi_k3.blueprint import load_stack
from kimi_k3.data import recipe_file
from kimi_k3.k8s import platform_set
from kimi_k3.k8s.addons import addon_specs
from kimi_k3.offline.synth import RenderError


def test_every_default_addon_version_is_in_the_set():
    defaults = recipe_file("platform/addons.yaml")
    data = platform_set.platform_set()
    for key in data["upgradeOrder"]:
        assert str(defaults[key]["version"]) in data[key], key


def test_stack_defaults_pass_and_a_lone_operator_downgrade_is_refused_before_anything_is_registered():
    cfg, graph = load_stack("gb300-disagg")
    platform_set.check(addon_specs(cfg, "p6e-gb300.36xlarge"), "1.34", {"DynamoGraphDeployment": "nvidia.com/v1beta1"})
    with pytest.raises(RenderError) as err:
        render_with("gb300-disagg", platform={"dynamoPlatform": {"version": "1.4.0"}})
    msg = str(err.value)
    assert "kimi-k3:platform.dynamoPlatform.version = 1.4.0" in msg and "allowed: 1.5.0" in msg
    assert err.value.registered == []


def test_api_version_not_served_is_refused():
    cfg, _ = load_stack("gb300-disagg")
    with pytest.raises(Exception, match="DynamoGraphDeployment nvidia.com/v2: not served"):
        platform_set.check(addon_specs(cfg, "p6e-gb300.36xlarge"), "1.34", {"DynamoGraphDeployment": "nvidia.com/v2"})


def test_set_matches_the_upstream_chart_and_crds(shared_reference):
    data = platform_set.platform_set()
    chart = yaml.safe_load((shared_reference / "dynamo/helm-platform/Chart.yaml").read_text())
    deps = {d.get("alias") or d["name"]: str(d["version"]) for d in chart["dependencies"]}
    entry = data["dynamoPlatform"][str(chart["version"])]
    # Grove and KAI moved on release/1.5.0 after this copy was taken: tests/unit/test_platform_sources.py pins that.
    assert entry["bundles"]["dynamoOperator"] == deps["dynamo-operator"]
    assert chart["kubeVersion"].startswith(f">={entry['kubernetes']}")

    def served(path):  # the C loader when there is one: the DGD CRD is 21,799 lines
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        return sorted(f"{crd['spec']['group']}/{v['name']}" for v in crd["spec"]["versions"] if v["served"])

    assert entry["serves"]["DynamoGraphDeployment"] == served(
        shared_reference / "dynamo/crds/nvidia.com_dynamographdeployments.yaml"
    )
    assert data["draDriver"]["0.4.1"]["serves"]["ComputeDomain"] == served(
        shared_reference / "dra/crds/resource.nvidia.com_computedomains.yaml"
    )
