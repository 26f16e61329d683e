"""The engine lane's pins (tools/engine): one versions file, and wrapper modules that require exactly those versions.

Pure file checks (no go command, no network); the lane itself is `make test-engine`.
"""

from __future__ import annotations

import re
import sys

import pytest
from conftest import ROOT, STACKS

ENGINE = ROOT / "tools" / "engine"
sys.path.insert(0, str(ENGINE))
import lane  # noqa: E402  (tools/engine/lane.py: the harness' pure helpers)

# versions.env key -> (wrapper module dir, required module)
PINS = {
    "PULUMI_VERSION": [("pulumi", "github.com/pulumi/pulumi/pkg/v3"), ("pulumi", "github.com/pulumi/pulumi/sdk/v3")],
    "K8S_PROVIDER_MODULE_VERSION": [("provider-kubernetes", "github.com/pulumi/pulumi-kubernetes/provider/v4")],
    "KUBERNETES_VERSION": [("kube", "k8s.io/kubernetes")],
    "ETCD_VERSION": [("etcd", "go.etcd.io/etcd/server/v3")],
    "PROMETHEUS_OPERATOR_VERSION": [("prometheus-operator", "github.com/prometheus-operator/prometheus-operator")],
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
    live = {
        "spec": {"replicas": 2, "template": {"args": ["--a", "1"]}, "defaulted": True},
        "metadata": {"name": "x", "uid": "u"},
    }
    assert lane.subset_diff(rendered, live) == []
    assert sorted(lane.extra_fields(rendered, live)) == [".metadata.uid", ".spec.defaulted"]
    live["spec"]["replicas"] = 3
    del live["spec"]["template"]["args"]
    assert lane.subset_diff(rendered, live) == [
        ".spec.replicas: rendered 2, live 3",
        '.spec.template.args: rendered ["--a", "1"], live has no such field',
    ]


def test_open_schema_crds_address_what_the_upstream_crds_serve(rendered, shared_reference):
    """The lane's fallback without ../shared: an open-schema CRD per Dynamo/DRA kind our renders use, which must be
    reachable under upstream's group, served version, kind, plural and scope, with the status subresource."""
    for sub in lane.UPSTREAM_CRD_DIRS:  # skips, naming the folder, where ../shared lacks it
        (shared_reference / sub).need()
    upstream = {lane.crd_kind(c): c for c in lane.upstream_crds(shared_reference)}
    used = {
        (o["apiVersion"], o["kind"]): "namespace" in o["metadata"]
        for stack in STACKS
        for o in rendered[stack].objects
        if (o["apiVersion"].split("/")[0], o["kind"]) in upstream
    }
    assert {k for _, k in used} == {"DynamoGraphDeployment", "ComputeDomain"}
    for (api, kind), namespaced in used.items():
        version = api.split("/")[1]
        want = lane.crd_identity(upstream[(api.split("/")[0], kind)], version)
        assert lane.crd_identity(lane.open_schema_crd(api, kind, namespaced), version) == want


def test_open_schema_crd_keeps_any_field_and_has_a_status_subresource():
    crd = lane.open_schema_crd("nvidia.com/v1beta1", "DynamoGraphDeployment", namespaced=True)
    assert crd["metadata"]["name"] == "dynamographdeployments.nvidia.com"
    (version,) = crd["spec"]["versions"]
    assert version["schema"]["openAPIV3Schema"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert version["subresources"] == {"status": {}}
    assert [lane.plural_of(k) for k in ("ComputeDomain", "PodMonitor", "Policy", "Ingress", "Gateway")] == [
        "computedomains",
        "podmonitors",
        "policies",
        "ingresses",
        "gateways",
    ]


@pytest.mark.parametrize(
    "selector,labels,expected",
    [
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
    ],
)
def test_label_selector_semantics(selector, labels, expected):
    assert lane.selects(selector, labels) is expected


def test_prometheus_operator_crds_with_a_bare_equals_sign_parse(tmp_path):
    """The Prometheus Operator CRDs list `=` as an enum value; plain PyYAML cannot construct it."""
    f = tmp_path / "crd.yaml"
    f.write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec:\n  enum:\n  - =\n  - '!='\n"
    )
    assert lane.read_crds([f])[0]["spec"]["enum"] == ["=", "!="]
