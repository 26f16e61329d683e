"""`kimi-k3 check` never crashes on any YAML document, and its shape check is the consumer's schema (issue 25).

1. Every type kimi_k3/shape.py declares is the type Kubernetes 1.34's OpenAPI (kubernetes-validate's bundled JSON
   schemas) and the upstream CRDs (DynamoGraphDeployment, ComputeDomain) give that field.
2. Every field the rules read of the shipped stacks' objects is one shape.py declares (a recording mapping logs
   what the rules read), so no rule meets a field of a type nobody checked.
3. Property (hypothesis): any value put anywhere in a real object, or any document, fed to `kimi-k3 check`: never a
   traceback; exit 0 only when the consumer's schema finds no type error in a field the rules read; every shape
   problem is reported with its file, document and JSON path.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
from pathlib import Path
from typing import Any, Optional

import jsonschema
import kubernetes_validate
import pytest
import yaml
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kimi_k3 import shape
from kimi_k3.commands.check_targets import resource_infos
from kimi_k3.commands.main import main
from kimi_k3.offline.synth import render_stack
from kimi_k3.shape import kubernetes as shape_kubernetes
from kimi_k3.shape.vocabulary import INT, LIST, OBJ
from policies import rules
from policies.rules import base

pytestmark = pytest.mark.slow  # beyond the `make test` budget: hypothesis searches many generated objects

K8S = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / "v1.34.0-local"
CORE_FILES = {
    "Pod": "pod-v1",
    "Job": "job-batch-v1",
    "Deployment": "deployment-apps-v1",
    "StatefulSet": "statefulset-apps-v1",
    "DaemonSet": "daemonset-apps-v1",
    "ReplicaSet": "replicaset-apps-v1",
    "CronJob": "cronjob-batch-v1",
    "PersistentVolumeClaim": "persistentvolumeclaim-v1",
    "PersistentVolume": "persistentvolume-v1",
}
SHAPE = "object-shape-valid"
CRD_KINDS = {"DynamoGraphDeployment": ("dynamo/crds", "v1beta1"), "ComputeDomain": ("dra/crds", "v1beta1")}


# ------------------------------------------------------------------------------------------------ schemas
@pytest.fixture(scope="session")
def k8s_defs() -> dict:
    return json.loads((K8S / "_definitions.json").read_text())["$defs"]


def k8s_schema(kind: str) -> dict:
    return json.loads((K8S / f"{CORE_FILES[kind]}.json").read_text())


def crd_schema(shared: Path, kind: str) -> dict:
    folder, version = CRD_KINDS[kind]
    for path in sorted((shared / folder).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition" and doc["spec"]["names"]["kind"] == kind:
                return next(v for v in doc["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    raise AssertionError(f"no CRD for {kind} under {shared / folder}")


def _resolve(s: dict, defs: dict) -> dict:
    while "$ref" in s:
        s = defs[s["$ref"].rsplit("/", 1)[-1]]
    return s


def _types(s: dict, defs: dict) -> set[str]:
    s = _resolve(s, defs)
    if s.get("x-kubernetes-int-or-string"):
        return {"string", "integer"}
    out: set[str] = set()
    t = s.get("type")
    out |= set([t] if isinstance(t, str) else t or []) - {"null"}
    for alt in s.get("oneOf", []) + s.get("anyOf", []):
        out |= _types(alt, defs)
    return out


EXPECTED = {
    "str": {"string"},
    "int": {"integer"},
    "bool": {"boolean"},
    "int_or_str": {"string", "integer"},
    "list": {"array"},
    "map": {"object"},
    "object": {"object"},
}


def agree(t: shape.T, s: dict, defs: dict, path: str, errors: list[str], crd: bool = False) -> None:
    s = _resolve(s, defs)
    got = _types(s, defs)
    if t.kind == "quantity":
        # core Quantity is string|number; a CRD's structural schema says int-or-string with a quantity pattern
        want = {"string", "integer"} if crd else {"string", "number"}
        if got != want:
            errors.append(f"{path}: declared a quantity, schema {sorted(got)}")
        return
    if got != EXPECTED[t.kind]:
        errors.append(f"{path}: declared {t.kind}, schema {sorted(got)}")
        return
    if t.kind == "list":
        agree(t.item, s["items"], defs, f"{path}[]", errors, crd)
    elif t.kind == "map":
        extra = s.get("additionalProperties")
        if not isinstance(extra, dict):
            errors.append(f"{path}: declared a map, schema has no additionalProperties")
        else:
            agree(t.item, extra, defs, f"{path}.*", errors, crd)
    elif t.kind == "object":
        props = s.get("properties", {})
        if t.fields and not props and not s.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{path}: declared fields {sorted(t.fields)}, schema has none")
        for key, sub in (t.fields or {}).items():
            if key not in props:
                if props:
                    errors.append(f"{path}.{key}: declared, not in the schema")
                continue
            agree(sub, props[key], defs, f"{path}.{key}", errors, crd)
        missing = set(t.required) - set(s.get("required", []))
        if missing:
            errors.append(f"{path}: declares {sorted(missing)} required, the schema does not")


def test_declared_core_types_are_kubernetes_1_34s(k8s_defs):
    errors: list[str] = []
    # The OpenAPI schema lists no required top-level field; the API server requires all three (decoding needs
    # apiVersion and kind, ObjectMeta validation a name): compared without them.
    top = shape.T("object", fields=shape_kubernetes.TOP.fields)
    agree(top, k8s_schema("Pod"), k8s_defs, "Pod", errors)
    for kind in CORE_FILES:
        agree(shape_kubernetes.SPECS[kind], k8s_schema(kind)["properties"]["spec"], k8s_defs, kind, errors)
    assert errors == []


def test_declared_custom_resource_types_are_the_crds(shared_reference):
    errors: list[str] = []
    for kind in CRD_KINDS:
        schema = crd_schema(shared_reference, kind)
        agree(shape_kubernetes.SPECS[kind], schema["properties"]["spec"], {}, kind, errors, crd=True)
    assert errors == []


def test_the_comparison_catches_a_wrong_declaration(k8s_defs):
    """The agreement check can fail: a declaration that calls env's value a number, or probes' periods strings."""
    wrong = OBJ({"containers": LIST(OBJ({"env": LIST(OBJ({"value": INT}))}))})
    errors: list[str] = []
    agree(wrong, k8s_defs["io.k8s.api.core.v1.PodSpec"], k8s_defs, "PodSpec", errors)
    assert errors == ["PodSpec.containers[].env[].value: declared int, schema ['string']"]


# ------------------------------------------------------------------------------------------------ what rules read
class Recording(dict):
    """A mapping that logs every key read through get/[]/in (a lower bound: copies made with dict() go unlogged)."""

    def __init__(self, data: dict, path: tuple, log: set):
        super().__init__({k: record(v, path + (k,), log) for k, v in data.items()})
        self._path, self._log = path, log

    def get(self, key, default=None):
        self._log.add(self._path + (key,))
        return super().get(key, default)

    def __getitem__(self, key):
        self._log.add(self._path + (key,))
        return super().__getitem__(key)

    def __contains__(self, key):
        self._log.add(self._path + (key,))
        return super().__contains__(key)


def record(value: Any, path: tuple, log: set) -> Any:
    if isinstance(value, dict):
        return Recording(value, path, log)
    if isinstance(value, list):
        return [record(v, path + ("[]",), log) for v in value]
    return value


def declared(kind: str, path: tuple) -> bool:
    """Whether shape.py types every step of a path the rules read (kinds without a spec: the top level only)."""
    t: Optional[shape.T] = shape_kubernetes.TOP
    for i, key in enumerate(path):
        if t.kind == "object" and i == 0 and key == "spec":
            t = shape_kubernetes.SPECS.get(kind)
            if t is None:
                return True  # a kind shape.py leaves untyped below its top level: the rules must cope (runner)
            continue
        if t.kind == "object" and t.fields and key in t.fields:
            t = t.fields[key]
        elif t.kind == "map":
            t = t.item
        elif t.kind == "list" and key == "[]":
            t = t.item
        else:
            return False
    return True


class _KindLog:
    """Where a Recording of one object logs: (the object's kind, path) into one set."""

    def __init__(self, kind: str, sink: set):
        self.kind, self.sink = kind, sink

    def add(self, path: tuple) -> None:
        self.sink.add((self.kind, path))


@pytest.mark.parametrize("stack", ["gb200-disagg", "gb300-disagg"])
def test_every_field_the_rules_read_is_declared(stack):
    rendered = render_stack(stack, ROOT)
    reads: set[tuple[str, tuple]] = set()
    objects = [Recording(obj, (), _KindLog(obj["kind"], reads)) for obj in rendered.objects]
    resources = resource_infos(rendered.resources)
    for rule in rules.RULES:  # the checks themselves, not evaluate (whose shape check would read everything)
        if rule.name == SHAPE:
            continue
        ctx = base.Context(rule.defaults(), resources)
        if rule.scope == "stack":
            list(rule.check(objects, ctx))
        else:
            for obj in objects:
                list(rule.check(obj, ctx))
    assert len(reads) > 100, f"the recorder saw too little to mean anything ({len(reads)} reads)"
    undeclared = sorted(f"{kind}: {'.'.join(map(str, p))}" for kind, p in reads if not declared(kind, p))
    assert undeclared == NOT_IN_ANY_SCHEMA


# Read by a rule but absent from the consumer's schema, so not declared (a value there is the runner's to survive):
# policies/rules/model_path.py reads v1alpha1's component annotations and policies/rules/qos.py v1alpha1's component
# resources, which v1beta1 components do not have; ConfigMap data (alerts-match-metric-units reads the dashboards)
# is outside any spec, which shape.py types for every kind alike.
NOT_IN_ANY_SCHEMA = [
    "ConfigMap: data",
    "DynamoGraphDeployment: spec.components.[].annotations",
    "DynamoGraphDeployment: spec.components.[].resources",
]


def test_the_recorder_sees_reads_outside_the_declaration():
    """The coverage check can fail: a read of a field shape.py does not type is reported."""
    assert declared("Job", ("spec", "template", "spec", "containers", "[]", "env", "[]", "value"))
    assert not declared("Job", ("spec", "template", "spec", "containers", "[]", "lifecycle"))
    assert not declared("DynamoGraphDeployment", ("spec", "components", "[]", "eppConfig", "x"))


# ------------------------------------------------------------------------------------------------ the property
@pytest.fixture(scope="module")
def samples() -> dict[str, dict]:
    objects = render_stack("gb300-disagg", ROOT).objects
    kinds = ("DynamoGraphDeployment", "Job", "DaemonSet", "PersistentVolumeClaim", "ComputeDomain", "ConfigMap")
    return {k: next(o for o in objects if o["kind"] == k) for k in kinds}


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, prefix + (i,))
    return out


