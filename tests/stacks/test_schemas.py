"""What we emit validates against the real schemas: upstream CRDs and Kubernetes 1.34's own."""

from __future__ import annotations

import copy
import importlib.util

import jsonschema
import kubernetes_validate
import pytest
import yaml
from conftest import STACKS, by_kind

KUBERNETES_VERSION = "1.34.0"  # DRA resource.k8s.io/v1 is GA from 1.34, the minimum this program targets


def validate_crds_tool(shared_reference):
    """../shared/tools/validate_crds.py as a module (skips, naming it, if absent)."""
    path = (shared_reference.parent / "tools" / "validate_crds.py").need()
    spec = importlib.util.spec_from_file_location("validate_crds", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def load_crds(crd_dir):
    """validate_crds.py's load_crds, read with libyaml's SafeLoader (the same documents; 3.2 s -> 0.3 s)."""
    versions = {}
    for path in sorted(crd_dir.rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                versions[(f"{group}/{version['name']}", kind)] = version
    return versions


@pytest.fixture(scope="session")
def crd_validator(shared_reference):
    """Validation the way ../shared/tools/validate_crds.py approximates the API server (strict fields)."""
    tool = validate_crds_tool(shared_reference)
    crds = load_crds(shared_reference)
    validators: dict[tuple[str, str], jsonschema.Draft7Validator] = {}  # one schema conversion per kind

    def errors(obj):
        key = (obj["apiVersion"], obj["kind"])
        if key not in validators:
            version = crds[key]
            assert version["served"]
            schema = tool.to_jsonschema(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
            schema["properties"]["metadata"] = {"type": "object"}
            validators[key] = jsonschema.Draft7Validator(schema)
        return [
            f"{'/'.join(map(str, e.path))}: {e.message[:200]}"
            for e in validators[key].iter_errors(tool.drop_nulls(obj))
        ]

    return errors


@pytest.mark.parametrize("stack", STACKS)
def test_custom_resources_validate_against_upstream_crds(stack, rendered, crd_validator):
    objs = by_kind(rendered[stack].objects, "ComputeDomain") + by_kind(rendered[stack].objects, "DynamoGraphDeployment")
    assert len(objs) >= 2
    for obj in objs:
        assert crd_validator(obj) == [], f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.slow  # the tool's pure-Python read is the 3 s this file no longer spends in make test
def test_crds_read_as_the_tool_reads_them(shared_reference):
    """The fast reader above returns exactly what ../shared/tools/validate_crds.py's own load_crds returns."""
    tool = validate_crds_tool(shared_reference)
    assert load_crds(shared_reference) == tool.load_crds(shared_reference)


def test_crd_validation_rejects_what_the_api_server_rejects(rendered, crd_validator):
    dgd = copy.deepcopy(by_kind(rendered["gb300"].objects, "DynamoGraphDeployment")[0])
    dgd["spec"]["components"][1]["multinode"]["nodeCount"] = 1
    dgd["spec"]["components"][1]["replicaz"] = 2
    problems = crd_validator(dgd)
    assert any("nodeCount" in p for p in problems) and any("replicaz" in p for p in problems)


@pytest.mark.parametrize("stack", STACKS)
def test_core_objects_validate_against_kubernetes_schemas(stack, rendered):
    # Custom resources are validated against their CRDs elsewhere; monitoring.coreos.com objects have no schema
    # offline (kube-prometheus-stack brings the CRDs) and are checked in tests/stacks/test_monitoring.py.
    core = [
        o
        for o in rendered[stack].objects
        if o["kind"] not in ("ComputeDomain", "DynamoGraphDeployment")
        and not o["apiVersion"].startswith("monitoring.coreos.com/")
    ]
    # eks stacks add the static PersistentVolumes that bind the weights bucket and the compile cache, and the
    # DaemonSet that pre-pulls the runtime image onto the GPU nodes; the fabric preflight adds a headless Service;
    # the graph-ready Job its ServiceAccount, Role and RoleBinding; the weights-prefetch peers their NetworkPolicy
    assert {o["kind"] for o in core} == {
        "Namespace",
        "Secret",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Job",
        "PersistentVolume",
        "Service",
        "DaemonSet",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
    }
    for obj in core:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("stack", STACKS)
def test_worker_pod_templates_validate_as_kubernetes_pods(stack, rendered):
    """The DGD schema embeds PodTemplateSpec loosely; check each one as a real Pod too."""
    (dgd,) = by_kind(rendered[stack].objects, "DynamoGraphDeployment")
    for c in dgd["spec"]["components"]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": c["name"].lower(), **c["podTemplate"].get("metadata", {})},
            "spec": c["podTemplate"]["spec"],
        }
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validation_rejects_a_bad_job(rendered):
    job = copy.deepcopy(by_kind(rendered["gb300"].objects, "Job")[0])
    job["spec"]["template"]["spec"]["containers"][0]["volumeMountz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
