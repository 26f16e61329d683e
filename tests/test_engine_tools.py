"""The engine lane's pins (tools/engine): one versions file, and wrapper modules that require exactly those versions.

Pure file checks (no go command, no network); the lane itself is `make test-engine`.
"""
from __future__ import annotations

import re
import sys

from conftest import ROOT

ENGINE = ROOT / "tools" / "engine"
sys.path.insert(0, str(ENGINE))
import lane  # noqa: E402  (tools/engine/lane.py: the harness' pure helpers)

# versions.env key -> (wrapper module dir, required module)
PINS = {
    "PULUMI_VERSION": [("pulumi", "github.com/pulumi/pulumi/pkg/v3"), ("pulumi", "github.com/pulumi/pulumi/sdk/v3")],
    "K8S_PROVIDER_MODULE_VERSION": [("provider-kubernetes", "github.com/pulumi/pulumi-kubernetes/provider/v4")],
    "KUBERNETES_VERSION": [("kube", "k8s.io/kubernetes")],
    "ETCD_VERSION": [("etcd", "go.etcd.io/etcd/server/v3")],
}


def versions() -> dict[str, str]:
    out = {}
    for line in (ENGINE / "versions.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def required(module_dir: str, module: str) -> str | None:
    gomod = (ENGINE / module_dir / "go.mod").read_text()
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", gomod, re.M)
    return m.group(1) if m else None


def test_wrapper_modules_require_the_versions_in_versions_env():
    pins = versions()
    for key, uses in PINS.items():
        for module_dir, module in uses:
            assert required(module_dir, module) == pins[key], f"tools/engine/{module_dir}/go.mod {module} vs {key}"
            assert module in (ENGINE / module_dir / "go.sum").read_text(), f"{module} not pinned in go.sum"


def test_kube_wrapper_replaces_every_staging_module_with_the_same_release():
    gomod = (ENGINE / "kube" / "go.mod").read_text()
    minor = versions()["KUBERNETES_VERSION"].lstrip("v").split(".", 1)[1]
    replaces = re.findall(r"^replace (k8s\.io/\S+) => (k8s\.io/\S+) (v\S+)$", gomod, re.M)
    assert len(replaces) >= 30
    assert all(a == b and v == f"v0.{minor}" for a, b, v in replaces), replaces


def test_live_object_comparison_finds_missing_and_changed_fields_but_not_server_defaults():
    rendered = {"spec": {"replicas": 2, "template": {"args": ["--a", "1"]}}, "metadata": {"name": "x"}}
    live = {"spec": {"replicas": 2, "template": {"args": ["--a", "1"]}, "defaulted": True},
            "metadata": {"name": "x", "uid": "u"}}
    assert lane.subset_diff(rendered, live) == []
    assert sorted(lane.extra_fields(rendered, live)) == [".metadata.uid", ".spec.defaulted"]
    live["spec"]["replicas"] = 3
    del live["spec"]["template"]["args"]
    assert lane.subset_diff(rendered, live) == [".spec.replicas: rendered 2, live 3",
                                                ".spec.template.args: rendered [\"--a\", \"1\"], live has no such field"]