def put(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def run_check(tmp: Path, docs: list[Any]) -> tuple[int, str]:
    path = tmp / "objects.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["check", str(path)])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue() + err.getvalue()


@functools.lru_cache(maxsize=None)
def _k8s_validator(kind: str, api_version: str) -> Optional[jsonschema.Validator]:
    """kubernetes-validate's own validator for a core kind (its utils.validate, built once, not per object)."""
    from referencing import Registry, Resource

    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = K8S / f"{kind.lower()}-{group}.json"
    if not path.is_file():
        return None
    registry = Resource.from_contents(json.loads(path.read_text())) @ Registry()
    registry = Resource.from_contents(json.loads((K8S / "_definitions.json").read_text())) @ registry
    return jsonschema.validators.Draft202012Validator(json.loads(path.read_text()), registry=registry)


def _k8s_type_errors(doc: dict) -> list[tuple]:
    """Errors the consumer's schema finds in a core object (Kubernetes 1.34, non-strict): (path, validator)."""
    validator = _k8s_validator(doc["kind"], doc["apiVersion"])
    # nulls dropped as the API server drops them (the bundled schemas put null in both arms of a Quantity's oneOf)
    return (
        []
        if validator is None
        else [(tuple(e.absolute_path), e.validator) for e in validator.iter_errors(_drop_nulls(doc))]
    )


@functools.lru_cache(maxsize=None)
def _crd_validator(shared: Path, kind: str) -> jsonschema.Validator:
    tool_path = shared.parent / "tools" / "validate_crds.py"
    spec = importlib.util.spec_from_file_location("validate_crds", tool_path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    schema = tool.to_jsonschema(copy.deepcopy(crd_schema(shared, kind)))
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def _drop_nulls(obj: Any) -> Any:  # as ../shared/tools/validate_crds.py: the API server drops null values
    if isinstance(obj, dict):
        return {k: _drop_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_drop_nulls(x) for x in obj]
    return obj


def _crd_type_errors(doc: dict, shared: Path) -> list[tuple]:
    return [
        (tuple(e.absolute_path), e.validator) for e in _crd_validator(shared, doc["kind"]).iter_errors(_drop_nulls(doc))
    ]


def _read_by_rules(kind: str, path: tuple) -> bool:
    return declared(kind, tuple("[]" if isinstance(k, int) else k for k in path))


def assert_property(code: int, output: str, doc: Any, file_name: str, consumer_errors: list[tuple]) -> None:
    assert "Traceback" not in output and code in (0, 1, 2), (code, output)
    problems = shape.problems(doc)
    if problems:
        assert code != 0, output
        if code == 1:  # reported as violations: each problem with the file, document and JSON path
            for p in problems:
                assert f"{file_name}: document 1" in output and str(p) in output, (str(p), output)
        else:  # no object at all in the file: one error naming the file
            assert file_name in output and "no Kubernetes objects" in output, output
    if code == 0:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        typed = [e for e in consumer_errors if e[1] in ("type", "oneOf", "anyOf") and _read_by_rules(kind, e[0])]
        assert problems == [] and typed == [], (typed, output)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_any_value_anywhere_in_a_core_object(samples, tmp_path, data):
    kind = data.draw(st.sampled_from(["Job", "DaemonSet", "PersistentVolumeClaim", "ConfigMap"]))
    doc = copy.deepcopy(samples[kind])
    where = data.draw(st.sampled_from(paths(doc)))
    doc = put(doc, where, data.draw(values))
    code, output = run_check(tmp_path, [doc])
    consumer = (
        _k8s_type_errors(doc)
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and isinstance(doc.get("apiVersion"), str)
        else []
    )
    assert_property(code, output, doc, "objects.yaml", consumer)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_any_value_anywhere_in_a_custom_resource(samples, shared_reference, tmp_path, data):
    kind = data.draw(st.sampled_from(["DynamoGraphDeployment", "ComputeDomain"]))
    doc = copy.deepcopy(samples[kind])
    where = data.draw(st.sampled_from(paths(doc)))
    doc = put(doc, where, data.draw(values))
    code, output = run_check(tmp_path, [doc])
    ok_top = isinstance(doc, dict) and doc.get("kind") == kind and doc.get("apiVersion") == samples[kind]["apiVersion"]
    consumer = _crd_type_errors(doc, shared_reference) if ok_top else []
    assert_property(code, output, doc, "objects.yaml", consumer)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(
        values | st.fixed_dictionaries({"apiVersion": values, "kind": values, "metadata": values}),
        min_size=1,
        max_size=3,
    )
)
def test_any_documents(tmp_path, docs):
    """Whole documents of any shape (lists, scalars, kind: 5, a missing apiVersion): never a traceback."""
    code, output = run_check(tmp_path, docs)
    assert "Traceback" not in output and code in (0, 1, 2), (code, output)
    assert "objects.yaml" in output
    assert code != 0 or not any(shape.problems(d) for d in docs if d is not None), output
