"""The dynamo-platform entries read at the released chart, not at ../shared's pre-release copy (issue 22).

Upstream facts below are quoted from ai-dynamo/dynamo deploy/helm/charts/platform/README.md (its Requirements table is
generated from Chart.yaml by helm-docs): @ 0aef498aeaf5a7b63ac9a85d196f3fa10fa5b846 the chart reads "Version: 1.5.0",
@ 0398ccf253c2c9cb2b78acf6399fa8b92a8f55dc "Version: 1.6.0". recipes/platform/platform-set.yaml cites the same.
"""

from __future__ import annotations

import pytest
import yaml

from kimi_k3.config.base import ConfigError
from kimi_k3.k8s import platform_set

# Requirements tables of the two READMEs (name -> version), and their "Kubernetes: >=1.30.0-0".
RELEASED_150 = {"dynamo-operator": "1.5.0", "grove": "v0.1.0-alpha.13", "kai-scheduler": "v0.17.0", "snapshot": "0.1.0"}
RELEASED_160 = {"dynamo-operator": "1.6.0", "grove": "v0.1.0-alpha.14", "kai-scheduler": "v0.17.0", "snapshot": "0.1.0"}
KUBE_MIN = "1.30"
OURS = {"dynamoOperator": "dynamo-operator", "grove": "grove", "kaiScheduler": "kai-scheduler"}
K3_15 = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-kimi-k3-dev.1"


class Addon:
    def __init__(self, key: str, version: str):
        self.key, self.version, self.install, self.values = key, version, True, {}


def _entry(version: str) -> dict:
    return platform_set.platform_set()["dynamoPlatform"][version]


@pytest.mark.parametrize(("version", "chart"), [("1.5.0", RELEASED_150), ("1.6.0", RELEASED_160)])
def test_entry_is_the_released_chart(version, chart):
    entry = _entry(version)
    assert "unsourced" not in entry, entry
    assert entry["bundles"] == {ours: chart[theirs] for ours, theirs in OURS.items()}
    assert str(entry["kubernetes"]) == KUBE_MIN
    assert version in platform_set.runnable("dynamoPlatform")


def test_shared_copy_is_a_pre_release_snapshot_and_differs_only_in_grove_and_kai(shared_reference):
    """The deliberate difference from ../shared: its Chart.yaml (version 1.5.0) predates ai-dynamo/dynamo#14471
    (Snapshot 0.1.0, 2026-09-08) and #14646 (Grove alpha.13 + KAI v0.17.0 on release/1.5.0, 2026-09-10); GA was
    2026-09-18. The operator and the Kubernetes floor are the same in both."""
    chart = yaml.safe_load((shared_reference / "dynamo/helm-platform/Chart.yaml").read_text())
    deps = {d.get("alias") or d["name"]: str(d["version"]) for d in chart["dependencies"]}
    assert str(chart["version"]) == "1.5.0"
    assert deps["snapshot"] != RELEASED_150["snapshot"]  # pre-#14471: the copy is older than the release
    moved = {k for k in RELEASED_150 if deps.get(k) != RELEASED_150[k]}
    assert moved == {"grove", "kai-scheduler", "snapshot"}, moved
    entry = _entry("1.5.0")
    assert (entry["bundles"]["grove"], entry["bundles"]["kaiScheduler"]) != (deps["grove"], deps["kai-scheduler"])
    assert entry["bundles"]["dynamoOperator"] == deps["dynamo-operator"]
    assert chart["kubeVersion"].startswith(f">={entry['kubernetes']}")


def test_the_15_patch_moves_only_the_operator_and_the_16_step_moves_grove():
    assert platform_set.step_changes("1.5.0", "1.5.1")[1:] == [
        "dynamoOperator: 1.5.0 -> 1.5.1 (its pods roll; its CRDs are re-applied)"
    ]
    assert platform_set.step_changes("1.5.1", "1.6.0")[1:] == [
        "dynamoOperator: 1.5.1 -> 1.6.0 (its pods roll; its CRDs are re-applied)",
        "grove: v0.1.0-alpha.13 -> v0.1.0-alpha.14 (its pods roll; its CRDs are re-applied)",
        "a minor step: read the 1.6.0 release notes' breaking changes before it",
    ]


def test_16_is_one_adjacent_step_and_17_still_two():
    assert platform_set.upgrade_steps("1.5.0", "1.6.0") == [("1.5.0", "1.6.0")]
    with pytest.raises(ConfigError, match=r"allowed: 1\.5\.0 -> 1\.6\.2, then 1\.6\.2 -> 1\.7\.0"):
        platform_set.upgrade_steps("1.5.0", "1.7.0")


def test_the_16_set_runs_a_16_image_and_refuses_the_15_build():
    assert platform_set.set_versions("dynamo-1.6.0")["dynamoPlatform"] == "1.6.0"
    addons = [Addon("draDriver", "0.4.1"), Addon("dynamoPlatform", "1.6.0")]
    api = {"DynamoGraphDeployment": "nvidia.com/v1beta1"}
    platform_set.check(addons, "1.34", api, {"kimi-k3:serving.image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0"})
    with pytest.raises(ConfigError) as err:
        platform_set.check(addons, "1.34", api, {"kimi-k3:serving.image": K3_15}, "dynamo-1.6.0")
    assert f"kimi-k3:serving.image = {K3_15}: runs on dynamo-platform 1.5.x" in str(err.value)
    assert "installs dynamo-platform 1.6.0 (kimi-k3:platformSet = dynamo-1.6.0)" in str(err.value)


def test_16_refuses_kubernetes_below_its_floor():
    with pytest.raises(ConfigError, match=r"dynamo-platform 1\.6\.0 needs Kubernetes >= 1\.30"):
        platform_set.check([Addon("dynamoPlatform", "1.6.0")], "1.29", {})


@pytest.mark.parametrize("version", ["1.6.1", "1.6.2", "1.7.0"])
def test_charts_not_read_stay_unselectable(version):
    assert _entry(version)["unsourced"] == ["bundles", "serves", "kubernetes", "requires"]
    assert version not in platform_set.runnable("dynamoPlatform")
